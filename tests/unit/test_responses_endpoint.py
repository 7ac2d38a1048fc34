"""POST /v1/responses through the serving core (what the ingress does, in-process): the same
routing and memory as chat, the answer in the Responses shape (validated by the openai SDK's
own models), errors naming the Responses fields, and an idempotent retry replayed."""

from __future__ import annotations

import json

import pydantic
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from memroute.config.schema import ModelConfig
from memroute.namespace import namespace

from .fakes import model_calls, serving_core

SMALL = ModelConfig(name="mock-small", engine="mock", params_b=0.5, engine_args={
    "answer": "Small answer.", "rules": [{"match": "(?i)^why\\b", "logprob": -2.5}]})
LARGE = ModelConfig(name="mock-large", engine="mock", params_b=8.0,
                    engine_args={"answer": "Large answer.", "logprob": -0.01})
EVENTS = pydantic.TypeAdapter(ResponseStreamEvent)


@pytest.fixture
def core(tmp_path, monkeypatch):
    c = serving_core(tmp_path, monkeypatch, SMALL, LARGE, api_keys={"sk-a": "acme"})
    yield c
    c.close()


def respond(core, body, key=None):
    try:
        prepared = core.prepare_responses(body, "Bearer sk-a", key)
        replay = core.begin(prepared)
        if replay is not None:
            return replay
        result = core.route_batch([prepared])[0]
        if isinstance(result, BaseException):
            raise result
        return core.respond(prepared, result, latency_s=0.01)
    except Exception as exc:  # noqa: BLE001
        return core.error(exc)


def test_a_response_object_routed_like_chat_and_remembered(core):
    resp = respond(core, {"model": "memroute", "input": "Why is the sky blue?", "user": "ann",
                          "instructions": "Be brief."})
    assert resp.status == 200
    r = Response.model_validate(resp.body)
    assert r.output_text == "Large answer." and r.status == "completed"
    assert resp.body["memroute"]["escalated"] and resp.body["memroute"]["tier"] == 1
    assert r.usage.input_tokens == sum(c["tokens"]["base"] + c["tokens"]["injected"]
                                       + c["tokens"]["history"] for c in resp.body["memroute"]["calls"])
    core.drain()
    assert [p.user_text for p in core.test_retriever.pairs] == ["Why is the sky blue?"]
    assert core.test_retriever.pairs[0].user_id == namespace("acme", "ann")


def test_the_stream_is_openais_event_sequence_and_joins_to_the_answer(core):
    resp = respond(core, {"model": "memroute", "input": [{"role": "user", "content": "hello"}],
                          "stream": True})
    assert resp.status == 200 and resp.media_type == "text/event-stream"
    events = [EVENTS.validate_python(json.loads(frame.split("data: ", 1)[1]))
              for frame in resp.events]
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == events[-1].response.output_text == "Small answer."
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_errors_name_the_responses_fields_and_call_no_model(core):
    cases = [({"model": "memroute", "input": "hi", "max_output_tokens": 10**9}, "max_output_tokens"),
             ({"model": "memroute", "input": "hi", "previous_response_id": "resp_1"},
              "previous_response_id"),
             ({"model": "memroute", "input": [{"role": "user", "content": "x" * 10**6}]}, "input"),
             ({"model": "nope", "input": "hi"}, "model")]
    for body, field in cases:
        resp = respond(core, body)
        assert 400 <= resp.status < 500 and resp.body["error"]["param"] == field, (field, resp.body)
    assert model_calls(core) == 0


def test_an_idempotent_retry_is_replayed_not_routed_again(core):
    body = {"model": "memroute", "input": "hello", "user": "bo"}
    first = respond(core, body, key="k-1")
    calls = model_calls(core)
    again = respond(core, body, key="k-1")
    assert again.body == first.body and again.headers.get("idempotent-replayed") == "true"
    assert model_calls(core) == calls
