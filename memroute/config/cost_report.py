"""Schema of the cost projection job (conf/cost_report.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from memroute.accounting.projection import PriceSheet
from memroute.config.schema import TrackingConfig


@dataclass
class CostReportConfig:
    run_dir: Optional[str] = None  # a benchmark run folder holding predictions.parquet
    run_id: Optional[str] = None  # or the folder's name under output_dir (e.g. 20261130-023638-ab12cd)
    output_dir: str = ".memroute/runs"  # where run_id is looked up (the benchmark's output_dir)
    prices: PriceSheet = field(default_factory=PriceSheet)  # USD per M tokens, small and large role
    # Queries per month per deployment; empty = DEFAULT_VOLUMES (personal 7,000, enterprise 3,000,000).
    # Empty by default so that conf/cost_report.yaml's entries can be dropped (~volumes.enterprise):
    # to_object merges onto this default, which would otherwise bring a dropped key back.
    volumes: dict[str, int] = field(default_factory=dict)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
