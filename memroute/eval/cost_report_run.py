"""The cost projection job's body: read a run's predictions, project, write and log the report."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import polars as pl

from memroute.accounting.projection import DEFAULT_VOLUMES, project, projection_markdown
from memroute.config.cost_report import CostReportConfig
from memroute.errors import ConfigError
from memroute.tracking.mlflow_tracking import Tracker, flatten


@dataclass
class CostReportOutput:
    run_dir: Path
    table: pl.DataFrame
    report: str
    chart: Path
    run_id: str | None


def resolve_run_dir(cfg: CostReportConfig) -> Path:
    """The run folder from ``run_dir`` or ``output_dir/run_id``; it must hold predictions.parquet."""
    if cfg.run_dir and cfg.run_id:
        raise ConfigError("set run_dir or run_id, not both", field="run_id")
    if cfg.run_dir:
        path, fld = Path(cfg.run_dir), "run_dir"
    elif cfg.run_id:
        path, fld = Path(cfg.output_dir) / cfg.run_id, "run_id"
    else:
        raise ConfigError(
            "name the benchmark run: run_dir=<run folder> or run_id=<folder name under output_dir>",
            field="run_dir",
        )
    if not path.is_dir():
        raise ConfigError(f"{fld}: no run folder at {path}", field=fld)
    if not (path / "predictions.parquet").is_file():
        raise ConfigError(f"{fld}: {path} has no predictions.parquet (not a benchmark run folder?)", field=fld)
    return path


def run_cost_report(cfg: CostReportConfig) -> CostReportOutput:
    from memroute.eval.plots import cost_projection_chart

    run_dir = resolve_run_dir(cfg)
    df = pl.read_parquet(run_dir / "predictions.parquet")
    try:
        table = project(df, cfg.prices, cfg.volumes or DEFAULT_VOLUMES)
    except ValueError as exc:
        raise ConfigError(str(exc), field="volumes" if "volumes" in str(exc) else "run_dir") from None
    report = projection_markdown(table, cfg.prices)
    (run_dir / "cost_report.md").write_text(report + "\n")
    chart = cost_projection_chart(table, run_dir / "cost_projection.png")

    tracker = Tracker(cfg.tracking)
    with tracker.run(f"cost-report-{run_dir.name}", tags={"job": "cost_report", "run_folder": str(run_dir)}):
        volumes = dict(table.select("volume", "queries_per_month").unique(maintain_order=True).iter_rows())
        tracker.log_params(flatten({"prices": asdict(cfg.prices), "volumes": volumes}) | {"run_dir": str(run_dir)})
        for r in table.iter_rows(named=True):
            key = f"{r['strategy']}.{r['memory']}"
            tracker.log_metrics({f"{key}.{r['volume']}.usd_month": r["monthly_usd"], f"{key}.f1": r["f1"],
                                 f"{key}.usd_per_query": r["usd_per_query"]})
        tracker.log_artifact(run_dir / "cost_report.md")
        tracker.log_artifact(chart)
    print(report)
    print(f"\nwritten: {run_dir / 'cost_report.md'}, {chart}")
    if tracker.run_id:
        print(f"MLflow run id: {tracker.run_id} (tracking uri {cfg.tracking.tracking_uri})")
    return CostReportOutput(run_dir, table, report, chart, tracker.run_id)
