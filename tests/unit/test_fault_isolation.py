"""Fault isolation: one tenant's bad request never fails another's.

The server batches concurrent requests into one ``ServingCore.route_batch`` (one ``route_each``):
text the models cannot take is refused at prepare time (400, naming the field); a member whose
retrieval, tier call or memory write fails anyway gets its own error while every other member is
answered (turn-pairs stored once); and a batch where everything works keeps one call per step.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from memroute.accounting.cost import Pricing
from memroute.api.responses import error_body
from memroute.api.schema import parse_chat_request
from memroute.config import RetrievalConfig, RouterConfig
from memroute.config.api import ApiLimits
from memroute.config.schema import ModelConfig
from memroute.config.serve import ShadowConfig
from memroute.errors import BackendError, BackendUnavailable, InvalidRequest, NoTierAnswered
from memroute.namespace import namespace
from memroute.routing.isolation import Steps
from memroute.routing.router import Router, RouteRequest, Tier
from memroute.types import Message, RouteResult

from .fakes import FakeBackend, FakeRetriever

KEYS = {"sk-a": "acme", "sk-b": "globex"}
POISON = "hi \ud800 there"  # valid JSON ("\ud800"), not encodable as UTF-8
# tier 0 is confident except on "why" questions, which escalate to tier 1.
SMALL = ModelConfig(name="mock-small", engine="mock", params_b=0.5, engine_args={
    "answer": "Small answer.", "logprob": -0.05,
    "rules": [{"match": "(?i)^why\\b", "logprob": -2.5}],
})
LARGE = ModelConfig(name="mock-large", engine="mock", params_b=8.0,
                    engine_args={"answer": "Large answer.", "logprob": -0.01})
N_GOOD, BAD_AT = 32, 13  # the bad member sits in the middle of the batch


def make_core(tmp_path, monkeypatch, **overrides):
    from .fakes import serving_core

    return serving_core(tmp_path, monkeypatch, SMALL, LARGE, api_keys=KEYS, **overrides)


def body(text, user="alice", system=None):
    msgs = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": text}]
    return {"model": "memroute", "user": user, "messages": msgs}


def good_queries() -> list[str]:
    # every fourth one escalates, so tier 1 also answers a batch of several members
    return [f"{'Why' if k % 4 == 0 else 'What'} is fact number {k} of mine?" for k in range(N_GOOD)]


def mixed_batch(core, bad_text: str):
    """32 requests of tenant globex (8 users) with one request of tenant acme at BAD_AT."""
    prepared = [core.prepare(body(q, user=f"b{k % 8}"), "Bearer sk-b")
                for k, q in enumerate(good_queries())]
    prepared.insert(BAD_AT, core.prepare(body(bad_text, user="mallory"), "Bearer sk-a"))
    return prepared


class Calls:
    """Wraps a batched function: records the size of every call."""

    def __init__(self, fn, fail_if=None, exc=lambda: BackendError("engine failed")):
        self.fn, self.fail_if, self.exc, self.sizes = fn, fail_if, exc, []

    def __call__(self, batch, *a, **kw):
        self.sizes.append(len(batch))
        if self.fail_if is not None and any(self.fail_if(x) for x in batch):
            raise self.exc()
        return self.fn(batch, *a, **kw)


def has_poison(prompt) -> bool:
    return any("POISON" in m.content for m in prompt)


def assert_only_bad_failed(core, prepared, results, exc_type, status):
    assert len(results) == len(prepared)
    bad = results[BAD_AT]
    assert isinstance(bad, exc_type), bad
    assert core.error(bad, tenant="acme").status == status
    good = [(p, r) for i, (p, r) in enumerate(zip(prepared, results)) if i != BAD_AT]
    assert all(isinstance(r, RouteResult) for _, r in good), [r for _, r in good]
    for p, r in good:
        resp = core.respond(p, r, latency_s=0.01)
        assert resp.status == 200
        want = "Large answer." if p.chat.query.startswith("Why") else "Small answer."
        assert resp.body["choices"][0]["message"]["content"] == want
    # every good turn-pair stored exactly once, the bad member's not at all
    assert core.drain(10)
    for u in range(8):
        texts = sorted(m.user_text for m in core.store.list_user(namespace("globex", f"b{u}")))
        assert len(texts) == N_GOOD // 8
        assert all(sum(q in t for t in texts) == 1
                   for q in good_queries()[u::8]), texts
    assert core.store.list_user(namespace("acme", "mallory")) == []
    assert core.journal.stats().total == N_GOOD
    assert len(core.test_retriever.pairs) == N_GOOD  # no pair written twice to the store


def bisection_bound(n: int) -> int:
    return 1 + 2 * math.ceil(math.log2(n))


# ------------------------------------------------------------------ (a) refused at prepare time


@pytest.mark.parametrize("payload, field", [
    (body(POISON, system="be brief"), "messages[1].content"),
    (body("fine", system="be \udfff brief"), "messages[0].content"),
    ({"model": "memroute", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "ok"}, {"type": "text", "text": POISON}]}]},
     "messages[0].content[1].text"),
    (body("fine", user="al\ud83dice"), "user"),
    (body("hi \x00 there"), "messages[0].content"),
    ({"model": "mem\udc00route", "messages": [{"role": "user", "content": "hi"}]}, "model"),
])
def test_text_the_models_cannot_take_is_refused_with_400_naming_the_field(
        tmp_path, monkeypatch, payload, field):
    core = make_core(tmp_path, monkeypatch)
    try:
        with pytest.raises(InvalidRequest) as info:
            core.prepare(payload, "Bearer sk-a")
        assert info.value.field == field
        resp = core.error(info.value, tenant="acme")
        assert resp.status == 400 and resp.body["error"]["param"] == field
        msg = resp.body["error"]["message"]
        assert msg.startswith(field) and ("surrogate U+D" in msg or "NUL" in msg)
        assert msg.encode("utf-8")  # the error itself is sendable
        assert sum(b.prompts for b in core.test_backends) == 0
    finally:
        core.close()


def test_valid_unicode_passes_the_check():
    limits = ApiLimits()
    text = "caf\u00e9 \U0001f600 \u4e2d\u6587 tab\tnew\nline \ufffd"  # a real pair: one character
    req = parse_chat_request(body(text, user="\u00e9l\u00e8ve"), limits=limits)
    assert req.query == text and req.user == "\u00e9l\u00e8ve"
    # an escaped surrogate *pair* is one character once decoded: accepted
    escaped = '{"model": "m", "messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}'
    assert parse_chat_request(json.loads(escaped), limits=limits).query == "\U0001f600"


def test_a_poison_that_slips_past_the_schema_fails_only_itself(tmp_path, monkeypatch):
    """The reported defect: the embedder's tokenizer raises on a lone surrogate; before, the
    whole batch of the other tenant failed with it."""
    core = make_core(tmp_path, monkeypatch)
    try:
        inner = core.test_retriever.retrieve_many

        def tokenizer_like(user_ids, queries, *, top_k=None):
            for q in queries:
                q.encode("utf-8")  # raises UnicodeEncodeError, as the Rust tokenizer raises
            return inner(user_ids, queries, top_k=top_k)

        monkeypatch.setattr(core.test_retriever, "retrieve_many", tokenizer_like)
        prepared = mixed_batch(core, "placeholder")
        prepared[BAD_AT] = replace(prepared[BAD_AT], chat=replace(
            prepared[BAD_AT].chat, messages=[Message("user", POISON)]))  # as if unchecked
        results = core.route_batch(prepared)
        assert_only_bad_failed(core, prepared, results, UnicodeEncodeError, 500)
    finally:
        core.close()


# --------------------------------------------------- (b) one failing member fails only itself


def test_a_member_whose_memory_cannot_be_read_is_answered_without_it_and_flagged(tmp_path, monkeypatch):
    """The store (or the embedder) failing for one member: that member alone is answered without
    memories, flagged memory_degraded; the others keep theirs. Its own bad input (a 4xx) fails it."""
    core = make_core(tmp_path, monkeypatch)
    try:
        inner = core.test_retriever.retrieve_many
        bad_ns = namespace("acme", "mallory")
        sizes: list[int] = []

        def retrieve_many(user_ids, queries, *, top_k=None):
            sizes.append(len(user_ids))
            if bad_ns in user_ids:
                raise BackendError("milvus: search failed")
            return inner(user_ids, queries, top_k=top_k)

        monkeypatch.setattr(core.test_retriever, "retrieve_many", retrieve_many)
        prepared = mixed_batch(core, "What is my POISON?")
        results = core.route_batch(prepared)
        assert all(isinstance(r, RouteResult) for r in results)
        flags = [r.decision.memory_degraded for r in results]
        assert flags == [i == BAD_AT for i in range(len(results))]
        assert results[BAD_AT].decision.memories == []
        resp = core.respond(prepared[BAD_AT], results[BAD_AT], latency_s=0.01)
        assert resp.body["memroute"]["memory_degraded"] is True
        assert resp.headers["x-memroute-memory-degraded"] == "true"
        assert b"memroute_memory_degraded_total 1.0" in core.metrics()
        assert sizes[0] == N_GOOD + 1 and len(sizes) <= bisection_bound(N_GOOD + 1)
        assert core.drain(10)
        assert len(core.store.list_user(bad_ns)) == 1  # its new turn-pair was still remembered

        def refuse(user_ids, queries, *, top_k=None):
            if bad_ns in user_ids:
                raise InvalidRequest("the query cannot be embedded", field="messages")
            return inner(user_ids, queries, top_k=top_k)

        monkeypatch.setattr(core.test_retriever, "retrieve_many", refuse)
        results = core.route_batch(mixed_batch(core, "What is my POISON again?"))
        assert isinstance(results[BAD_AT], InvalidRequest)  # its own fault: failed, not degraded
        assert all(isinstance(r, RouteResult) for i, r in enumerate(results) if i != BAD_AT)
    finally:
        core.close()


@pytest.mark.parametrize("tier", [0, 1])
def test_a_member_whose_tier_call_raises_is_answered_by_the_other_tier_alone(
    tmp_path, monkeypatch, tier
):
    core = make_core(tmp_path, monkeypatch)
    try:
        backend = core.test_backends[tier]
        calls = Calls(backend.generate_many, fail_if=has_poison)
        monkeypatch.setattr(backend, "generate_many", calls)
        # "Why ..." escalates: the bad member then fails in the tier-1 batch of the escalations
        prepared = mixed_batch(core, "Why is this POISON here?" if tier else "POISON?")
        results = core.route_batch(prepared)
        bad = results[BAD_AT]
        # tier 0 failing: tier 1 answers; tier 1 failing: tier 0's rejected answer is the fallback
        assert isinstance(bad, RouteResult) and bad.decision.tiers_skipped == [tier]
        assert bad.decision.answered_tier == 1 - tier
        assert [c.accepted for c in bad.calls] == [True]
        assert all(isinstance(r, RouteResult) and r.decision.tiers_skipped == []
                   for i, r in enumerate(results) if i != BAD_AT)
        resp = core.respond(prepared[BAD_AT], bad, latency_s=0.01)
        assert resp.body["memroute"]["tiers_skipped"] == [tier]
        assert resp.headers["x-memroute-tiers-skipped"] == str(tier)
        assert f'memroute_tier_skipped_total{{tier="{tier}"}} 1.0'.encode() in core.metrics()
        batch = N_GOOD // 4 + 1 if tier else N_GOOD + 1
        assert calls.sizes[0] == batch  # the batched call was tried first
        assert len(calls.sizes) <= bisection_bound(batch)  # not one call per member
    finally:
        core.close()


def test_a_member_that_every_tier_fails_gets_503_alone(tmp_path, monkeypatch):
    core = make_core(tmp_path, monkeypatch)
    try:
        for backend in core.test_backends:
            monkeypatch.setattr(backend, "generate_many",
                                Calls(backend.generate_many, fail_if=has_poison))
        prepared = mixed_batch(core, "POISON?")
        results = core.route_batch(prepared)
        assert_only_bad_failed(core, prepared, results, NoTierAnswered, 503)
        error = core.error(results[BAD_AT], tenant="acme").body["error"]
        assert error["code"] == "tiers_unavailable" and error["message"] == (
            "no model tier answered (tier 0 (mock-small) failed, tier 1 (mock-large) failed); "
            "the request may be retried")
        assert "engine failed" in str(results[BAD_AT])  # the engines' text: in logs, not bodies
    finally:
        core.close()


def test_a_tier_that_is_down_is_skipped_by_the_whole_batch_without_bisection(tmp_path, monkeypatch):
    core = make_core(tmp_path, monkeypatch)
    try:
        small, large = core.test_backends
        down = lambda: BackendUnavailable("mock-small is down")  # noqa: E731
        calls0 = Calls(small.generate_many, fail_if=lambda _: True, exc=down)
        monkeypatch.setattr(small, "generate_many", calls0)
        prepared = [core.prepare(body(q, user=f"b{k % 8}"), "Bearer sk-b")
                    for k, q in enumerate(good_queries())]
        results = core.route_batch(prepared)
        assert calls0.sizes == [N_GOOD]  # one call to the dead tier, not 2n - 1
        assert {(r.answer, r.decision.answered_tier, tuple(r.decision.tiers_skipped))
                for r in results} == {("Large answer.", 1, (0,))}
        for p, r in zip(prepared, results):
            assert core.respond(p, r, latency_s=0.01).headers["x-memroute-tiers-skipped"] == "0"
        assert f'memroute_tier_skipped_total{{tier="0"}} {float(N_GOOD)}'.encode() in core.metrics()

        # the last tier down too: 503 for everyone, naming both tiers, one call each
        calls1 = Calls(large.generate_many, fail_if=lambda _: True,
                       exc=lambda: BackendUnavailable("mock-large is down"))
        monkeypatch.setattr(large, "generate_many", calls1)
        results = core.route_batch(prepared[:4])
        assert all(isinstance(r, NoTierAnswered) for r in results) and calls1.sizes == [4]
        err = core.error(results[0], tenant="globex")
        assert err.status == 503 and err.body["error"]["code"] == "tiers_unavailable"
        assert "tier 0 (mock-small) down, tier 1 (mock-large) down" in err.body["error"]["message"]

        # only the last tier down: confident answers are unaffected, the escalations fall back
        monkeypatch.setattr(small, "generate_many", calls0.fn)
        fresh = [core.prepare(body(q, user=f"c{k}"), "Bearer sk-b")  # no memories to echo
                 for k, q in enumerate(good_queries()[:4])]
        results = core.route_batch(fresh)  # the first is a "Why" question
        assert [r.decision.tiers_skipped for r in results] == [[1], [], [], []]
        assert {r.answer for r in results} == {"Small answer."}
    finally:
        core.close()


def test_a_member_whose_memory_write_raises_fails_alone(tmp_path, monkeypatch):
    core = make_core(tmp_path, monkeypatch)
    try:
        calls = Calls(core.journal.append, fail_if=lambda pair: "POISON" in pair.user_text,
                      exc=lambda: InvalidRequest("pair refused", field="user_text"))
        monkeypatch.setattr(core.journal, "append", calls)
        prepared = mixed_batch(core, "What about POISON?")
        results = core.route_batch(prepared)
        assert_only_bad_failed(core, prepared, results, InvalidRequest, 400)
        assert calls.sizes[0] == N_GOOD + 1
        assert sum(b.prompts for b in core.test_backends) == N_GOOD + 1 + N_GOOD // 4
    finally:
        core.close()


def test_the_shadow_judge_is_offered_only_the_answered_members(tmp_path, monkeypatch):
    core = make_core(tmp_path, monkeypatch, shadow=ShadowConfig(share=1.0))
    try:
        offered: list = []
        monkeypatch.setattr(core.shadow, "offer",
                            lambda qs, rs: offered.append((list(qs), list(rs))))
        monkeypatch.setattr(core.test_backends[0], "generate_many",
                            Calls(core.test_backends[0].generate_many, fail_if=has_poison))
        prepared = mixed_batch(core, "POISON?")
        results = core.route_batch(prepared)
        assert isinstance(results[BAD_AT], RouteResult) and results[BAD_AT].decision.tiers_skipped
        [(queries, res)] = offered
        assert len(queries) == len(results) and res == results
    finally:
        core.close()


# ------------------------------------------------------------- (c) the fast path is kept


def test_a_batch_that_works_makes_one_call_per_step(tmp_path, monkeypatch):
    core = make_core(tmp_path, monkeypatch)
    try:
        gens = []
        for b in core.test_backends:
            gens.append(Calls(b.generate_many))
            monkeypatch.setattr(b, "generate_many", gens[-1])
        retrievals = Calls(core.test_retriever.retrieve_many)
        monkeypatch.setattr(core.test_retriever, "retrieve_many", retrievals)
        writes = Calls(core.journal.append)
        monkeypatch.setattr(core.journal, "append", writes)
        prepared = [core.prepare(body(q, user=f"b{k % 8}"), "Bearer sk-b")
                    for k, q in enumerate(good_queries())]
        results = core.route_batch(prepared)
        assert all(isinstance(r, RouteResult) for r in results)
        assert gens[0].sizes == [N_GOOD]  # one probe batch
        assert gens[1].sizes == [N_GOOD // 4]  # one escalation batch
        assert retrievals.sizes == [N_GOOD]
        assert writes.sizes == [N_GOOD]
    finally:
        core.close()


# ------------------------------------------------------------------------- the Router itself


def router(retriever=None, small=None):
    small = small or FakeBackend("small", answer="Rex", logprob=-0.05)
    return Router([Tier("small", small, Pricing(0.5))], RouterConfig(tau=0.5),
                  RetrievalConfig(top_k=3), retriever or FakeRetriever())


def test_route_each_fails_an_invalid_member_alone_and_route_many_still_raises():
    retriever = FakeRetriever()
    r = router(retriever)
    reqs = [RouteRequest("alice", "dog?"), RouteRequest("bob", "   "),
            RouteRequest("bad id!", "x?"), RouteRequest("carol", "cat?")]
    out = r.route_each(reqs)
    assert [type(x).__name__ for x in out] == ["RouteResult", "InvalidRequest", "InvalidRequest",
                                               "RouteResult"]
    assert out[1].field == "query" and out[2].field == "user_id"
    assert [p.user_id for p in retriever.pairs] == ["alice", "carol"]
    with pytest.raises(InvalidRequest):
        r.route_many(reqs)
    assert len(retriever.pairs) == 2  # route_many raised before any model call or write


def test_route_many_raises_a_tier_failure_and_remembers_nothing():
    small = FakeBackend("small")
    calls = Calls(small.generate_many, fail_if=has_poison)
    small.generate_many = calls
    retriever = FakeRetriever()
    r = router(retriever, small)
    with pytest.raises(BackendError):
        r.route_many([RouteRequest("alice", "dog?"), RouteRequest("bob", "POISON?")])
    assert calls.sizes == [2] and retriever.pairs == []
    out = r.route_each([RouteRequest("alice", "dog?"), RouteRequest("bob", "POISON?")])
    assert isinstance(out[0], RouteResult) and isinstance(out[1], NoTierAnswered)
    assert [p.user_id for p in retriever.pairs] == ["alice"]


def test_bisection_finds_every_failing_member_with_its_own_exception():
    def step(xs):
        bad = [x for x in xs if x % 7 == 3]
        if bad:
            raise ValueError(f"member {bad[0]}")
        return [x * 10 for x in xs]

    out = Steps(isolate=True).batch(step, list(range(20)))
    for x, r in zip(range(20), out):
        if x % 7 == 3:
            assert isinstance(r, ValueError) and str(r) == f"member {x}"
        else:
            assert r == x * 10
    with pytest.raises(ValueError):
        Steps(isolate=False).batch(step, list(range(20)))
    # a step that answers for the wrong number of members is a failure, not a misalignment
    short = Steps(isolate=True).batch(lambda xs: xs[:-1] if len(xs) > 1 else xs, [1, 2, 3])
    assert short == [1, 2, 3]
    assert Steps(isolate=True).batch(step, []) == []


def test_error_body_of_the_refusal_names_the_field():
    with pytest.raises(InvalidRequest) as info:
        parse_chat_request(body(POISON, system="s"), limits=ApiLimits())
    status, err = error_body(info.value)
    assert status == 400 and err["error"]["param"] == "messages[1].content"
    assert "lone surrogate U+D800 at position 3" in err["error"]["message"]
