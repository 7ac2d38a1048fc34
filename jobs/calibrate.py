"""Pick the router's tau and fit a calibrator from a shadow replay, fitted on half the users,
reported on the other half (F1, EffCost, small-tier share, confidently wrong; ECE and AUROC of
the mean log-prob confidence against the calibrator's P(correct)).

    python -m jobs.replay trace=... shadow_share=0.1          # every tier alone on 10% of requests
    python -m jobs.calibrate run_id=<replay run folder>        # target: 95% of the last tier's F1
    python -m jobs.calibrate run_id=... target_f1=0.6 correct_f1=0.5 l2=1.0
    python -m jobs.calibrate run_id=... correct=value target_wrong=0.05  # judged by value
    python -m jobs.serve router.calibrator=<run folder>/calibrator.json   # route by P(correct)
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
