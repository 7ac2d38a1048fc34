"""Schema of the cost projection job (conf/cost_report.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from memroute.config.schema import TrackingConfig


@dataclass
class TierPrice:
    usd_per_m_input: float = 0.0
    usd_per_m_output: float = 0.0

    def usd(self, input_tokens: float, output_tokens: float) -> float:
        return (input_tokens * self.usd_per_m_input + output_tokens * self.usd_per_m_output) / 1e6


@dataclass
class PriceSheet:
    """USD per million tokens for the two roles (defaults: a Qwen3-8B / Qwen3-235B class pair)."""

    small: TierPrice = field(default_factory=lambda: TierPrice(0.15, 0.60))
    large: TierPrice = field(default_factory=lambda: TierPrice(2.50, 10.00))


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
