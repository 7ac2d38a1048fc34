"""Run a job's Hydra multirun on a local loopback Ray node (hydra-ray-launcher), tracked in a
SQLite MLflow store under ``tmp_path``; shared by the sweep tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LAUNCHER = [
    "hydra/launcher=ray", "+hydra.launcher.ray.init.num_cpus=2",
    "+hydra.launcher.ray.init.include_dashboard=false", "+hydra.launcher.ray.remote.num_cpus=1",
]


def run_ray_sweep(job: str, overrides: list[str], tmp_path: Path) -> tuple[str, str]:
    """``python -m <job> -m`` with ``overrides``; returns (stdout, stdout + stderr) after
    asserting success and that the trials ran inside Ray workers. MLflow: ``tmp_path/mlflow.db``."""
    cmd = [
        sys.executable, "-m", job, "-m", *LAUNCHER, *overrides,
        "tracking=local", f"tracking.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}",
        f"tracking.artifact_location={tmp_path / 'art'}", f"output_dir={tmp_path / 'out'}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # loopback-only local node
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "_run_job pid=" in log  # the trials ran inside Ray workers, not in this process
    return proc.stdout, log
