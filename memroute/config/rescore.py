"""Schema of the rescore job (conf/rescore.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from memroute.config.schema import AssetsConfig, TrackingConfig


@dataclass
class RescoreConfig:
    # A run folder name under output_dir (e.g. 20260101-120000-a1b2c3), or an MLflow run id
    # (its artifacts are downloaded from the tracking store to output_dir/mlflow-<id>).
    run_id: Optional[str] = None
    run_dir: Optional[str] = None  # an explicit run folder; wins over run_id
    output_dir: str = ".memroute/runs"
    # Changed prompt templates (or saved files) stop the rescore with exit code 2 unless true.
    allow_drift: bool = False
    wrong_below: Optional[float] = None  # F1 threshold of a wrong answer; None: the run's own
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    # where the current chat templates are read from (the local asset cache)
    assets: AssetsConfig = field(default_factory=AssetsConfig)
