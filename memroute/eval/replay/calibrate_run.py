"""The calibration job's body: shadow samples of a replay run -> tau, judged on held-out users.

Writes ``calibration.md`` and ``router_override.yaml`` (``router: {tau: ...}``, to pass as
``+router=...`` or copy into a preset) into the replay's run folder.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import polars as pl

from memroute.config.calibrate import CalibrateConfig, check_calibrate_config
from memroute.errors import ConfigError
from memroute.eval.replay.calibrate import ShadowSample, evaluate, pick_tau, split_users
from memroute.eval.report import to_markdown

SHADOW = "shadow.jsonl"


def load_samples(run_dir: Path) -> list[ShadowSample]:
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
    return [ShadowSample(r["request_id"], r["user_id"], tuple(r["answers"]), tuple(r["confidences"]),
                         tuple(float(f) for f in r["f1"]), tuple(r["eff_cost"])) for r in latest.values()]


def run_dir_of(cfg: CalibrateConfig) -> Path:
    path = Path(cfg.run_dir) if cfg.run_dir else Path(cfg.output_dir) / str(cfg.run_id)
    if not path.is_dir():
        field = "run_dir" if cfg.run_dir else "run_id"
        raise ConfigError(f"{field}: no replay run folder at {path}", field=field)
    return path


def run_calibration(cfg: CalibrateConfig) -> dict[str, object]:
    check_calibrate_config(cfg)
    run_dir = run_dir_of(cfg)
    samples = load_samples(run_dir)
    fit, held = split_users(samples)
    if not fit or not held:
        raise ConfigError(f"{len(samples)} shadow samples from too few users to hold half out; "
                          "replay more users or a larger shadow_share", field="run_id")
    chosen = pick_tau(fit, target_f1=cfg.target_f1, target_share=cfg.target_share)
    table = pl.DataFrame([
        {"users": "fit", "policy": f"tau={chosen.tau}", **_cols(chosen)},
        {"users": "held out", "policy": f"tau={chosen.tau} (calibrated)", **_cols(evaluate(held, chosen.tau))},
        {"users": "held out", "policy": f"tau={cfg.baseline_tau} (baseline)",
         **_cols(evaluate(held, cfg.baseline_tau))},
        {"users": "held out", "policy": "last tier only", **_cols(evaluate(held, 1.01))},
    ])
    target = (f"F1 >= {cfg.target_f1}" if cfg.target_f1 is not None
              else f"F1 >= {cfg.target_share} x the last tier's F1")
    report = "\n\n".join([
        f"## calibration of {run_dir.name}: {len(samples)} shadow samples ({len(fit)} fit, "
        f"{len(held)} held out, split by user)",
        f"Target: {target} at the lowest EffCost; chosen tau = {chosen.tau}.",
        to_markdown(table),
        "confidently wrong: accepted by the first tier while the last tier's answer disagrees "
        "(F1 between them < 0.5), share of all samples.",
    ])
    (run_dir / "calibration.md").write_text(report + "\n")
    (run_dir / "router_override.yaml").write_text(f"# python -m jobs.calibrate: {target}\nrouter:\n  tau: {chosen.tau}\n")
    print(report)
    print(f"\noverride: router.tau={chosen.tau}  (also in {run_dir / 'router_override.yaml'})")
    return {"tau": chosen.tau, "fit": asdict(chosen), "held": asdict(evaluate(held, chosen.tau)),
            "baseline": asdict(evaluate(held, cfg.baseline_tau))}


def _cols(r) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {"n": r.n, "F1": round(100 * r.f1, 1), "EffCost/req": round(r.eff_cost, 1),
            "esc %": round(100 * r.escalation_rate, 1), "confidently wrong %": round(100 * r.confidently_wrong, 1)}
