"""The calibration job's body: shadow samples of a replay run -> tau and a calibrator, judged on
held-out users.

Writes into the replay's run folder ``calibration.md``, ``router_override.yaml`` (``router:
{tau: ...}``, plus ``calibrator: <path>`` when one was fitted; pass as ``+router=...`` or copy
into a preset) and, when the shadow rows carry the answers' features, the calibrator artifact
``calibrator.json`` (or ``calibrator_out``) that ``router.calibrator`` loads.

The report compares on the held-out users: the configured confidence (mean log-prob by default)
at ``baseline_tau`` and at its calibrated tau, the calibrator at its threshold, and the last
tier alone (F1, EffCost, the first tier's share, confidently-wrong shares); and the scores
themselves (ECE, AUROC of the lower tiers' answers being correct).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, replace
from pathlib import Path

import polars as pl

from memroute.config.calibrate import CalibrateConfig, check_calibrate_config
from memroute.errors import ConfigError
from memroute.eval.replay.calibrate import (
    PolicyResult,
    ShadowSample,
    auroc,
    calibrated_scores,
    ece,
    evaluate,
    fit_calibrator,
    has_features,
    lower_tier_outcomes,
    pick_tau,
    split_users,
    was_gated,
)
from memroute.eval.plots import frontier_plot
from memroute.eval.report import to_markdown

SHADOW = "shadow.jsonl"
CALIBRATOR = "calibrator.json"


def load_samples(run_dir: Path, correct: str = "f1") -> list[ShadowSample]:
    """The run's shadow samples; ``correct="value"``: each carries its answers' value hits (an
    older log without them is a clear error)."""
    path = run_dir / SHADOW
    if not path.is_file():
        raise ConfigError(f"{path} does not exist: replay with shadow_share > 0 (e.g. 0.1) first",
                          field="run_id")
    latest: dict[str, dict] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                row = json.loads(line)
            except ValueError:  # a line cut by a kill
                continue
            latest[row["request_id"]] = row  # a wave redone after a kill: keep one sample
    samples = [sample_of(r) for r in latest.values()]
    if correct == "f1":
        return [replace(s, value_hit=None) for s in samples]
    if any(s.value_hit is None for s in samples):
        raise ConfigError(f"correct=value, but {path} records no value hits (a replay from before "
                          "2026-12-07): replay again, or correct=f1", field="correct")
    return samples


def sample_of(r: dict) -> ShadowSample:
    """One shadow row; rows from before the features (or grounding's verdicts) were recorded have
    none (tau still works)."""
    feats, verdicts, hits = r.get("features"), r.get("grounded"), r.get("value_hit")
    return ShadowSample(r["request_id"], r["user_id"], tuple(r["answers"]), tuple(r["confidences"]),
                        tuple(float(f) for f in r["f1"]), tuple(r["eff_cost"]),
                        tuple(dict(f) for f in feats) if feats else None,
                        tuple(verdicts) if verdicts else None,
                        tuple(hits) if hits else None)


def run_dir_of(cfg: CalibrateConfig) -> Path:
    path = Path(cfg.run_dir) if cfg.run_dir else Path(cfg.output_dir) / str(cfg.run_id)
    if not path.is_dir():
        field = "run_dir" if cfg.run_dir else "run_id"
        raise ConfigError(f"{field}: no replay run folder at {path}", field=field)
    return path


def other_runs_samples(cfg: CalibrateConfig) -> list[ShadowSample]:
    """The shadow samples of ``fit_runs``, each user id prefixed by its run: other people."""
    out = []
    for run in cfg.fit_runs:
        path = Path(cfg.output_dir) / str(run)
        if not path.is_dir():
            raise ConfigError(f"fit_runs: no replay run folder at {path}", field="fit_runs")
        out += [replace(s, user_id=f"{run}/{s.user_id}")
                for s in load_samples(path, cfg.correct)]
    return out


def gate_of(cfg: CalibrateConfig, samples: list[ShadowSample]) -> bool:
    """Whether the policies are judged with grounding's refusals (``cfg.grounding``)."""
    if cfg.grounding == "auto":
        return was_gated(samples)
    if cfg.grounding == "memory" and not was_gated(samples):
        raise ConfigError("grounding=memory, but these shadow rows carry no grounding verdicts: "
                          "replay with router.grounding=memory", field="grounding")
    return cfg.grounding == "memory"


def run_calibration(cfg: CalibrateConfig) -> dict[str, object]:
    check_calibrate_config(cfg)
    run_dir = run_dir_of(cfg)
    samples = load_samples(run_dir, cfg.correct)
    fit, held = split_users(samples) if cfg.held_out == "half" else ([], samples)
    if cfg.held_out == "half" and (not fit or not held):
        raise ConfigError(f"{len(samples)} shadow samples from too few users to hold half out; "
                          "replay more users or a larger shadow_share", field="run_id")
    fit += other_runs_samples(cfg)
    gate = gate_of(cfg, samples)
    gated = " + grounding" if gate else ""
    target_kw = {"target_f1": cfg.target_f1, "target_share": cfg.target_share,
                 "target_wrong": cfg.target_wrong}
    chosen = pick_tau(fit, **target_kw, gate=gate, correct_f1=cfg.correct_f1)
    base = evaluate(held, cfg.baseline_tau, correct_f1=cfg.correct_f1, gate=gate)
    tuned = evaluate(held, chosen.tau, correct_f1=cfg.correct_f1, gate=gate)
    rows = [
        {"users": "fit", "policy": f"confidence tau={chosen.tau}{gated}", **_cols(chosen)},
        {"users": "held out", "policy": f"confidence tau={cfg.baseline_tau}{gated} (baseline)",
         **_cols(base)},
        {"users": "held out", "policy": f"confidence tau={chosen.tau}{gated} (calibrated)",
         **_cols(tuned)},
    ]
    p, y = lower_tier_outcomes(held, [s.confidences for s in held], cfg.correct_f1)
    score_rows = [{"score": "confidence (router.confidence)", **_score_cols(p, y)}]
    out: dict[str, object] = {"tau": chosen.tau, "fit": asdict(chosen), "held": asdict(tuned),
                              "baseline": asdict(base)}
    artifact = None
    if has_features(fit) and has_features(held):
        model, fitted = fit_calibrator(fit, correct_f1=cfg.correct_f1, l2=cfg.l2, gate=gate,
                                       **target_kw)
        held_scores = calibrated_scores(held, model)
        routed = evaluate(held, model.threshold, held_scores, cfg.correct_f1, gate=gate)
        policy = f"calibrator p>={model.threshold:.3f}{gated}"
        rows += [{"users": "fit", "policy": policy, **_cols(fitted)},
                 {"users": "held out", "policy": policy, **_cols(routed)}]
        p, y = lower_tier_outcomes(held, held_scores, cfg.correct_f1)
        score_rows.append({"score": "calibrator P(correct)", **_score_cols(p, y)})
        artifact = Path(cfg.calibrator_out) if cfg.calibrator_out else run_dir / CALIBRATOR
        model.meta.update({"correct": cfg.correct, "run": run_dir.name,
                           "fit_runs": list(cfg.fit_runs),
                           "fit_samples": len(fit), "grounding": "memory" if gate else "off",
                           "held_out": {"ece": score_rows[-1]["ECE"],
                                        "auroc": score_rows[-1]["AUROC"]}})
        model.save(artifact)
        out.update({"calibrator": str(artifact), "threshold": model.threshold,
                    "calibrated": asdict(routed)})
    frontier = {"confidence": _frontier(held, None, cfg.correct_f1)}
    if gate:
        frontier["confidence + grounding"] = _frontier(held, None, cfg.correct_f1, gate)
    if artifact is not None:
        frontier[f"calibrator P(correct){gated}"] = _frontier(held, held_scores, cfg.correct_f1,
                                                              gate)
    frontier_plot(frontier, run_dir / FRONTIER_PNG)
    out["frontier"] = frontier
    rows.append({"users": "held out", "policy": "last tier only",
                 **_cols(evaluate(held, 1.01, correct_f1=cfg.correct_f1))})
    out["scores"] = score_rows
    target = (f"F1 >= {cfg.target_f1}" if cfg.target_f1 is not None
              else f"wrong of accepted <= {cfg.target_wrong}" if cfg.target_wrong is not None
              else f"F1 >= {cfg.target_share} x the last tier's F1")
    note = (f"calibrator written to {artifact} (router.calibrator={artifact})" if artifact else
            "no calibrator: these shadow rows carry no answer features (replay again to fit one)")
    n_more = len(cfg.fit_runs)
    also = f", {n_more} more run{'s' * (n_more > 1)} in the fit half" if n_more else ""
    split = "split by user" if cfg.held_out == "half" else "all of this run's users held out"
    wrong = (f"F1 < {cfg.correct_f1} against the references" if cfg.correct == "f1" else
             "not holding a reference's value")
    report = "\n\n".join([
        f"## calibration of {run_dir.name}: {len(samples)} shadow samples ({len(fit)} fit, "
        f"{len(held)} held out, {split}{also})",
        "Policies judged with router.grounding's refusals: " + ("yes" if gate else "no") + ".",
        f"Target: {target} at the lowest EffCost; chosen tau = {chosen.tau}; {note}.",
        to_markdown(pl.DataFrame(rows)),
        "small %: answered by the first tier. wrong of accepted %: answers accepted below the "
        f"last tier {wrong}, share of those accepted; wrong, last tier right %: those of them "
        "the last tier's own answer gets right (escalating would have fixed them), share of "
        "those accepted. "
        "disagree %: accepted by the first tier while the last tier's answer disagrees (F1 "
        "between them < 0.5), share of all samples.",
        f"### the scores on the held-out users' lower-tier answers (wrong: {wrong})",
        to_markdown(pl.DataFrame(score_rows)),
        "### frontier on the held-out users: small % and wrong of accepted % per threshold "
        f"({FRONTIER_PNG})",
        "Each cell: small % / wrong of accepted %.",
        to_markdown(pl.DataFrame([
            {"threshold": t, **{name: f"{100 * points[k][0]:.1f} / {100 * points[k][1]:.1f}"
                                for name, points in frontier.items()}}
            for k, t in enumerate(FRONTIER_TAUS)])),
    ])
    (run_dir / "calibration.md").write_text(report + "\n")
    override = f"# python -m jobs.calibrate: {target}\nrouter:\n  tau: {chosen.tau}\n"
    if artifact is not None:
        override += f"  calibrator: {artifact.resolve()}\n"
    (run_dir / "router_override.yaml").write_text(override)
    print(report)
    print(f"\noverride: router.tau={chosen.tau}"
          + (f" router.calibrator={artifact.resolve()}" if artifact else "")
          + f"  (also in {run_dir / 'router_override.yaml'})")
    return out


FRONTIER_PNG = "frontier.png"
FRONTIER_TAUS = tuple(round(0.05 * i, 2) for i in range(21))


def _frontier(held: list[ShadowSample], scores: list | None, correct_f1: float,
              gate: bool = False) -> list[tuple[float, float]]:
    """(small share, wrong of accepted) at each of FRONTIER_TAUS."""
    out = []
    for tau in FRONTIER_TAUS:
        r = evaluate(held, tau, scores, correct_f1, gate)
        out.append((r.small_share, r.accepted_wrong))
    return out


def _cols(r: PolicyResult) -> dict[str, object]:
    return {"n": r.n, "F1": round(100 * r.f1, 1), "EffCost/req": round(r.eff_cost, 1),
            "small %": round(100 * r.small_share, 1), "esc %": round(100 * r.escalation_rate, 1),
            "wrong of accepted %": round(100 * r.accepted_wrong, 1),
            "wrong, last tier right %": round(100 * r.accepted_avoidable, 1),
            "disagree %": round(100 * r.confidently_wrong, 1)}


def _score_cols(p, y) -> dict[str, object]:  # type: ignore[no-untyped-def]
    def r(x: float) -> float | None:
        return None if math.isnan(x) else round(x, 3)

    return {"answers": len(p), "correct %": round(100 * float(y.mean()), 1) if len(y) else None,
            "ECE": r(ece(p, y)), "AUROC": r(auroc(p, y))}
