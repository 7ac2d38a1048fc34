"""Calibration from a hand-built shadow log: the known-best tau is picked, judged on held-out
users, and the override is written."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from memroute.config.calibrate import CalibrateConfig, check_calibrate_config
from memroute.errors import ConfigError
from memroute.eval.replay.calibrate import ShadowSample, evaluate, pick_tau, split_users
from memroute.eval.replay.calibrate_run import run_calibration

CONFS = (0.1, 0.3, 0.5, 0.7, 0.9)


def sample(i: int, user: str, c: float) -> ShadowSample:
    # The small tier is right exactly when its confidence is >= 0.6; the large one always is.
    right = c >= 0.6
    return ShadowSample(f"r{i}", user, ("ZX-4471" if right else "no idea", "ZX-4471"), (c, 0.99),
                        (1.0 if right else 0.0, 1.0), (1.0, 10.0))


def log(users: int = 20) -> list[ShadowSample]:
    return [sample(k * 10 + j, f"acme:u{k}", c) for k in range(users) for j, c in enumerate(CONFS)]


def test_the_cheapest_tau_that_keeps_the_large_models_f1_is_picked():
    r = pick_tau(log(), target_share=1.0)
    assert r.tau == 0.55 and r.f1 == 1.0  # the lowest grid tau that rejects c=0.5
    assert r.eff_cost == pytest.approx((3 * 11 + 2 * 1) / 5)
    assert r.escalation_rate == pytest.approx(0.6) and r.confidently_wrong == 0.0


def test_a_lower_target_buys_a_cheaper_tau_and_counts_confidently_wrong_answers():
    r = pick_tau(log(), target_f1=0.6)  # accepting c=0.3 and 0.5 too: 3 of 5 right
    assert (r.tau, r.f1) == (0.15, 0.6) and r.eff_cost == pytest.approx((11 + 4 * 1) / 5)
    low = evaluate(log(), 0.4)  # accepts 0.5 (wrong), 0.7, 0.9
    assert low.confidently_wrong == pytest.approx(0.2) and low.f1 == pytest.approx(0.8)


def test_users_are_split_without_overlap():
    fit, held = split_users(log())
    assert fit and held
    assert not {s.user_id for s in fit} & {s.user_id for s in held}


def test_exactly_one_target():
    with pytest.raises(ConfigError):
        pick_tau(log(), target_f1=0.5, target_share=0.9)


def test_calibration_run_reports_held_out_users_and_writes_the_override(tmp_path):
    run = tmp_path / "run1"
    run.mkdir()
    with (run / "shadow.jsonl").open("w") as fh:
        for s in log():
            fh.write(json.dumps({"request_id": s.request_id, "user_id": s.user_id, "answers": list(s.answers),
                                 "confidences": list(s.confidences), "f1": list(s.f1),
                                 "eff_cost": list(s.eff_cost)}) + "\n")
    out = run_calibration(CalibrateConfig(run_dir=str(run), target_share=1.0))
    assert out["tau"] == 0.55
    assert out["held"]["f1"] == 1.0 and out["held"]["eff_cost"] < 10.0
    assert out["baseline"]["f1"] < 1.0  # tau 0.5 accepts the wrong c=0.5 answers
    assert "tau: 0.55" in (run / "router_override.yaml").read_text()
    assert "held out" in (run / "calibration.md").read_text()


def test_no_shadow_log_names_the_run(tmp_path):
    with pytest.raises(ConfigError, match="shadow_share"):
        run_calibration(CalibrateConfig(run_dir=str(tmp_path)))


# -- router.grounding's refusals (the replay ran with grounding on) ------------------------------


def gated_log(users: int = 20) -> list[ShadowSample]:
    """The small tier is always confident; it is wrong exactly when no trusted source holds its
    answer (grounded False), and its unchecked answers (None: "Yes.") are right."""
    out = []
    for k in range(users):
        for j, verdict in enumerate((True, False, None, False)):
            right = verdict is not False
            out.append(ShadowSample(f"r{k}-{j}", f"acme:u{k}",
                                    ("ZX-4471" if right else "1 March 2024", "ZX-4471"),
                                    (0.97, 0.99), (1.0 if right else 0.0, 1.0), (1.0, 10.0),
                                    grounded=(verdict, True)))
    return out


def test_grounding_refusals_are_applied_as_the_router_serves():
    ungated = evaluate(gated_log(), 0.5)
    assert ungated.small_share == 1.0 and ungated.accepted_wrong == pytest.approx(0.5)
    gated = evaluate(gated_log(), 0.5, gate=True)
    assert gated.small_share == pytest.approx(0.5) and gated.accepted_wrong == 0.0
    assert gated.f1 == 1.0
    # a refusal never keeps the last tier from answering
    assert evaluate(gated_log(), 1.01, gate=True).f1 == 1.0


def write_rows(run, samples):
    run.mkdir()
    with (run / "shadow.jsonl").open("w") as fh:
        for s in samples:
            row = {"request_id": s.request_id, "user_id": s.user_id, "answers": list(s.answers),
                   "confidences": list(s.confidences), "f1": list(s.f1),
                   "eff_cost": list(s.eff_cost)}
            if s.grounded is not None:
                row["grounded"] = list(s.grounded)
            fh.write(json.dumps(row) + "\n")


def test_the_job_judges_with_the_gate_when_the_replay_ran_with_it(tmp_path):
    write_rows(tmp_path / "run1", gated_log())
    out = run_calibration(CalibrateConfig(run_dir=str(tmp_path / "run1"), target_share=1.0))
    assert out["baseline"]["accepted_wrong"] == 0.0 and out["baseline"]["small_share"] == 0.5
    report = (tmp_path / "run1" / "calibration.md").read_text()
    assert "refusals: yes" in report and "confidence + grounding" in out["frontier"]
    off = run_calibration(CalibrateConfig(run_dir=str(tmp_path / "run1"), target_share=1.0,
                                          grounding="off"))
    assert off["baseline"]["accepted_wrong"] == pytest.approx(0.5)
    # a log without verdicts cannot be judged with the gate
    write_rows(tmp_path / "run2", log())
    with pytest.raises(ConfigError) as e:
        run_calibration(CalibrateConfig(run_dir=str(tmp_path / "run2"), grounding="memory"))
    assert e.value.field == "grounding"


@pytest.mark.parametrize("value, hint", [("retrieval", "one of auto"), ("False", 'write "off"')])
def test_a_bad_grounding_choice_names_the_setting(tmp_path, value, hint):
    with pytest.raises(ConfigError, match=hint) as e:
        run_calibration(CalibrateConfig(run_dir=str(tmp_path), grounding=value))
    assert e.value.field == "grounding"


def test_other_runs_join_the_fit_half_only(tmp_path):
    write_rows(tmp_path / "main", log())
    write_rows(tmp_path / "other", log(users=6))
    alone = run_calibration(CalibrateConfig(run_dir=str(tmp_path / "main"), target_share=1.0))
    both = run_calibration(CalibrateConfig(run_dir=str(tmp_path / "main"), target_share=1.0,
                                           output_dir=str(tmp_path), fit_runs=["other"]))
    # the same user ids in the other run are other people: all 30 of their samples join the fit
    assert both["fit"]["n"] == alone["fit"]["n"] + 30
    assert both["held"]["n"] == alone["held"]["n"]
    assert "1 more run in the fit half" in (tmp_path / "main" / "calibration.md").read_text()
    with pytest.raises(ConfigError) as e:
        run_calibration(CalibrateConfig(run_dir=str(tmp_path / "main"), output_dir=str(tmp_path),
                                        fit_runs=["missing"]))
    assert e.value.field == "fit_runs"


def test_a_confidently_wrong_target_picks_the_cheapest_tau_under_it():
    none_wrong = pick_tau(log(), target_wrong=0.0)
    assert none_wrong.tau == 0.55 and none_wrong.accepted_wrong == 0.0
    # a third wrong allowed: c=0.5 is kept too (one wrong of three), c=0.3 is not
    third = pick_tau(log(), target_wrong=0.34)
    assert third.tau == 0.35 and third.accepted_wrong == pytest.approx(1 / 3)
    assert third.eff_cost < none_wrong.eff_cost
    with pytest.raises(ConfigError):
        pick_tau(log(), target_share=0.9, target_wrong=0.1)


def test_a_whole_run_can_be_held_out_when_others_are_fitted_on(tmp_path):
    write_rows(tmp_path / "fresh", log(users=8))
    write_rows(tmp_path / "other", log())
    out = run_calibration(CalibrateConfig(run_dir=str(tmp_path / "fresh"), target_wrong=0.0,
                                          output_dir=str(tmp_path), fit_runs=["other"],
                                          held_out="all"))
    assert out["held"]["n"] == 40 and out["fit"]["n"] == 100
    assert out["tau"] == 0.55 and out["held"]["accepted_wrong"] == 0.0
    report = (tmp_path / "fresh" / "calibration.md").read_text()
    assert "all of this run's users held out" in report and "wrong of accepted <= 0.0" in report
    with pytest.raises(ConfigError) as e:
        run_calibration(CalibrateConfig(run_dir=str(tmp_path / "fresh"), held_out="all"))
    assert e.value.field == "held_out"
    with pytest.raises(ConfigError) as e:
        run_calibration(CalibrateConfig(run_dir=str(tmp_path / "fresh"), target_f1=0.5,
                                        target_wrong=0.1))
    assert e.value.field == "target_wrong"


# -- correct=value: an answer is right when it holds a reference's value --------------------------


def test_a_verbose_right_answer_is_right_by_value_and_wrong_by_f1():
    verbose = ShadowSample("r1", "acme:u1", ("Your locker code is ZX-4471.", "ZX-4471"),
                           (0.9, 0.99), (0.33, 1.0), (1.0, 10.0), value_hit=(True, True))
    wrong = ShadowSample("r2", "acme:u2", ("ZX-4417", "ZX-4471"), (0.9, 0.99),
                         (0.0, 1.0), (1.0, 10.0), value_hit=(False, True))
    by_value = evaluate([verbose, wrong], 0.5)
    by_f1 = evaluate([replace(verbose, value_hit=None), replace(wrong, value_hit=None)], 0.5)
    assert by_value.accepted_wrong == pytest.approx(0.5)
    assert by_f1.accepted_wrong == pytest.approx(1.0)
    # the wrong one was wrong for the last tier too? Then escalating would not have fixed it
    assert by_value.accepted_avoidable == pytest.approx(0.5)
    both_wrong = replace(wrong, value_hit=(False, False))
    assert evaluate([verbose, both_wrong], 0.5).accepted_avoidable == 0.0
    # no reference term to hold (value_hit None for the tier): F1 decides
    assert replace(verbose, value_hit=(None, True)).right(0, 0.5) is False


def write_log(path, samples, *, value_hits: bool) -> None:
    with path.open("w") as fh:
        for s in samples:
            row = {"request_id": s.request_id, "user_id": s.user_id, "answers": list(s.answers),
                   "confidences": list(s.confidences), "f1": list(s.f1),
                   "eff_cost": list(s.eff_cost)}
            if value_hits:
                row["value_hit"] = [f >= 0.5 for f in s.f1]
            fh.write(json.dumps(row) + "\n")


def test_correct_value_needs_a_log_with_value_hits(tmp_path):
    write_log(tmp_path / "shadow.jsonl", log(), value_hits=False)
    with pytest.raises(ConfigError, match="records no value hits") as e:
        run_calibration(CalibrateConfig(run_dir=str(tmp_path), correct="value"))
    assert e.value.field == "correct"
    write_log(tmp_path / "shadow.jsonl", log(), value_hits=True)
    out = run_calibration(CalibrateConfig(run_dir=str(tmp_path), target_share=1.0,
                                          correct="value"))
    assert out["tau"] == 0.55
    assert "not holding a reference's value" in (tmp_path / "calibration.md").read_text()


def test_an_unknown_correct_is_a_config_error():
    with pytest.raises(ConfigError, match="correct must be one of") as e:
        check_calibrate_config(CalibrateConfig(run_id="x", correct="exact"))
    assert e.value.field == "correct"
