"""The cost projection job as a user runs it: subprocess, Hydra, a run folder on disk, MLflow (SQLite)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.prediction_frames import call, frame, row

ROOT = Path(__file__).resolve().parents[2]
RUN = "20260101-000000-abc123"


@pytest.fixture
def output_dir(tmp_path):
    run_dir = tmp_path / "runs" / RUN
    run_dir.mkdir(parents=True)
    frame([
        row("cold_small", "q1", 0.2, [call(0, "small", 100, 10, 0.9, True)]),
        row("cold_compound", "q1", 0.3, [call(0, "small", 100, 10, 0.2, False), call(1, "large", 100, 10, 0.9, True)]),
        row("warm_compound", "q1", 0.9, [call(0, "small", 500, 4, 0.9, True)]),
        row("cold_large", "q1", 0.4, [call(0, "large", 100, 10, 0.9, True)]),
    ]).write_parquet(run_dir / "predictions.parquet")
    return tmp_path / "runs"


def _job(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "jobs.cost_report", *args, f"hydra.run.dir={tmp_path / 'hydra'}"]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_cost_report_by_run_id_logs_to_mlflow(output_dir, tmp_path):
    db = tmp_path / "mlflow.db"
    proc = _job(f"run_id={RUN}", f"output_dir={output_dir}", "prices.large.usd_per_m_output=20",
                "tracking=local", f"tracking.tracking_uri=sqlite:///{db}",
                f"tracking.artifact_location={tmp_path / 'art'}", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    out = proc.stdout
    assert "large 2.5/20 USD per M" in out
    # all_large: (100 * 2.50 + 10 * 20) / 1e6 * 3,000,000 = 1,350 USD per month
    assert re.search(r"\| all_large \| cold \| cold_large \|.*\| 1,350 \|", out)
    assert "| compound | warm | warm_compound | 90.0 |" in out
    run_dir = output_dir / RUN
    assert "| all_small | cold | cold_small |" in (run_dir / "cost_report.md").read_text()
    assert (run_dir / "cost_projection.png").stat().st_size > 2000

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{db}")
    run_id = re.search(r"MLflow run id: ([0-9a-f]{32})", out).group(1)
    data = mlflow.get_run(run_id).data
    assert data.metrics["all_large.cold.enterprise.usd_month"] == pytest.approx(1350.0)
    assert data.metrics["compound.cold.f1"] == pytest.approx(0.3)
    assert data.params["prices.large.usd_per_m_output"] == "20.0"


def test_cost_report_by_run_dir_with_one_volume(output_dir, tmp_path):
    proc = _job(f"run_dir={output_dir / RUN}", "~volumes.enterprise", "+volumes.team=50000",
                "tracking=disabled", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "team USD/month (50,000 q)" in proc.stdout and "enterprise" not in proc.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        ((), "run_dir=<run folder> or run_id="),
        (("run_id=nope",), "run_id: no run folder at"),
        (("run_dir={empty}",), "has no predictions.parquet"),
    ],
)
def test_missing_run_is_a_clear_error(output_dir, tmp_path, args, message):
    empty = tmp_path / "empty"
    empty.mkdir()
    args = [a.format(empty=empty) for a in args]
    proc = _job(*args, f"output_dir={output_dir}", "tracking=disabled", tmp_path=tmp_path)
    assert proc.returncode != 0
    assert message in proc.stderr + proc.stdout
