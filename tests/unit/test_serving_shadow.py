"""The serving path's live confidently-wrong estimate (memroute/serving/shadow.py): sampled answers
the first tier accepted are re-asked of the last tier in the background; disagreement is counted
and exported on /metrics, escalated answers are never sampled, and a failing or saturated judge
never touches the requests."""

from __future__ import annotations

import threading

import pytest

from memroute.config.schema import ModelConfig
from memroute.config.serve import ServeConfig, ShadowConfig, check_serve_config
from memroute.errors import ConfigError

KEYS = {"sk-a": "acme"}
# tier 0 is confident on everything except "why" questions; it says Paris, except about colours.
SMALL = ModelConfig(name="mock-small", engine="mock", params_b=0.5, engine_args={
    "answer": "Paris", "logprob": -0.05,
    "rules": [{"match": "(?i)^why\\b", "logprob": -2.5}, {"match": "(?i)colour", "answer": "blue"}],
})
LARGE = ModelConfig(name="mock-large", engine="mock", params_b=8.0,
                    engine_args={"answer": "Paris", "logprob": -0.01,
                                 "rules": [{"match": "(?i)colour", "answer": "green"}]})


def make_core(tmp_path, monkeypatch, share=1.0, **shadow):
    from .fakes import serving_core

    return serving_core(tmp_path, monkeypatch, SMALL, LARGE, api_keys=KEYS,
                        shadow=ShadowConfig(share=share, **shadow))


def ask(core, text: str, user: str = "alice"):
    body = {"model": "memroute", "user": user, "messages": [{"role": "user", "content": text}]}
    prepared = core.prepare(body, "Bearer sk-a")
    return core.respond(prepared, core.route_batch([prepared])[0], latency_s=0.01)


def metric(core, name: str, tier: str | None = None) -> float:
    label = f'{{tier="{tier}"}}' if tier is not None else ""
    for line in core.metrics().decode().splitlines():
        if line.startswith(f"{name}{label} "):
            return float(line.split()[-1])
    return 0.0


def test_disagreement_of_the_last_tier_counts_as_confidently_wrong(tmp_path, monkeypatch):
    core = make_core(tmp_path, monkeypatch)
    try:
        for q in ("What is the capital of France?", "What colour is my car?", "What colour is the sky?"):
            assert ask(core, q).status == 200
        assert core.shadow.wait_idle(10)
        assert metric(core, "memroute_shadow_samples_total", "0") == 3
        assert metric(core, "memroute_shadow_confidently_wrong_total", "0") == 2  # blue vs green
        assert metric(core, "memroute_confidently_wrong_rate", "0") == pytest.approx(2 / 3)
        assert metric(core, "memroute_shadow_eff_cost_total") > 0  # the estimate's price is shown
        assert core.health()["shadow"] == {"samples": {"0": 3}, "confidently_wrong": {"0": 2}}
        large = core.test_backends[1]
        assert large.prompts == 3  # one shadow call per sample, no request escalated
    finally:
        core.close()


def test_escalated_answers_are_not_sampled_and_share_zero_starts_no_judge(tmp_path, monkeypatch):
    core = make_core(tmp_path, monkeypatch)
    try:
        ask(core, "Why is the sky blue?")  # tier 0 unsure: the last tier answered itself
        assert core.shadow.wait_idle(10)
        assert metric(core, "memroute_shadow_samples_total", "0") == 0
        assert core.test_backends[1].prompts == 1
    finally:
        core.close()
    off = make_core(tmp_path / "off", monkeypatch, share=0.0)
    try:
        assert off.shadow is None and "shadow" not in off.health()
    finally:
        off.close()


def test_the_share_samples_about_that_fraction(tmp_path, monkeypatch):
    core = make_core(tmp_path, monkeypatch, share=0.25, seed=3)
    try:
        for i in range(200):
            ask(core, f"What is the capital of France, take {i}?")
        assert core.shadow.wait_idle(20)
        assert 30 <= metric(core, "memroute_shadow_samples_total", "0") <= 70
    finally:
        core.close()


def test_a_failing_or_saturated_judge_never_touches_the_requests(tmp_path, monkeypatch):
    core = make_core(tmp_path, monkeypatch, queue_size=1)
    gate = threading.Event()
    large = core.test_backends[1]
    inner = large.inner.generate_many

    def blocked_then_broken(batch, **kw):
        gate.wait(10)
        raise RuntimeError("the last tier is down")

    monkeypatch.setattr(large.inner, "generate_many", blocked_then_broken)
    try:
        answers = [ask(core, f"What is the capital of France ({i})?") for i in range(5)]
        assert all(a.status == 200 for a in answers)  # none waited for the judge
        gate.set()
        assert core.shadow.wait_idle(10)
        # the first is in the judge, one waits in the queue of one, three were dropped; both
        # judged samples then failed: 5 dropped, none counted as samples
        assert metric(core, "memroute_shadow_dropped_total") == 5
        assert metric(core, "memroute_shadow_samples_total", "0") == 0
    finally:
        monkeypatch.setattr(large.inner, "generate_many", inner)
        core.close()


@pytest.mark.parametrize("field,value", [("share", 1.5), ("share", -0.1), ("disagree_below", 0.0),
                                         ("queue_size", 0)])
def test_bad_shadow_settings_name_the_field(field, value):
    cfg = ServeConfig(cascade={"0": SMALL, "1": LARGE}, shadow=ShadowConfig(**{field: value}))
    with pytest.raises(ConfigError) as err:
        check_serve_config(cfg)
    assert err.value.field == f"shadow.{field}"
