"""A Hydra multirun sweep launched onto Ray (`hydra/launcher=ray`, hydra-ray-launcher): each trial
runs as a Ray task on a local loopback Ray node and records its own MLflow run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[2]


def test_retrieval_sweep_runs_trials_as_ray_tasks(tmp_path):
    db = tmp_path / "mlflow.db"
    cmd = [
        sys.executable, "-m", "jobs.retrieval_eval", "-m", "hydra/launcher=ray",
        "+hydra.launcher.ray.init.num_cpus=2", "+hydra.launcher.ray.init.include_dashboard=false",
        "+hydra.launcher.ray.remote.num_cpus=1",
        "dataset=longmemeval", "dataset.size=small", "strategies=[bm25,hybrid-weighted]", "dims=[null]",
        "retrieval.alpha=0.3,0.7", "tracking=local", f"tracking.tracking_uri=sqlite:///{db}",
        f"tracking.artifact_location={tmp_path / 'art'}", f"output_dir={tmp_path / 'out'}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # loopback-only local node
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "_run_job pid=" in log  # the trials ran inside Ray workers, not in this process
    runs = sorted((tmp_path / "out").iterdir())
    assert len(runs) == 2  # one result folder per trial, even when both start in the same second
    for run in runs:
        scores = pl.read_parquet(run / "scores.parquet")
        assert set(scores["strategy"]) == {"bm25", "hybrid-weighted"}
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir() if p.is_dir()) == ["0", "1"]

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{db}")
    found = mlflow.search_runs(search_all_experiments=True, output_format="list")
    trials = [r for r in found if r.data.tags.get("job") == "retrieval_eval"]
    alphas = sorted(r.data.params.get("retrieval.alpha") for r in trials)
    assert alphas == ["0.3", "0.7"], alphas
    # the sweep callback's parent run holds both trials (jobs/sweep_callback.py)
    (parent,) = [r for r in found if r.data.tags.get("job") == "sweep"]
    assert {r.data.tags["mlflow.parentRunId"] for r in trials} == {parent.info.run_id}
