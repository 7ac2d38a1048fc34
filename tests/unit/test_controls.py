"""Per-request controls (the `memroute` body object, x-memroute-* headers, memroute/<tier>
model names): validated with a 400 naming the field, honoured by the router, echoed back."""

from __future__ import annotations

import pytest

from memroute.api.controls import Controls, parse_controls
from memroute.config.schema import ModelConfig
from memroute.errors import InvalidRequest
from memroute.namespace import namespace

from .fakes import call_like_ingress, model_calls, serving_core

TIERS = ["mock-small", "mock-large"]
SMALL = ModelConfig(name="mock-small", engine="mock", params_b=0.5, engine_args={
    "answer": "Small answer.", "rules": [{"match": "(?i)^why\\b", "logprob": -2.5}]})
LARGE = ModelConfig(name="mock-large", engine="mock", params_b=8.0,
                    engine_args={"answer": "Large answer.", "logprob": -0.01})


def parse(body, headers=None, model_tier=None):
    return parse_controls(body, headers, tiers=TIERS, tau_range=(0.2, 0.9), model_tier=model_tier)


def test_controls_from_the_body_or_headers_and_the_body_wins():
    assert parse({}) == Controls()
    assert parse({"memroute": {"store": False, "tier": "mock-large", "tau": 0.3}}) == \
        Controls(store=False, tier=1, tau=0.3)
    headers = {"x-memroute-use-memory": "false", "x-memroute-tier": "0", "x-memroute-tau": "0.8"}
    assert parse({}, headers) == Controls(use_memory=False, tier=0, tau=0.8)
    assert parse({"memroute": {"tau": 0.5}}, headers).tau == 0.5
    assert parse({}, model_tier=1).tier == 1  # model: memroute/mock-large


@pytest.mark.parametrize("body, headers, field", [
    ({"memroute": {"stor": False}}, None, "memroute.stor"),
    ({"memroute": "yes"}, None, "memroute"),
    ({"memroute": {"store": "no"}}, None, "memroute.store"),
    ({"memroute": {"tau": 0.95}}, None, "memroute.tau"),  # outside api.tau_range
    ({"memroute": {"tau": True}}, None, "memroute.tau"),
    ({"memroute": {"tier": 2}}, None, "memroute.tier"),
    ({"memroute": {"tier": "gpt-4"}}, None, "memroute.tier"),
    ({}, {"x-memroute-store": "maybe"}, "x-memroute-store"),
])
def test_bad_controls_are_a_400_naming_the_field(body, headers, field):
    with pytest.raises(InvalidRequest) as e:
        parse(body, headers)
    assert e.value.field == field


def test_a_tier_pinned_twice_must_agree():
    with pytest.raises(InvalidRequest) as e:
        parse({"memroute": {"tier": 0}}, model_tier=1)
    assert e.value.field == "memroute.tier"


@pytest.fixture
def core(tmp_path, monkeypatch):
    core = serving_core(tmp_path, monkeypatch, SMALL, LARGE, api_keys={"sk-a": "acme"})
    yield core
    core.close()


def ask(core, text, user="alice", model="memroute", **controls):
    body = {"model": model, "user": user, "messages": [{"role": "user", "content": text}]}
    if controls:
        body["memroute"] = controls
    resp = call_like_ingress(core, body)
    assert resp.status == 200, resp.body
    return resp.body["memroute"]


def stored(core, user="alice"):
    assert core.drain(10)
    return [m.user_text for m in core.store.list_user(namespace("acme", user))]


def test_store_false_answers_with_memory_and_remembers_nothing(core):
    ask(core, "My locker code is 4471.")
    m = ask(core, "What is my locker code?", store=False)
    assert m["memories_used"]["count"] == 1 and m["controls"]["store"] is False
    assert stored(core) == ["My locker code is 4471."]


def test_use_memory_false_reads_nothing_but_remembers(core):
    ask(core, "My locker code is 4471.")
    m = ask(core, "What is my locker code?", use_memory=False)
    assert m["memories_used"]["count"] == 0 and m["tokens"]["injected"] == 0
    assert len(stored(core)) == 2


def test_a_pinned_tier_answers_alone_and_tau_moves_the_threshold(core):
    before = model_calls(core)
    m = ask(core, "What is the capital of France?", tier=1)
    assert (m["tier"], len(m["calls"]), m["controls"]["tier"]) == (1, 1, 1)
    assert m["escalated"] is False  # pinned, not escalated
    assert model_calls(core) - before == 1  # tier 0 was never asked
    m = ask(core, "What is the capital of Spain?", model="memroute/mock-large")
    assert m["tier"] == 1 and len(m["calls"]) == 1
    m = ask(core, "Why is the sky blue?", tier=0)  # low confidence, but pinned: accepted
    assert m["tier"] == 0 and m["escalated"] is False
    assert ask(core, "Why is grass green?")["tier"] == 1  # escalates at the router's tau 0.5
    assert ask(core, "Why is snow white?", tau=0.1)["tier"] == 0  # confidence 1/6 >= 0.1


def test_models_lists_the_cascade_and_each_tier(core):
    body = core.models("Bearer sk-a").body
    assert [m["id"] for m in body["data"]] == ["memroute", "memroute/mock-small",
                                               "memroute/mock-large"]
