"""The parent MLflow run of a sweep: opened before the trials, summarized and closed after them.

Trials run in other processes (Ray tasks, possibly on other nodes), so they are linked to the parent
by id (``TrackingConfig.parent_run_id`` -> the ``mlflow.parentRunId`` tag), and the parent reads them
back by that tag. Uses ``MlflowClient`` only: no active-run state in the sweep's driver process.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Mapping, Optional, Sequence

from memroute.config import TrackingConfig
from memroute.errors import ConfigError
from memroute.tracking.mlflow_tracking import _resolve_uri, experiment_id
from memroute.tracking.sweep_summary import SweepSummary, Trial

SUMMARY_MD = "sweep_summary.md"
SUMMARY_CSV = "sweep_summary.csv"
_RUN_ID = re.compile(r"^[0-9a-zA-Z_-]{1,64}$")


def _client(cfg: TrackingConfig):  # -> mlflow.MlflowClient (imported lazily)
    from mlflow import MlflowClient

    return MlflowClient(_resolve_uri(cfg.tracking_uri))


def start_parent_run(cfg: TrackingConfig, name: str, tags: Mapping[str, str]) -> str:
    """Create the sweep's run (left RUNNING) and return its id."""
    exp_id = experiment_id(replace(cfg, parent_run_id=None))
    tags = {k: str(v)[:5000] for k, v in tags.items()}  # MLflow caps tag values (8,000 characters)
    run = _client(cfg).create_run(exp_id, run_name=name, tags=tags)
    return run.info.run_id


def trial_runs(cfg: TrackingConfig, parent_run_id: str) -> list[Trial]:
    """Every run nested under ``parent_run_id``, in any status."""
    if not _RUN_ID.match(parent_run_id):  # it goes into a filter string
        raise ConfigError(f"not an MLflow run id: {parent_run_id!r}", field="tracking.parent_run_id")
    client = _client(cfg)
    exp_id = client.get_run(parent_run_id).info.experiment_id
    trials: list[Trial] = []
    token: Optional[str] = None
    while True:
        page = client.search_runs(
            [exp_id], filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'", max_results=1000,
            page_token=token,
        )
        trials += [
            Trial(r.info.run_id, dict(r.data.params), dict(r.data.metrics), r.info.status) for r in page
        ]
        token = page.token
        if not token:
            return trials


def finish_parent_run(
    cfg: TrackingConfig,
    parent_run_id: str,
    summary: SweepSummary,
    *,
    best_by: Sequence[str] = (),
    mode: str = "max",
    failed: bool = False,
) -> None:
    """Log the summary table (Markdown + CSV) and the best configuration on the parent, then close it.

    The best configuration (by the first metric matching ``best_by``, see ``SweepSummary.objective``)
    goes in as tags ``best.<param>`` and metrics ``best.<metric>`` (its means).
    """
    client = _client(cfg)
    client.log_text(parent_run_id, summary.to_markdown(), SUMMARY_MD)
    client.log_text(parent_run_id, summary.to_csv(), SUMMARY_CSV)
    n_trials = sum(len(r.run_ids) for r in summary.rows)
    client.log_metric(parent_run_id, "trials", n_trials)
    client.log_metric(parent_run_id, "trials_unfinished", len(summary.unfinished))
    metric = summary.objective(best_by)
    best = summary.best(metric, mode)
    if best is not None:
        client.set_tag(parent_run_id, "best.by", f"{mode} {metric}")
        client.set_tag(parent_run_id, "best.run_ids", " ".join(best.run_ids))
        for key, value in best.values.items():
            client.set_tag(parent_run_id, f"best.{key}", value)
        for name, stat in best.stats.items():
            if stat.mean is not None:
                client.log_metric(parent_run_id, f"best.{name}", stat.mean)
    bad = failed or bool(summary.unfinished) or n_trials == 0
    client.set_terminated(parent_run_id, "FAILED" if bad else "FINISHED")
