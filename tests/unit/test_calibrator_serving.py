"""A served app whose config names a calibrator artifact routes by it (the serving core over
in-process mock tiers, as the ingress calls it); a missing artifact stops it at start-up."""

from __future__ import annotations

import pytest

from memroute.config.schema import ModelConfig, RouterConfig
from memroute.errors import ConfigError
from memroute.routing.calibrator import Calibrator
from memroute.routing.confidence_features import FEATURES

from .fakes import call_like_ingress, serving_core

# The small tier is always sure of itself (c = 0.98 >= tau 0.5); it knows the locker code from
# memory but makes up the bike code.
SMALL = ModelConfig(name="mock-small", engine="mock", params_b=0.5, engine_args={
    "logprob": -0.05, "answer": "Noted.",
    "rules": [{"match": "(?i)locker code\\?", "answer": "ZX-4471"},
              {"match": "(?i)bike code\\?", "answer": "7731"}]})
LARGE = ModelConfig(name="mock-large", engine="mock", params_b=8.0,
                    engine_args={"answer": "Large answer.", "logprob": -0.01})


def memory_calibrator() -> Calibrator:
    """P(correct) ~ 1 when the answer is read from an injected memory, ~ 0 otherwise."""
    n = len(FEATURES)
    coef = [0.0] * n
    coef[FEATURES.index("value_in_memory")] = 10.0
    return Calibrator(FEATURES, (0.0,) * n, (1.0,) * n, tuple(coef), -5.0, 0.5)


def ask(core, text):
    body = {"model": "memroute", "user": "alice", "messages": [{"role": "user", "content": text}]}
    resp = call_like_ingress(core, body)
    assert resp.status == 200, resp.body
    return resp.body["memroute"]


def tiers_answering(core):
    ask(core, "My locker code is ZX-4471.")
    return [ask(core, q)["tier"] for q in ("What is my locker code?", "What is my bike code?")]


def test_a_served_app_with_a_calibrator_artifact_routes_by_it(tmp_path, monkeypatch):
    path = memory_calibrator().save(tmp_path / "calibrator.json")
    core = serving_core(tmp_path / "with", monkeypatch, SMALL, LARGE, api_keys={"sk-a": "acme"},
                        router=RouterConfig(tau=0.5, max_tokens=24, calibrator=str(path)))
    try:
        assert core.router.calibrator == memory_calibrator()
        # the made-up bike code escalates, the code read from memory stays on the small tier
        assert tiers_answering(core) == [0, 1]
    finally:
        core.close()
    plain = serving_core(tmp_path / "without", monkeypatch, SMALL, LARGE, api_keys={"sk-a": "acme"})
    try:
        assert tiers_answering(plain) == [0, 0]  # by log-prob alone both are accepted
    finally:
        plain.close()


def test_a_missing_artifact_is_a_startup_error_naming_the_field(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="no calibrator artifact") as e:
        serving_core(tmp_path, monkeypatch, SMALL, LARGE, api_keys={"sk-a": "acme"},
                     router=RouterConfig(calibrator=str(tmp_path / "missing.json")))
    assert e.value.field == "router.calibrator"


def test_statements_are_judged_by_the_confidence_not_the_calibrator(tmp_path, monkeypatch):
    """The calibrator learnt from questions only: a statement's "Noted." has no value in memory
    (P(correct) ~ 0 here) but is accepted on its log-prob at ``router.statement_tau``; with
    ``statement_tau=None`` the calibrator judges it too and it escalates."""
    path = memory_calibrator().save(tmp_path / "calibrator.json")
    for statement_tau, tier in ((0.5, 0), (None, 1)):
        core = serving_core(tmp_path / str(statement_tau), monkeypatch, SMALL, LARGE,
                            api_keys={"sk-a": "acme"},
                            router=RouterConfig(tau=1.0, max_tokens=24, calibrator=str(path),
                                                statement_tau=statement_tau))
        try:
            assert ask(core, "My locker code is ZX-4471.")["tier"] == tier
            assert ask(core, "What is my bike code?")["tier"] == 1  # a question: the calibrator
        finally:
            core.close()


@pytest.mark.parametrize("text, asks", [
    ("My locker code is 4417.", False), ("I moved to Lisbon last week.", False),
    ("What is my locker code?", True), ("Remind me of my locker code.", True),
    ("Thanks. Where did I park", True), ("I switched gyms; it's now FitHub.", False),
    ("Convert 5 days to hours.", True), ("One more thing: compute 41 to the power of 2. Thanks!", True),
    ("Note: my gym is FitHub now.", False),
    ("My team standup is at 10:15 am.", False),  # "15 am" is no sentence asking "am ..."
    # a greeting or filler before the opening word (25 questions of the generated traces)
    ("Hey, remind me of my bike lock code. Thanks!", True), ("Hey, calculate 38 x 87.", True),
    ("Ok so, what is 5 x 5", True), ("Hey, my sister moved to Oslo.", False), ("Hey.", False),
])
def test_asks_something(text, asks):
    from memroute.text.turn_kind import asks_something

    assert asks_something(text) is asks


@pytest.mark.parametrize("text, states", [
    ("Note this down: my locker code is ZY-1685.", True),
    ("For the record, the warranty number is WB-2984.", True),
    ("My team standup is at 10:15 am.", True),
    ("What is my locker code?", False),
    ("Remind me of my locker code.", False),
    ("Draft a short message to Maria Lopez about the invoice of Alder Corp.", False),
    ("Step 3: Extract the total from the contract.", False),
    ("Hey, remind me of my locker code.", False),
    ("Hi! Our tortoise is called Sprocket.", True),
])
def test_only_states(text, states):
    from memroute.text.turn_kind import only_states

    assert only_states(text) is states
