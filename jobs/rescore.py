"""Recompute every metric and failure cause of a saved benchmark run, without running a model.

    python -m jobs.rescore run_id=20260101-120000-a1b2c3       # a folder under output_dir
    python -m jobs.rescore run_id=<32-hex MLflow run id>         # artifacts from the tracking store
    python -m jobs.rescore run_dir=.memroute/runs/<folder> wrong_below=0.3

Exit codes: 0 rescored (identical to the saved numbers unless the scoring rules changed),
1 numbers differ although the scoring rules are the same, 2 prompt templates or saved files
changed since the run (override with allow_drift=true), or a bad setting (one line naming it).
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from jobs import cli
from memroute.config.rescore import RescoreConfig


@hydra.main(config_path="../conf", config_name="rescore", version_base="1.3")
def main(dcfg: DictConfig) -> None:
    cli.run_task(dcfg, RescoreConfig, run)


def run(cfg: RescoreConfig) -> int:
    """Rescore; the exit code of the module doc."""
    from memroute.eval.rescore import rescore_run, resolve_run_dir
    from memroute.assets.store import AssetStore

    run_dir = resolve_run_dir(
        run_id=cfg.run_id, run_dir=cfg.run_dir, output_dir=cfg.output_dir, tracking=cfg.tracking
    )
    assets = AssetStore(cfg.assets.cache_dir, pip=cfg.assets.pip)
    result = rescore_run(
        run_dir, assets=assets, wrong_below=cfg.wrong_below, allow_drift=cfg.allow_drift
    )
    for name in result.drift.unchecked:
        print(f"WARNING: {name} cannot be checked here (its model folder is not on this machine)")
    drifted = result.drift.describe() + [f"file {f}" for f in result.file_changes]
    if result.stopped:
        print(f"DRIFT: changed since the run {run_dir.name}: " + "; ".join(drifted)
              + ". Rescoring stopped (allow_drift=true to rescore anyway).", file=sys.stderr)
        return result.exit_code
    if drifted:
        print("WARNING (allow_drift=true): changed since the run: " + "; ".join(drifted))
    print((run_dir / "rescored_summary.md").read_text())
    if not result.differences:
        print(f"rescored {run_dir}: identical to the saved run (every metric and cause label)")
    else:
        why = ("the scoring rules changed (metric version differs), so differences are expected"
               if result.metric_changed else "the scoring rules are unchanged: NOT reproducible")
        print(f"rescored {run_dir}: {len(result.differences)} difference(s); {why}")
        for d in result.differences:
            print(f"  {d}")
    return result.exit_code


if __name__ == "__main__":
    cli.main(main, "rescore")
