"""Response bodies, routing headers, SSE streaming, error bodies and the ChatApi flow."""

from __future__ import annotations

import json
import random

import pytest

from memroute.config.api import ApiConfig, ApiLimits
from memroute.api.handler import ChatApi
from memroute.api.responses import (
    chat_completion,
    error_body,
    finish_reason,
    memroute_headers,
    models_list,
    split_for_stream,
    stream_chunks,
)
from memroute.api.schema import ChatRequest
from memroute.api.tenancy import ApiKeys
from memroute.namespace import namespace
from memroute.errors import (
    AssetError,
    BackendError,
    ConfigError,
    InvalidRequest,
    MemrouteError,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
)
from memroute.types import CallRecord, Memory, Message, RetrievalHit, RouteDecision, RouteResult

BIG_ID = 2**63 - 1  # above 2**53: must survive JSON as a string


def hit(mid: int) -> RetrievalHit:
    memory = Memory(id=mid, user_id="acme:alice", text="dog is Rex", session_time=0)
    return RetrievalHit(memory, 0.5)


def make_result(answer: str = "Rex the dog", escalated: bool = True) -> RouteResult:
    """Tier 0 (0.5B) below tau, tier 1 (7B) answers; EffCost = (in + 4 out) * P / 8."""
    small = CallRecord(tier=0, model_id="small", base_prompt_tokens=40, injected_tokens=25,
                       output_tokens=3, eff_cost=(65 + 12) * 0.5 / 8, latency_s=0.12,
                       confidence=0.31, accepted=not escalated, params_b=0.5)
    large = CallRecord(tier=1, model_id="large", base_prompt_tokens=42, injected_tokens=60,
                       output_tokens=5, eff_cost=(102 + 20) * 7 / 8, latency_s=0.9,
                       confidence=0.82, accepted=True, params_b=7.0)
    calls = [small, large] if escalated else [small]
    decision = RouteDecision(
        answered_tier=calls[-1].tier, answered_model=calls[-1].model_id,
        confidences=[c.confidence for c in calls], escalated=escalated,
        memories=[hit(BIG_ID), hit(12345)],
    )
    return RouteResult(answer, decision, calls)


def chat(**kw) -> ChatRequest:
    kw.setdefault("model", "memroute")
    kw.setdefault("messages", [Message("user", "what is my dog called?")])
    kw.setdefault("user", "alice")
    kw.setdefault("user_given", True)
    return ChatRequest(**kw)


# ------------------------------------------------------------------------------- completion


