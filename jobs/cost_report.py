"""Cost projection of a benchmark run: monthly USD of all-large, all-small and compound serving.

    python -m jobs.cost_report run_id=20261130-023638-ab12cd    # a folder under output_dir
    python -m jobs.cost_report run_dir=/tmp/bench/20261130-023638-ab12cd
    python -m jobs.cost_report run_id=... prices.large.usd_per_m_output=8 +volumes.team=50000
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from jobs import cli
from memroute.config.cost_report import CostReportConfig


@hydra.main(config_path="../conf", config_name="cost_report", version_base="1.3")
def main(dcfg: DictConfig) -> None:
    cli.run_task(dcfg, CostReportConfig, run)


def run(cfg: CostReportConfig) -> None:
    from memroute.eval.cost_report_run import run_cost_report

    run_cost_report(cfg)


if __name__ == "__main__":
    cli.main(main, "cost_report")
