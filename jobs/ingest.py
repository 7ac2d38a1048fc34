"""Bulk ingest job: a dataset's turn-pairs -> embeddings (Ray Data actor pool) -> Milvus.

    python -m jobs.ingest                                   # generated LongMemEval set (small)
    python -m jobs.ingest dataset=longmemeval dataset.size=s-like
    python -m jobs.ingest dataset=locomo                    # LoCoMo conv-26
    python -m jobs.ingest dataset=traces dataset.path=traces.jsonl
    python -m jobs.ingest ray=cluster memory=server embed.num_gpus=1 embedder.device=cuda

Re-running writes nothing new: pair ids are deterministic and stored ones are skipped.
Exit codes: 0 ok; 1 the store refused more rows than ``max_errors``, or a back end failed;
2 bad input or config (a bad dataset file is reported before Ray starts).
"""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig

from jobs import cli
from jobs.ray_init import init_ray
from memroute.config import IngestConfig, RayConfig

log = logging.getLogger(__name__)


class LazyRay:
    """Starts Ray the first time the pipeline needs it; shuts down only what it started."""

    def __init__(self, cfg: RayConfig) -> None:
        self.cfg = cfg
        self.started = False

    def ensure(self) -> None:
        if not self.started:
            self.started = init_ray(self.cfg)

    def close(self) -> None:
        if self.started:
            import ray

            ray.shutdown()
            self.started = False


def run(cfg: IngestConfig) -> int:
    """The job body on a typed config; returns the exit code (errors go to :mod:`jobs.cli`)."""
    from pathlib import Path

    from memroute.datasets.registry import dataset_turn_pairs
    from memroute.ingest import check_ingest_config
    from memroute.tracking.mlflow_tracking import Tracker, flatten
    from pipelines.ingest import ingest_pairs

    check_ingest_config(cfg)
    # Loaded before Ray starts: a bad file fails here, naming file, record and field.
    pairs = dataset_turn_pairs(cfg.dataset, Path(cfg.work_dir))
    print(f"dataset {cfg.dataset.name}: {len(pairs)} turn-pairs", flush=True)
    lazy = LazyRay(cfg.ray)
    try:
        tracker = Tracker(cfg.tracking)
        with tracker.run(f"ingest-{cfg.dataset.name}", tags={"job": "ingest"}):
            tracker.log_params(flatten(cfg))
            summary = ingest_pairs(pairs, cfg, ensure_ray=lazy.ensure)
            tracker.log_metrics(summary.metrics())
    finally:
        lazy.close()
    for message in summary.error_messages:
        print(f"refused: {message}", file=sys.stderr)
    print(summary.line(), flush=True)
    if tracker.run_id:
        print(f"MLflow run id: {tracker.run_id}")
    if summary.errors > cfg.max_errors:
        print(
            f"error: the store refused {summary.errors} rows (max_errors={cfg.max_errors})",
            file=sys.stderr,
        )
        return 1
    return 0


@hydra.main(config_path="../conf", config_name="ingest", version_base="1.3")
def main(dcfg: DictConfig) -> None:
    cli.run_task(dcfg, IngestConfig, run)


if __name__ == "__main__":
    cli.main(main, "ingest")
