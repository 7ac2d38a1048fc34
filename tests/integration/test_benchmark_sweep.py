"""A benchmark sweep launched onto Ray (`hydra/launcher=ray`): each trial is a Ray task that logs its
MLflow run nested under the sweep's parent run, and the parent gets the sweep's summary table."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from .ray_sweep import run_ray_sweep


def test_benchmark_sweep_nests_ray_trials_under_one_parent_run(tmp_path):
    db = tmp_path / "mlflow.db"
    stdout, log = run_ray_sweep("jobs.benchmark", [
        # the tiny preset, smaller still: both tiers on transformers (no vLLM engine start), two
        # questions of one user, one condition
        "+experiment=tiny", "model@cascade.0=smollm2-135m-hf", "dataset.limit=2", "dataset.sessions_per_user=2",
        "conditions=[warm_memory_only]", "router.tau=0.3,0.7",
    ], tmp_path)
    assert "raised" not in log, log[-4000:]  # Hydra turns callback errors into warnings
    parent_id = re.search(r"MLflow sweep run id: ([0-9a-f]{32})", stdout).group(1)

    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{db}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(runs) == 3
    parent = next(r for r in runs if r.info.run_id == parent_id)
    trials = [r for r in runs if r.info.run_id != parent_id]
    assert "mlflow.parentRunId" not in parent.data.tags and parent.data.tags["job"] == "sweep"
    assert parent.data.tags["sweep.dir"] == str(tmp_path / "sweep")
    assert "router.tau=0.3,0.7" in parent.data.tags["sweep.overrides"]
    assert parent.info.status == "FINISHED"
    assert all(t.data.tags["mlflow.parentRunId"] == parent_id for t in trials)
    assert sorted(t.data.params["router.tau"] for t in trials) == ["0.3", "0.7"]
    assert all(t.data.params["tracking.parent_run_id"] == parent_id for t in trials)

    # the summary on the parent: one row per trial, the trial's own F1 and injected tokens
    assert {a.path for a in client.list_artifacts(parent_id)} == {"sweep_summary.md", "sweep_summary.csv"}
    local = client.download_artifacts(parent_id, "sweep_summary.csv", str(tmp_path / "dl"))
    rows = list(csv.DictReader(io.StringIO(Path(local).read_text())))
    by_id = {t.info.run_id: t for t in trials}
    assert [r["router.tau"] for r in rows] == ["0.3", "0.7"]
    for row in rows:
        trial = by_id[row["run_ids"]]
        assert trial.data.params["router.tau"] == row["router.tau"] and row["n"] == "1"
        assert float(row["warm_memory_only.f1.mean"]) == trial.data.metrics["warm_memory_only.f1"]
        tokens = trial.data.metrics["warm_memory_only.memory_tokens_per_q"]
        assert tokens > 0 and float(row["warm_memory_only.memory_tokens_per_q.mean"]) == tokens
    md_rows = (tmp_path / "sweep" / "sweep_summary.md").read_text().splitlines()[2:4]
    assert [line.split(" | ")[0] for line in md_rows] == ["| 0.3", "| 0.7"]

    best = parent.data.tags["best.run_ids"]
    f1 = {t.info.run_id: t.data.metrics["warm_memory_only.f1"] for t in trials}
    assert f1[best] == max(f1.values()) == parent.data.metrics["best.warm_memory_only.f1"]
    assert parent.data.tags["best.by"] == "max warm_memory_only.f1"