def test_chat_completion_shape():
    body = chat_completion(make_result(), chat(), created=1700000000, completion_id="chatcmpl-1")
    assert {k: body[k] for k in ("id", "object", "created", "model")} == {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "memroute",
    }
    (choice,) = body["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] == "stop"
    assert choice["message"] == {"role": "assistant", "content": "Rex the dog"}
    # Usage sums every call of the cascade: (40+25)+(42+60) prompt, 3+5 output.
    assert body["usage"] == {"prompt_tokens": 167, "completion_tokens": 8, "total_tokens": 175,
                             "prompt_tokens_details": {"cached_tokens": 0}}
    m = body["memroute"]
    assert (m["tier"], m["model"], m["escalated"]) == (1, "large", True)
    assert m["confidences"] == [0.31, 0.82]
    assert m["memories_used"] == {"count": 2, "ids": [str(BIG_ID), "12345"]}
    assert m["tokens"] == {"base": 82, "injected": 85, "history": 0, "output": 8, "cached": 0}
    assert m["eff_cost"] == pytest.approx(4.8125 + 106.75)
    assert m["latency_ms"] == [120.0, 900.0]
    assert [c["tier"] for c in m["calls"]] == [0, 1]
    assert [c["accepted"] for c in m["calls"]] == [False, True]
    assert m["calls"][1]["tokens"] == {"base": 42, "injected": 60, "history": 0, "output": 5,
                                      "cached": 0}
    # Round-trips through JSON with the 64-bit id intact.
    back = json.loads(json.dumps(body))
    assert int(back["memroute"]["memories_used"]["ids"][0]) == BIG_ID


def test_not_escalated_result():
    body = chat_completion(make_result(escalated=False), chat(), created=0, completion_id="c")
    m = body["memroute"]
    assert (m["tier"], m["escalated"], m["confidences"], len(m["calls"])) == (0, False, [0.31], 1)


def test_finish_reason_length_when_the_answer_used_its_budget():
    result = make_result()  # the answering call produced 5 tokens
    assert finish_reason(result, None) == "stop"
    assert finish_reason(result, 6) == "stop"
    assert finish_reason(result, 5) == "length"


def test_headers_carry_the_report():
    h = memroute_headers(make_result())
    assert h == {
        "x-memroute-tier": "1",
        "x-memroute-model": "large",
        "x-memroute-escalated": "true",
        "x-memroute-memory-degraded": "false",
        "x-memroute-tiers-skipped": "",
        "x-memroute-confidence": "0.3100,0.8200",
        "x-memroute-eff-cost": "111.562",
        "x-memroute-tokens-base": "82",
        "x-memroute-tokens-injected": "85",
        "x-memroute-tokens-history": "0",
        "x-memroute-tokens-output": "8",
        "x-memroute-tokens-cached": "0",
        "x-memroute-memories": "2",
        "x-memroute-memory-ids": f"{BIG_ID},12345",
        "x-memroute-latency-ms": "120.0,900.0",
    }
    assert memroute_headers(make_result(escalated=False))["x-memroute-escalated"] == "false"


def test_header_values_are_single_line_ascii():
    result = make_result()
    result.decision.answered_model = "evil\r\nset-cookie: x=1\u00e9"
    value = memroute_headers(result)["x-memroute-model"]
    assert value == "evil??set-cookie: x=1?"
    assert all(32 <= ord(c) < 127 for v in memroute_headers(result).values() for c in v)


# -------------------------------------------------------------------------------- streaming


def parse_events(events: list[str]) -> list[dict]:
    assert events[-1] == "data: [DONE]\n\n"
    out = []
    for e in events[:-1]:
        assert e.startswith("data: ") and e.endswith("\n\n") and e.count("\n") == 2
        out.append(json.loads(e[len("data: "):]))
    return out


@pytest.mark.parametrize(
    "answer",
    ["Rex the dog", "", "Rex", "  leading and trailing  ", "line one\nline two\n\n  x",
     "tabs\tand  double  spaces", "émoji 🐕 ok", "\n"],
)
def test_stream_concatenates_to_the_non_stream_text(answer):
    result = make_result(answer)
    events = parse_events(stream_chunks(result, chat(stream=True), created=5, completion_id="c-9"))
    assert all(e["object"] == "chat.completion.chunk" and e["id"] == "c-9" for e in events)
    assert all(e["model"] == "memroute" and e["created"] == 5 for e in events)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events)
    plain = chat_completion(result, chat(), created=5, completion_id="c-9")
    assert text == plain["choices"][0]["message"]["content"] == answer
    assert [e["choices"][0]["finish_reason"] for e in events[:-1]] == [None] * (len(events) - 1)
    last = events[-1]
    assert last["choices"][0] == {
        "index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"
    }
    assert last["memroute"] == plain["memroute"]
    assert "usage" not in last


def test_stream_sends_words_as_separate_chunks():
    chunks = stream_chunks(make_result("Rex the dog"), chat(), created=0, completion_id="c")
    events = parse_events(chunks)
    pieces = [e["choices"][0]["delta"].get("content") for e in events[1:-1]]
    assert pieces == ["Rex", " the", " dog"]


