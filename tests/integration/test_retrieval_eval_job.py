"""The retrieval evaluation job as a user runs it: subprocess, real MiniLM, Milvus Lite, MLflow."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[2]


def test_retrieval_eval_job_on_generated_longmemeval(tmp_path):
    db = tmp_path / "mlflow.db"
    cmd = [
        sys.executable, "-m", "jobs.retrieval_eval", "dataset=longmemeval", "dataset.size=small",
        "strategies=[dense,bm25,hybrid-rrf]", "dims=[null,128]", "tracking=local",
        f"tracking.tracking_uri=sqlite:///{db}", f"tracking.artifact_location={tmp_path / 'art'}",
        f"output_dir={tmp_path / 'out'}", f"hydra.run.dir={tmp_path / 'hydra'}",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    out = proc.stdout
    for strategy in ("dense", "bm25", "hybrid-rrf"):
        assert f"| full | {strategy} |" in out and f"| 128 | {strategy} |" in out
    assert "single-session-user" in out  # per question type table
    run_dir = next((tmp_path / "out").iterdir())
    assert (run_dir / "recall_at_5.png").stat().st_size > 1000
    scores = pl.read_parquet(run_dir / "scores.parquet")
    assert set(scores["strategy"]) == {"dense", "bm25", "hybrid-rrf"}
    assert scores["turn_recall@10"].is_between(0, 1).all()
    # the generated haystacks are easy for the dense leg: most gold pairs are found in the top 10
    full_dense = scores.filter((pl.col("dim") == "full") & (pl.col("strategy") == "dense"))
    assert full_dense["turn_recall_any@10"].mean() >= 0.8

    run_id = re.search(r"MLflow run id: ([0-9a-f]{32})", out).group(1)
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{db}")
    metrics = mlflow.get_run(run_id).data.metrics
    assert "full.hybrid-rrf.turn_recall_at_5" in metrics


def test_unknown_strategy_is_a_clear_error(tmp_path):
    cmd = [sys.executable, "-m", "jobs.retrieval_eval", "strategies=[splade]", "tracking=disabled",
           f"output_dir={tmp_path}", f"hydra.run.dir={tmp_path / 'hydra'}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "Unknown retrieval strategy 'splade'" in proc.stderr + proc.stdout
