"""Hydra callback: one parent MLflow run per multirun sweep, every trial's run nested under it.

Registered in a job's primary config (``hydra.callbacks.mlflow_sweep``). On ``-m``:

- before any trial: opens the parent run (tags: job, sweep dir, overrides, sweeper params) and adds
  ``tracking.parent_run_id='<id>'`` to the sweep's overrides, so each trial's own config carries the
  id. That reaches trials in any process or on any node (Ray tasks on a cluster), unlike an
  environment variable or a file in the driver's sweep folder.
- after the last trial: reads the trials back by their ``mlflow.parentRunId`` tag, writes the
  summary table (Markdown + CSV; trials differing only in the seed pooled as mean and sd) on the
  parent and in the sweep folder, tags the best configuration and closes the parent.

If a trial fails, Hydra re-raises before ``on_multirun_end``; an exit hook then closes the parent as
FAILED with the summary of the trials that finished. Single runs (no ``-m``) are untouched.
"""

from __future__ import annotations

import atexit
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write


class MlflowSweepCallback(Callback):
    def __init__(
        self,
        metrics: Sequence[str] = ("*",),
        best_by: Sequence[str] = (),
        mode: str = "max",
        seed_keys: Sequence[str] = ("dataset.seed", "seed"),
    ) -> None:
        self.metrics = list(metrics)  # shell-style patterns of the trial metrics to tabulate
        self.best_by = list(best_by)  # patterns: the first that matches names the objective metric
        if mode not in ("max", "min"):
            raise ValueError(f"hydra.callbacks.mlflow_sweep.mode must be max or min, got {mode!r}")
        self.mode = mode
        self.seed_keys = list(seed_keys)
        self.parent_run_id: Optional[str] = None
        self._tracking: Any = None
        self._sweep_dir: Optional[Path] = None
        self._swept: list[str] = []

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from memroute.config import TrackingConfig, to_object
        from memroute.tracking.sweep_runs import start_parent_run

        if OmegaConf.select(config, "tracking") is None:
            return
        tracking = to_object(config.tracking, TrackingConfig)
        if not tracking.enabled or tracking.parent_run_id:
            return  # tracking off, or the sweep is itself nested under a given run
        overrides = [str(o) for o in config.hydra.overrides.task]
        axes = OmegaConf.select(config, "hydra.sweeper.params")  # basic sweeper: axes set in a config
        params = OmegaConf.to_container(axes, resolve=False) if axes is not None else {}
        assert isinstance(params, dict)
        self._swept = _swept_keys(overrides, params)
        self._sweep_dir = Path(str(config.hydra.sweep.dir))
        job = str(config.hydra.job.name)
        self.parent_run_id = start_parent_run(tracking, f"sweep-{job}", {
            "job": "sweep", "sweep.job": job, "sweep.dir": str(self._sweep_dir.resolve()),
            "sweep.overrides": " ".join(overrides),
            "sweep.params": " ".join(f"{k}={v}" for k, v in params.items()),
        })
        self._tracking = tracking
        with read_write(config.hydra.overrides), open_dict(config.hydra.overrides):
            # Quoted: the override grammar would read an all-digit id as a number.
            config.hydra.overrides.task.append(f"tracking.parent_run_id='{self.parent_run_id}'")
        atexit.register(self._close, failed=True)
        print(f"MLflow sweep run id: {self.parent_run_id} (tracking uri {tracking.tracking_uri})")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        atexit.unregister(self._close)
        self._close(failed=False)

    def _close(self, failed: bool) -> None:
        from memroute.tracking.sweep_runs import (
            SUMMARY_CSV, SUMMARY_MD, finish_parent_run, trial_runs,
        )
        from memroute.tracking.sweep_summary import summarize_sweep

        if self.parent_run_id is None:
            return
        parent, self.parent_run_id = self.parent_run_id, None  # close once
        summary = summarize_sweep(
            trial_runs(self._tracking, parent), metric_patterns=self.metrics, swept_keys=self._swept,
            seed_keys=self.seed_keys,
        )
        finish_parent_run(
            self._tracking, parent, summary, best_by=self.best_by, mode=self.mode, failed=failed
        )
        if self._sweep_dir is not None and self._sweep_dir.is_dir():
            (self._sweep_dir / SUMMARY_MD).write_text(summary.to_markdown())
            (self._sweep_dir / SUMMARY_CSV).write_text(summary.to_csv())
        state = ", FAILED" if failed else ""
        print(f"\nsweep summary (MLflow run {parent}{state}):\n\n{summary.to_markdown()}")


def _swept_keys(overrides: Sequence[str], params: dict) -> list[str]:
    """Keys of the sweep axes, command line first: they lead the summary's columns."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    keys = [o.key_or_group for o in parsed if o.is_sweep_override()]
    return list(dict.fromkeys([*keys, *(str(k) for k in params)]))
