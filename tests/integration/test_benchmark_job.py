"""The main job as a user runs it: a real subprocess, real models (tiny preset), real MLflow store."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.vllm
def test_benchmark_job_tiny_prints_table_and_logs_to_mlflow(tmp_path):
    db = tmp_path / "mlflow.db"
    cmd = [
        sys.executable, "-m", "jobs.benchmark", "+experiment=tiny", "tracking=local",
        f"tracking.tracking_uri=sqlite:///{db}", f"tracking.artifact_location={tmp_path / 'artifacts'}",
        f"output_dir={tmp_path / 'runs'}", f"hydra.run.dir={tmp_path / 'hydra'}",
    ]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    out = proc.stdout
    for cond in ("cold_small", "cold_compound", "warm_memory_only", "warm_compound", "cold_large"):
        assert f"| {cond} |" in out
    assert "F1 (%) per fact_type" in out
    run_id = re.search(r"MLflow run id: ([0-9a-f]{32})", out).group(1)

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{db}")
    run = mlflow.get_run(run_id)
    assert "warm_compound.f1" in run.data.metrics
    assert run.data.params["router.tau"] == "0.5"
    arts = {a.path for a in mlflow.MlflowClient().list_artifacts(run_id)}
    assert {"predictions.parquet", "report.md"} <= arts

    preds = pl.read_parquet(next((tmp_path / "runs").glob("*/predictions.parquet")))
    assert preds.height == 5 * 8  # 5 conditions x 8 questions (limit)
    cold = preds.filter(pl.col("condition") == "cold_small")
    warm = preds.filter(pl.col("condition") == "warm_memory_only")
    assert (cold["injected_tokens"] == 0).all() and (warm["injected_tokens"] > 0).all()
    assert (preds.filter(pl.col("condition") == "cold_large")["on_small"] == False).all()  # noqa: E712
