"""A confidence that tracks correctness: answer features, the logistic calibrator and its
artifact, the threshold its fit picks on a hand-built log, the job's report (ECE / AUROC against
the mean log-prob), and the Router routing by P(correct)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from memroute import build
from memroute.accounting.cost import Pricing
from memroute.config import RetrievalConfig, RouterConfig
from memroute.config.calibrate import CalibrateConfig
from memroute.errors import ConfigError
from memroute.eval.replay.calibrate import (
    ShadowSample,
    auroc,
    candidate_thresholds,
    ece,
    evaluate,
    fit_calibrator,
    pick_tau,
    split_users,
)
from memroute.eval.replay.calibrate_run import run_calibration
from memroute.routing import calibrator as cal
from memroute.routing.confidence_features import FEATURES, features, memory_features, token_features
from memroute.routing.router import Router, Tier
from memroute.types import Memory, ModelReply, RetrievalHit, TurnPair

from .fakes import FakeBackend, FakeRetriever


def hit(text: str, when: int, score: float = 1.0, mid: int = 1, superseded_by: int = 0):
    return RetrievalHit(Memory(mid, "acme:alice", text, when, superseded_by=superseded_by), score)


OLD = "[1 May 2024] Q: My locker code is ZX-4471. / A: Noted."
NEW = "[9 May 2024] Q: I changed my locker code, it's QT-8812 now. / A: Noted."
BIKE = "[9 May 2024] Q: My bike is a red Gazelle. / A: Nice."
ASK = "What is my locker code?"


# ------------------------------------------------------------------------------- features


def test_token_features_from_logprobs_and_the_runner_up():
    reply = ModelReply("a b c d", "m", [-0.1, -2.0, -0.5, -0.2], 10, 4,
                       alt_logprobs=[-3.0, -2.1, -1.5, -4.0])
    f = token_features(reply)
    assert f["mean_lp"] == pytest.approx(-0.7) and f["min_lp"] == -2.0
    assert f["min_lp"] <= f["q10_lp"] <= f["q25_lp"] <= f["mean_lp"]
    assert f["margin_min"] == pytest.approx(0.1) and f["margin_mean"] == pytest.approx(1.95)
    # the torn position (-2.0 vs -2.1) has the highest entropy; no entropy is negative
    assert f["entropy_max"] > f["entropy_mean"] > 0
    assert f["log_len"] == pytest.approx(math.log(5))
    no_alt = token_features(ModelReply("a", "m", [-0.1], 1, 1))
    assert no_alt["margin_mean"] == 0.0 and no_alt["entropy_mean"] > 0
    nothing = ModelReply("", "m", [], 1, 0)
    empty = token_features(nothing)
    assert empty["mean_lp"] < -10 and empty["log_len"] == 0.0
    assert list(features(nothing)) == list(FEATURES)


def test_an_answer_read_from_a_stale_memory_is_flagged():
    f = memory_features("ZX-4471", [hit(OLD, 100, 0.9, 1), hit(NEW, 200, 0.8, 2)], ASK)
    assert f["value_in_memory"] == 1.0 and f["value_older"] == 1.0 and f["value_superseded"] == 0.0
    assert f["n_memories"] == 2 and f["top_score"] == 0.9 and f["mean_score"] == pytest.approx(0.85)
    marked = memory_features("ZX-4471", [hit(OLD, 100, mid=1, superseded_by=2), hit(NEW, 200, mid=2)], ASK)
    assert marked["value_superseded"] == 1.0
    # the current value: nothing newer on the subject
    cur = memory_features("QT-8812", [hit(OLD, 100, mid=1), hit(NEW, 200, mid=2)], ASK)
    assert cur["value_in_memory"] == 1.0 and cur["value_older"] == 0.0
    # a newer memory on another subject does not make the value stale
    other = memory_features("ZX-4471", [hit(OLD, 100, mid=1), hit(BIKE, 200, mid=3)], ASK)
    assert other["value_older"] == 0.0
    # without the question, shared words decide the subject
    assert memory_features("ZX-4471", [hit(OLD, 100, mid=1), hit(NEW, 200, mid=2)])["value_older"] == 1.0
    made_up = memory_features("purple", [hit(OLD, 100)], ASK)
    assert made_up["value_in_memory"] == 0.0 and made_up["value_older"] == 0.0


# ----------------------------------------------------------------------- model and artifact


def separable(n: int = 200, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n).astype(float)
    x = rng.normal(size=(n, len(FEATURES)))
    x[:, FEATURES.index("value_in_memory")] = y + 0.3 * rng.normal(size=n)
    return x, y


def test_the_logistic_fit_ranks_and_calibrates():
    x, y = separable()
    model = cal.fit(x, y, l2=1.0)
    p = model.predict_many(x)
    assert auroc(p, y) > 0.97 and ece(p, y) < 0.1
    k = FEATURES.index("value_in_memory")
    assert model.coef[k] == max(model.coef, key=abs) > 0
    one = dict(zip(FEATURES, x[0]))
    assert model.predict(one) == pytest.approx(p[0])


def test_ece_and_auroc_on_known_values():
    p = np.array([0.1, 0.1, 0.9, 0.9])
    assert ece(p, np.array([0, 0, 1, 1.0])) == pytest.approx(0.1)
    assert auroc(p, np.array([0, 0, 1, 1.0])) == 1.0
    assert auroc(np.array([0.5, 0.5]), np.array([0, 1.0])) == 0.5  # a tie counts half
    assert math.isnan(auroc(p, np.ones(4)))


def test_the_artifact_round_trips_and_a_mismatch_names_the_field(tmp_path):
    model = cal.fit(*separable(), meta={"run": "r1"}).with_threshold(0.62)
    path = model.save(tmp_path / "c.json")
    back = cal.load(path)
    assert back == model and back.threshold == 0.62 and back.meta["run"] == "r1"
    with pytest.raises(ConfigError, match="no calibrator artifact") as e:
        cal.load(tmp_path / "missing.json")
    assert e.value.field == "router.calibrator"
    for change, match in [({"version": 99}, "version 99"),
                          ({"features": list(FEATURES[:-1])}, "missing \\['value_older'\\]"),
                          ({"format": "sklearn"}, "not a memroute calibrator")]:
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({**model.to_json(), **change}))
        with pytest.raises(ConfigError, match=match) as e:
            cal.load(bad)
        assert e.value.field == "router.calibrator"


# ----------------------------------------------------------- threshold on a hand-built log


def test_the_cost_minimising_threshold_at_the_target_is_picked():
    # The small tier is right exactly when its score is >= 0.7; the large one always is.
    scores = [(0.2, 1.0), (0.4, 1.0), (0.7, 1.0), (0.9, 1.0)] * 5
    samples = [ShadowSample(f"r{i}", f"u{i % 7}", ("a", "a"), (0.5, 0.9),
                            (1.0 if s[0] >= 0.7 else 0.0, 1.0), (1.0, 10.0))
               for i, s in enumerate(scores)]
    taus = candidate_thresholds(scores)
    assert taus == [0.0, 0.3, 0.55, 0.8, 1.0]
    r = pick_tau(samples, target_share=1.0, taus=taus, scores=scores)
    assert r.tau == 0.55 and r.f1 == 1.0 and r.small_share == 0.5 and r.accepted_wrong == 0.0
    loose = pick_tau(samples, target_f1=0.75, taus=taus, scores=scores)  # one wrong kind allowed
    assert loose.tau == 0.3 and loose.accepted_wrong == pytest.approx(1 / 3)


def shadow_log(users: int = 24, seed: int = 1) -> list[ShadowSample]:
    """The small tier is right exactly when its answer is read from an injected memory; its mean
    log-prob says nothing about that (confidently wrong half the time). The large tier is right."""
    rng = np.random.default_rng(seed)
    out = []
    for u in range(users):
        for j in range(6):
            right = j % 2 == 0
            lp = float(rng.uniform(-2.0, -0.05))
            small = {**dict.fromkeys(FEATURES, 0.0), "mean_lp": lp, "min_lp": lp - 0.5,
                     "value_in_memory": 1.0 if right else float(rng.uniform(0, 0.2)),
                     "n_memories": 3.0, "top_score": float(rng.uniform(0.3, 0.9))}
            large = {**small, "mean_lp": -0.05, "value_in_memory": 1.0}
            c = min(1.0, max(0.0, (lp + 3.0) / 3.0))
            out.append(ShadowSample(f"r{u}-{j}", f"acme:u{u}",
                                    ("ZX-4471" if right else "QQ-1", "ZX-4471"), (c, 0.98),
                                    (1.0 if right else 0.0, 1.0), (1.0, 10.0), (small, large)))
    return out


def test_the_calibrators_fit_picks_the_known_best_threshold_on_a_hand_built_log():
    fit, held = split_users(shadow_log())
    model, chosen = fit_calibrator(fit, target_share=1.0)
    assert chosen.f1 == 1.0 and chosen.small_share == pytest.approx(0.5)
    # the known best policy: keep exactly the answers read from memory, escalate the others
    p_right = [model.predict(s.features[0]) for s in fit if s.f1[0] == 1.0]
    p_wrong = [model.predict(s.features[0]) for s in fit if s.f1[0] == 0.0]
    assert max(p_wrong) < model.threshold <= min(p_right)
    assert model.threshold == pytest.approx((max(p_wrong) + min(p_right)) / 2, abs=1e-6)
    scores = [[model.predict(f) for f in s.features] for s in held]
    on_held = evaluate(held, model.threshold, scores)
    assert on_held.f1 == 1.0 and on_held.accepted_wrong == 0.0 and on_held.small_share == 0.5
    # the mean log-prob cannot do it: at tau 0.5 it accepts wrong answers
    assert evaluate(held, 0.5).accepted_wrong > 0.2


def write_log(run, samples, features=True):
    with (run / "shadow.jsonl").open("w") as fh:
        for s in samples:
            row = {"request_id": s.request_id, "user_id": s.user_id, "answers": list(s.answers),
                   "confidences": list(s.confidences), "f1": list(s.f1),
                   "eff_cost": list(s.eff_cost)}
            if features:
                row["features"] = list(s.features)
            fh.write(json.dumps(row) + "\n")


def test_the_job_reports_ece_and_auroc_against_mean_logprob_and_writes_the_artifact(tmp_path):
    run = tmp_path / "run1"
    run.mkdir()
    write_log(run, shadow_log())
    out = run_calibration(CalibrateConfig(run_dir=str(run), target_share=1.0))
    conf, calib = out["scores"]
    assert calib["AUROC"] == 1.0 and conf["AUROC"] < 0.8
    assert calib["ECE"] < conf["ECE"]
    assert out["calibrated"]["f1"] == 1.0 and out["calibrated"]["small_share"] == 0.5
    assert out["baseline"]["accepted_wrong"] > 0.2
    model = cal.load(run / "calibrator.json")
    assert model.threshold == out["threshold"] and model.meta["held_out"]["auroc"] == 1.0
    report = (run / "calibration.md").read_text()
    assert "calibrator P(correct)" in report and "ECE" in report and "AUROC" in report
    # the frontier: the calibrator reaches no wrong accepted answers at half on the small tier,
    # which the log-prob confidence never does while it keeps any on the small tier
    assert (run / "frontier.png").stat().st_size > 0 and "frontier" in report
    assert (0.5, 0.0) in out["frontier"]["calibrator P(correct)"]
    assert all(w > 0 for s, w in out["frontier"]["confidence"] if s > 0)
    assert f"calibrator: {(run / 'calibrator.json').resolve()}" in (run / "router_override.yaml").read_text()


def test_an_old_log_without_features_still_gives_tau_and_says_why_no_calibrator(tmp_path):
    run = tmp_path / "run1"
    run.mkdir()
    write_log(run, shadow_log(), features=False)
    out = run_calibration(CalibrateConfig(run_dir=str(run), target_share=1.0))
    assert "calibrator" not in out and len(out["scores"]) == 1
    assert not (run / "calibrator.json").exists()
    assert "no calibrator" in (run / "calibration.md").read_text()


# ------------------------------------------------------------------------- routing by it


def memory_calibrator(threshold: float = 0.5) -> cal.Calibrator:
    """P(correct) ~ 1 when the answer is read from an injected memory, ~ 0 otherwise."""
    n = len(FEATURES)
    coef = [0.0] * n
    coef[FEATURES.index("value_in_memory")] = 10.0
    return cal.Calibrator(FEATURES, (0.0,) * n, (1.0,) * n, tuple(coef), -5.0, threshold)


def make_router(small_answer: str, small_lp: float, cfg: RouterConfig, **kw):
    small = FakeBackend("small", answer=small_answer, logprob=small_lp)
    large = FakeBackend("large", answer="Rex the dog", logprob=-0.05)
    retriever = FakeRetriever()
    retriever.remember([TurnPair("alice", "s1", 0, "my dog is called Rex", "Nice name!", 1714521600)])
    return Router([Tier("small", small, Pricing(0.5)), Tier("large", large, Pricing(1.5))], cfg,
                  RetrievalConfig(top_k=3, probe_token_budget=64, token_budget=256), retriever, **kw)


def test_the_router_accepts_and_escalates_by_p_correct():
    # unsure (c = 0.17 < tau) but read from memory: accepted by the calibrator, not by tau
    unsure = dict(small_answer="Rex", small_lp=-2.5)
    assert make_router(**unsure, cfg=RouterConfig(tau=0.5)).route(
        "alice", "what is my dog called?").decision.answered_tier == 1
    res = make_router(**unsure, cfg=RouterConfig(tau=0.5), calibrator=memory_calibrator()).route(
        "alice", "what is my dog called?")
    assert res.decision.answered_tier == 0 and res.decision.confidences[0] > 0.99
    # sure (c = 0.97) but made up: escalated
    sure = dict(small_answer="Fido", small_lp=-0.1)
    res = make_router(**sure, cfg=RouterConfig(tau=0.5), calibrator=memory_calibrator()).route(
        "alice", "what is my dog called?")
    assert res.decision.answered_tier == 1 and res.decision.confidences[0] < 0.01
    # router.calibrator_threshold overrides the artifact's threshold
    strict = RouterConfig(tau=0.5, calibrator_threshold=1.0)
    assert make_router(**unsure, cfg=strict, calibrator=memory_calibrator()).route(
        "alice", "what is my dog called?").decision.answered_tier == 1


def test_the_router_built_from_config_loads_the_artifact_or_fails_naming_it(tmp_path):
    path = memory_calibrator().save(tmp_path / "calibrator.json")
    cfg = RouterConfig(tau=0.5, calibrator=str(path))
    assert build.calibrator(cfg) == memory_calibrator()
    router = make_router("Rex", -2.5, cfg)  # loaded by the Router from cfg.calibrator
    assert router.route("alice", "what is my dog called?").decision.answered_tier == 0
    with pytest.raises(ConfigError) as e:
        build.calibrator(RouterConfig(calibrator=str(tmp_path / "nope.json")))
    assert e.value.field == "router.calibrator"
    with pytest.raises(ConfigError) as e:
        make_router("Rex", -2.5, RouterConfig(calibrator=str(path), calibrator_threshold=1.5))
    assert e.value.field == "router.calibrator_threshold"


def test_a_calibrator_fitted_with_grounding_is_refused_by_a_router_without_it(tmp_path):
    # Its threshold was picked with grounding's refusals applied; without them it keeps more
    # wrong answers than its report says.
    gated = memory_calibrator()
    gated.meta["grounding"] = "memory"
    path = gated.save(tmp_path / "calibrator.json")
    assert make_router("Rex", -2.5, RouterConfig(calibrator=str(path), grounding="memory"))
    with pytest.raises(ConfigError, match="grounding=off") as e:
        make_router("Rex", -2.5, RouterConfig(calibrator=str(path), grounding="off"))
    assert e.value.field == "router.calibrator"


def test_shadow_rows_carry_each_tiers_features_and_confidence_not_p(tmp_path):
    from memroute.config import ModelConfig
    from memroute.datasets.records import TraceRequest
    from memroute.eval.replay.calibrate_run import sample_of
    from memroute.eval.replay.outcome import TierPrice
    from memroute.eval.replay.strategies import ShadowRecorder, StrategyParts
    from memroute.types import Message

    small = ModelConfig(name="small", engine="mock", params_b=0.5,
                        engine_args={"logprob": -0.3, "memory_answer": "ZX-4471"})
    large = ModelConfig(name="large", engine="mock", params_b=8.0,
                        engine_args={"logprob": -0.01, "memory_answer": "ZX-9999"})
    retriever = FakeRetriever()
    retriever.remember([TurnPair("acme:alice", "d1", 0, "My locker code is ZX-4471.", "Noted.", 1)])
    path = memory_calibrator().save(tmp_path / "c.json")
    parts = StrategyParts(build.tiers([small, large], None), [TierPrice(0.5, 0.5), TierPrice(8, 8)],
                          RouterConfig(tau=0.5, calibrator=str(path)), RetrievalConfig(), retriever)
    rec = ShadowRecorder(parts, share=1.0)
    req = TraceRequest("r1", 1_700_000_000, "acme", "alice", "d1",
                       (Message("user", "What is my locker code?"),), ("ZX-4471",))
    (row,) = rec.record([(1, req)])
    assert row["confidences"][0] == pytest.approx(0.9)  # the mean log-prob, not P(correct)
    assert [list(f) for f in row["features"]] == [list(FEATURES)] * 2
    assert row["features"][0]["value_in_memory"] == 1.0 and row["features"][0]["mean_lp"] == -0.3
    sample = sample_of(json.loads(json.dumps(row)))  # as jobs.calibrate reads it back
    assert sample.features is not None and sample.features[1]["n_memories"] == 1.0
    assert sample.value_hit == (True, False)  # which holds the reference's value (correct=value)