def test_stream_usage_chunk_when_asked():
    events = parse_events(
        stream_chunks(
            make_result(), chat(stream=True, include_usage=True), created=0, completion_id="c"
        )
    )
    assert events[-1]["choices"] == []
    assert events[-1]["usage"] == {
        "prompt_tokens": 167, "completion_tokens": 8, "total_tokens": 175,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    assert events[-2]["choices"][0]["finish_reason"] == "stop"


def test_split_for_stream_is_lossless():
    rng = random.Random(3)
    for _ in range(500):
        text = "".join(rng.choice("ab \n\té.") for _ in range(rng.randint(0, 30)))
        pieces = split_for_stream(text)
        assert "".join(pieces) == text
        assert all(pieces)


# ----------------------------------------------------------------------------------- errors


class Unprocessable(MemrouteError):
    status = 422
    code = "unprocessable"


@pytest.mark.parametrize(
    "exc,status,kind,param,code",
    [
        (InvalidRequest("messages is required", field="messages"), 400, "invalid_request_error",
         "messages", "invalid_request_error"),
        (Unauthorized("invalid API key", field="authorization"), 401, "authentication_error",
         "authorization", "invalid_api_key"),
        (NotFound("no such model", field="model"), 404, "invalid_request_error", "model",
         "model_not_found"),
        (PayloadTooLarge("too big", field="messages"), 413, "invalid_request_error", "messages",
         "payload_too_large"),
        (Unprocessable("cannot", field="x"), 422, "invalid_request_error", "x", "unprocessable"),
    ],
)
def test_client_errors_keep_message_and_field(exc, status, kind, param, code):
    got, body = error_body(exc)
    assert got == status
    assert body == {"error": {"message": exc.message, "type": kind, "param": param, "code": code}}


@pytest.mark.parametrize(
    "exc,status,code",
    [
        (BackendError("upstream http://10.0.0.5:8000/v1 said 500: secret"), 502, "backend_error"),
        (AssetError("missing /home/secret/model.gguf"), 500, "asset_error"),
        (ConfigError("router.tau secret", field="router.tau"), 500, "config_error"),
        (RuntimeError("KeyError in /srv/secret.py"), 500, "internal_error"),
    ],
)
def test_server_errors_do_not_leak_internals(exc, status, code):
    got, body = error_body(exc)
    assert got == status
    err = body["error"]
    assert err["type"] == "server_error" and err["code"] == code and err["param"] is None
    assert "secret" not in err["message"] and err["message"]


def test_models_list():
    assert models_list(["memroute", "memroute-large"], created=7) == {
        "object": "list",
        "data": [
            {"id": "memroute", "object": "model", "created": 7, "owned_by": "memroute"},
            {"id": "memroute-large", "object": "model", "created": 7, "owned_by": "memroute"},
        ],
    }


# ---------------------------------------------------------------------------------- ChatApi


def api() -> ChatApi:
    cfg = ApiConfig(
        limits=ApiLimits(max_input_chars=50),
        api_keys={"sk-a": "acme", "sk-g": "globex"},
        api_keys_env=[],
    )
    return ChatApi(cfg, ApiKeys.from_api_config(cfg, environ={}), clock=lambda: 1234.9)


BODY = {"model": "memroute", "user": "alice", "messages": [{"role": "user", "content": "my dog?"}]}


def test_prepare_binds_the_namespace_to_the_key():
    a = api()
    p = a.prepare(BODY, "Bearer sk-a")
    assert (p.tenant, p.user_id, p.chat.query) == ("acme", "acme:alice", "my dog?")
    from memroute.serving.core import route_request

    req = route_request(p)
    assert (req.user_id, req.query) == ("acme:alice", "my dog?")
    # The same `user` under another key is another namespace.
    assert a.prepare(BODY, "Bearer sk-g").user_id == "globex:alice"
    assert a.prepare({**BODY, "user": "acme:alice"}, "Bearer sk-g").user_id == namespace(
        "globex", "acme:alice")
    assert a.prepare({k: v for k, v in BODY.items() if k != "user"}, "Bearer sk-a").user_id == (
        "acme:default")


def test_key_is_checked_before_the_body():
    with pytest.raises(Unauthorized):
        api().prepare({"messages": 5}, "Bearer wrong")
    with pytest.raises(InvalidRequest):
        api().prepare({"messages": 5}, "Bearer sk-a")


def test_respond_json_and_stream():
    a = api()
    p = a.prepare(BODY, "Bearer sk-a")
    r = a.respond(p, make_result(), latency_s=1.0)
    assert r.status == 200 and r.media_type == "application/json" and r.events is None
    assert r.body["created"] == 1234 and r.body["id"].startswith("chatcmpl-")
    assert r.headers["x-memroute-tier"] == "1"
    s = a.respond(a.prepare({**BODY, "stream": True}, "Bearer sk-a"), make_result(), latency_s=1.0)
    assert s.media_type == "text/event-stream" and s.body is None
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in parse_events(s.events)) == (
        "Rex the dog")
    assert s.headers == r.headers


def test_error_and_models_responses():
    a = api()
    r = a.error(Unauthorized("missing API key", field="authorization"))
    assert (r.status, r.headers) == (401, {"www-authenticate": "Bearer"})
    assert r.body["error"]["code"] == "invalid_api_key"
    assert a.models(None).status == 401
    ok = a.models("Bearer sk-g")
    assert ok.status == 200 and [m["id"] for m in ok.body["data"]] == ["memroute"]
