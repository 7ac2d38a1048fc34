"""Pick the router's tau from a shadow replay, fitted on half the users, reported on the other half.

    python -m jobs.replay trace=... shadow_share=0.1          # every tier alone on 10% of requests
    python -m jobs.calibrate run_id=<replay run folder>        # target: 95% of the last tier's F1
    python -m jobs.calibrate run_id=... target_f1=0.6
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from jobs import cli
from memroute.config.calibrate import CalibrateConfig


@hydra.main(config_path="../conf", config_name="calibrate", version_base="1.3")
def main(dcfg: DictConfig) -> None:
    cli.run_task(dcfg, CalibrateConfig, run)


def run(cfg: CalibrateConfig) -> None:
    from memroute.eval.replay.calibrate_run import run_calibration

    run_calibration(cfg)


if __name__ == "__main__":
    cli.main(main, "calibrate")
