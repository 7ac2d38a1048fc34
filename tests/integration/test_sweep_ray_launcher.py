"""A Hydra multirun sweep launched onto Ray (`hydra/launcher=ray`, hydra-ray-launcher): each trial
runs as a Ray task on a local loopback Ray node and records its own MLflow run."""

from __future__ import annotations

import polars as pl

from .ray_sweep import run_ray_sweep


def test_retrieval_sweep_runs_trials_as_ray_tasks(tmp_path):
    db = tmp_path / "mlflow.db"
    run_ray_sweep("jobs.retrieval_eval", [
        "dataset=longmemeval", "dataset.size=small", "strategies=[bm25,hybrid-weighted]", "dims=[null]",
        "retrieval.alpha=0.3,0.7",
    ], tmp_path)
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
