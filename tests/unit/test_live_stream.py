"""A streamed escalated answer goes out as the answering tier generates it: the probe's tokens are
held until its confidence is known, the last tier's pieces are sent as they come, and the turn
is recorded (call, report, turn-pair, idempotency record) only once the stream completed."""

from __future__ import annotations

import json

from memroute.accounting.cost import Pricing
from memroute.config import RetrievalConfig, RouterConfig
from memroute.config.schema import ModelConfig
from memroute.errors import BackendUnavailable
from memroute.routing.router import RouteRequest, Router, Tier

from .fakes import FakeBackend, FakeRetriever, serving_core


class Streaming(FakeBackend):
    """Streams its answer word by word; ``log`` records what happened in order."""

    def __init__(self, model_id, answer="the sea is deep", *, fail=False, **kw):
        super().__init__(model_id, answer=answer, **kw)
        self.log: list[str] = []
        self.fail = fail

    def stream(self, messages, *, max_tokens=32, stop=None, temperature=0.0, options=None):
        if self.fail:
            raise BackendUnavailable("tier down", field="model")
        reply = self.generate(messages, max_tokens=max_tokens)
        for i, word in enumerate(reply.text.split()):
            self.log.append(f"piece {i}")
            yield (" " if i else "  ") + word  # leading whitespace is held back
        self.log.append("reply")
        yield reply


def router(probe, large, retriever=None):
    tiers = [Tier("small", probe, Pricing(0.5)), Tier("large", large, Pricing(8.0))]
    return Router(tiers, RouterConfig(tau=0.5, max_tokens=8), RetrievalConfig(top_k=3),
                  retriever if retriever is not None else FakeRetriever())


def test_the_escalated_tier_streams_and_the_turn_is_recorded_when_it_ends():
    probe, large, mem = Streaming("small", logprob=-3.0), Streaming("large"), FakeRetriever()
    [res] = router(probe, large, mem).route_each([RouteRequest("alice", "Tell me", stream=True)])
    assert res.stream is not None and probe.log == []  # the probe answered in its batch
    assert res.decision.escalated and len(res.calls) == 1 and mem.pairs == []
    pieces = []
    for piece in res.stream:
        pieces.append(piece)
        if len(pieces) == 1:
            assert large.log == ["piece 0"] and mem.pairs == []  # sent before the rest exists
    assert "".join(pieces) == "the sea is deep" == res.answer
    assert [c.tier for c in res.calls] == [0, 1] and res.calls[1].accepted
    assert res.reply is not None and len(res.decision.confidences) == 2
    [pair] = mem.pairs
    assert (pair.user_text, pair.assistant_text) == ("Tell me", "the sea is deep")


def test_a_confident_probe_is_held_then_sent_whole_not_streamed():
    probe, large = Streaming("small", logprob=-0.01), Streaming("large")
    [res] = router(probe, large).route_each([RouteRequest("alice", "hi", stream=True)])
    assert res.stream is None and res.answer == "the sea is deep" and probe.log == large.log == []


def test_a_tier_down_before_its_first_piece_gives_way_to_the_rejected_probe_answer():
    probe, large = Streaming("small", answer="probe answer", logprob=-3.0), Streaming("large", fail=True)
    [res] = router(probe, large).route_each([RouteRequest("alice", "hi", stream=True)])
    assert list(res.stream) == ["probe answer"]
    assert res.answer == "probe answer" and res.decision.answered_tier == 0
    assert res.decision.tiers_skipped == [1]


SMALL = ModelConfig(name="mock-small", engine="mock", params_b=0.5,
                    engine_args={"answer": "Small answer.", "logprob": -2.5})
LARGE = ModelConfig(name="mock-large", engine="mock", params_b=8.0,
                    engine_args={"answer": "Large answer.", "logprob": -0.01})


def live_core(tmp_path, monkeypatch):
    core = serving_core(tmp_path, monkeypatch, SMALL, LARGE, api_keys={"sk-a": "acme"})
    streaming = Streaming("mock-large", answer="a long streamed answer")
    core.router.tiers[1].backend = streaming
    return core, streaming


def events_of(frames):
    return [json.loads(f[6:]) for f in frames if f.startswith("data: {")]


def test_the_served_stream_sends_chunks_as_they_come_and_the_report_last(tmp_path, monkeypatch):
    core, streaming = live_core(tmp_path, monkeypatch)
    body = {"model": "memroute", "stream": True, "user": "ann",
            "messages": [{"role": "user", "content": "Tell me"}],
            "stream_options": {"include_usage": True}}
    prepared = core.prepare(body, "Bearer sk-a")
    [result] = core.route_batch([prepared])
    resp = core.respond_live(prepared, result, started=0.0)
    assert resp.live and resp.headers["x-memroute-tier"] == "1"
    frames = iter(resp.events)
    seen = [next(frames), next(frames)]  # the role chunk, then the first piece
    assert streaming.log == ["piece 0"]
    seen += list(frames)
    events = events_of(seen)
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
    assert text == "a long streamed answer"
    final = next(e for e in events if "memroute" in e)
    assert final["memroute"]["escalated"] and len(final["memroute"]["calls"]) == 2
    assert events[-1]["usage"]["completion_tokens"] > 0 and seen[-1] == "data: [DONE]\n\n"
    core.drain()
    assert [p.assistant_text for p in core.test_retriever.pairs] == ["a long streamed answer"]
    core.close()


def test_a_keyed_stream_is_recorded_once_complete_and_replayed(tmp_path, monkeypatch):
    core, streaming = live_core(tmp_path, monkeypatch)
    body = {"model": "memroute", "stream": True, "messages": [{"role": "user", "content": "Tell"}]}
    prepared = core.prepare(body, "Bearer sk-a", "key-1")
    assert core.begin(prepared) is None
    [result] = core.route_batch([prepared])
    resp = core.respond_live(prepared, result, started=0.0)
    core.release(prepared)  # what the ingress does before the stream is read: a no-op now
    frames = list(resp.events)
    again = core.prepare(body, "Bearer sk-a", "key-1")
    replay = core.begin(again)
    assert replay is not None and replay.events == frames
    assert streaming.log.count("reply") == 1
    core.close()


def test_a_stream_that_fails_midway_ends_with_an_openai_error_event(tmp_path, monkeypatch):
    core, streaming = live_core(tmp_path, monkeypatch)

    def broken(messages, **kw):
        yield "half"
        raise RuntimeError("engine crashed")

    streaming.stream = broken
    prepared = core.prepare({"model": "memroute", "stream": True, "user": "bo",
                             "messages": [{"role": "user", "content": "Tell"}]}, "Bearer sk-a")
    [result] = core.route_batch([prepared])
    frames = list(core.respond_live(prepared, result, started=0.0).events)
    error = events_of(frames)[-1]
    assert error["error"]["type"] == "server_error" and "engine" not in error["error"]["message"]
    assert frames[-1] == "data: [DONE]\n\n"
    core.drain()
    assert core.test_retriever.pairs == []  # an answer never completed is not remembered
    core.close()
