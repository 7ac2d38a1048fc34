"""Rescore a saved benchmark run from its files alone (no model, no Milvus).

Inputs (the run folder): ``predictions.parquet`` (one row per condition x question, with every
input of the scores and causes), ``calls.parquet`` (one row per model call), ``metrics.json``
(the tables the run reported) and ``manifest.json`` (:mod:`memroute.eval.manifest`).

Steps: check the saved files' sha256s and the prompt templates against the current code
(drift: exit code 2 unless allowed), recompute every derived column (f1, bleu1, on_small,
evidence_injected, token sums and EffCost from the call records, correct, cause) and every
table, write ``rescored_*`` next to the originals and compare. With the run's metric version
the numbers must be identical (else exit code 1); with changed scoring rules (code or
``wrong_below``) differences are the point and are only listed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from memroute.accounting.cost import eff_cost
from memroute.errors import ConfigError
from memroute.eval.causes import add_causes
from memroute.eval.manifest import Drift, file_sha256, metric_version, read_manifest, template_drift
from memroute.eval.metrics import bleu1, f1
from memroute.eval.report import tables, to_markdown

if TYPE_CHECKING:
    from memroute.assets.store import AssetStore
    from memroute.config import TrackingConfig

METRICS_FILE = "metrics.json"
# Columns the rescore recomputes; everything else in predictions.parquet is a saved input.
RECOMPUTED = (
    "f1", "bleu1", "on_small", "evidence_injected", "input_tokens", "base_tokens",
    "injected_tokens", "output_tokens", "eff_cost", "eff_cost_prod", "correct", "cause",
)
EXIT_OK, EXIT_DIFFERENT, EXIT_DRIFT = 0, 1, 2
NEWER_TABLES = ("fact_layer",)  # tables added after runs were saved without them


def tables_json(tabs: Mapping[str, pl.DataFrame]) -> dict[str, list[dict[str, Any]]]:
    """Tables as JSON-ready rows (Python floats round-trip exactly through json)."""
    return {name: df.to_dicts() for name, df in tabs.items()}


@dataclass
class RescoreResult:
    run_dir: Path
    drift: Drift
    file_changes: list[str] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)
    metric_changed: bool = False
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    stopped: bool = False  # drift found and not allowed: nothing was rescored

    @property
    def exit_code(self) -> int:
        if self.stopped:
            return EXIT_DRIFT
        return EXIT_DIFFERENT if self.differences and not self.metric_changed else EXIT_OK


def _call_sums(
    calls: pl.DataFrame, prod: Mapping[str, float]
) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (condition, qid): token sums and EffCost summed in call order (as the router did)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for c in calls.sort("condition", "qid", "call").iter_rows(named=True):
        s = out.setdefault((c["condition"], c["qid"]), {
            "input_tokens": 0, "base_tokens": 0, "injected_tokens": 0, "output_tokens": 0,
            "cost": [], "cost_prod": [],
        })
        s["input_tokens"] += c["in"]
        s["base_tokens"] += c["base"]
        s["injected_tokens"] += c["injected"]
        s["output_tokens"] += c["out"]
        s["cost"].append(eff_cost(c["in"], c["out"], c["params_b"]))
        s["cost_prod"].append(eff_cost(c["in"], c["out"], prod.get(c["model"], c["params_b"])))
    return out


def score(
    preds: pl.DataFrame, calls: pl.DataFrame, manifest: Mapping[str, Any], wrong_below: float
) -> pl.DataFrame:
    """Recompute :data:`RECOMPUTED` from the saved inputs (other columns are kept as saved)."""
    prod = {t["name"]: t["prod_params_b"] for t in manifest["tiers"]}
    sums = _call_sums(calls, prod)
    new: dict[str, list[Any]] = {c: [] for c in RECOMPUTED if c not in ("correct", "cause")}
    cols = ["condition", "qid", "prediction", "reference", "category", "answered_model", "evidence",
            "injected_dia_ids"]
    for r in preds.select(cols).iter_rows(named=True):
        s = sums.get((r["condition"], r["qid"]))
        if s is None:
            raise ValueError(f"calls.parquet has no call of {r['condition']} / {r['qid']}")
        evidence = set(r["evidence"] or ())
        new["f1"].append(f1(r["prediction"], r["reference"], category=r["category"]))
        new["bleu1"].append(bleu1(r["prediction"], r["reference"]))
        new["on_small"].append(r["answered_model"] == manifest["small_model"])
        injected = set(r["injected_dia_ids"] or ())
        new["evidence_injected"].append(bool(evidence & injected) if evidence else None)
        for k in ("input_tokens", "base_tokens", "injected_tokens", "output_tokens"):
            new[k].append(s[k])
        new["eff_cost"].append(sum(s["cost"]))
        new["eff_cost_prod"].append(sum(s["cost_prod"]))
    df = preds.with_columns(
        pl.Series(k, v, dtype=preds.schema[k]) for k, v in new.items()
    )
    return add_causes(df.drop("correct", "cause", strict=False), wrong_below)


def compare_columns(saved: pl.DataFrame, new: pl.DataFrame, columns: Sequence[str]) -> list[str]:
    out = []
    for col in columns:
        same = saved[col].eq_missing(new[col])
        bad = same.not_().arg_true()
        if len(bad):
            i = bad[0]
            key = f"{saved['condition'][i]} {saved['qid'][i]}"
            was, now = saved[col][i], new[col][i]
            out.append(f"{col}: {len(bad)} row(s) differ (first {key}: {was!r} -> {now!r})")
    return out


def compare_tables(saved: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    out = []
    for name in sorted(set(saved) | set(new)):
        a, b = saved.get(name), new.get(name)
        if a == b:
            continue
        if a is None and name in NEWER_TABLES:
            continue  # the run was saved before this table existed: nothing to compare
        if a is None or b is None:
            out.append(f"table {name}: only in the {'rescored' if a is None else 'saved'} run")
            continue
        diffs = [
            f"{ra.get('condition')}.{k}: {ra.get(k)!r} -> {rb.get(k)!r}"
            for ra, rb in zip(a, b) for k in sorted(set(ra) | set(rb)) if ra.get(k) != rb.get(k)
        ]
        if len(a) != len(b):
            diffs.append(f"{len(a)} rows -> {len(b)} rows")
        out.append(f"table {name}: " + "; ".join(diffs[:5]) + (" ..." if len(diffs) > 5 else ""))
    return out


def rescore_run(
    run_dir: str | Path,
    *,
    assets: AssetStore | None = None,
    wrong_below: float | None = None,
    allow_drift: bool = False,
) -> RescoreResult:
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    changed_files = [
        name for name, sha in manifest.get("files", {}).items()
        if not (run_dir / name).is_file() or file_sha256(run_dir / name) != sha
    ]
    drift = template_drift(manifest, assets)
    result = RescoreResult(run_dir, drift, file_changes=changed_files)
    if (drift.changed or changed_files) and not allow_drift:
        result.stopped = True
        return result

    threshold = manifest["wrong_below"] if wrong_below is None else wrong_below
    saved_version = manifest["metric_version"]["sha256"]
    result.metric_changed = metric_version(threshold)["sha256"] != saved_version
    saved = pl.read_parquet(run_dir / "predictions.parquet")
    new = score(saved, pl.read_parquet(run_dir / "calls.parquet"), manifest, threshold)
    result.tables = tables(new, manifest["conditions"], manifest["group_col"])
    new_json = tables_json(result.tables)
    saved_json = json.loads((run_dir / METRICS_FILE).read_text())["tables"]
    result.differences = [
        *compare_columns(saved, new, RECOMPUTED), *compare_tables(saved_json, new_json)
    ]

    new.write_parquet(run_dir / "rescored_predictions.parquet")
    (run_dir / f"rescored_{METRICS_FILE}").write_text(
        json.dumps({"wrong_below": threshold, "tables": new_json}, indent=1) + "\n"
    )
    (run_dir / "rescored_summary.md").write_text(
        rescored_markdown(result, threshold, manifest["group_col"]) + "\n"
    )
    return result


def rescored_markdown(result: RescoreResult, wrong_below: float, group_col: str) -> str:
    t = result.tables
    verdict = (
        "identical to the saved run" if not result.differences
        else f"{len(result.differences)} difference(s) from the saved run"
    )
    return "\n\n".join([
        f"## rescored {result.run_dir.name}: {verdict}",
        to_markdown(t["summary"]),
        f"F1 (%) per {group_col}:\n\n" + to_markdown(t["by_group"]),
        f"Failure causes per condition (wrong = F1 < {wrong_below}):\n\n"
        + to_markdown(t["causes"]),
        "Knowledge-update / temporal F1 (%) and stale-value rate (%):\n\n"
        + to_markdown(t["fact_layer"]),
    ])


def resolve_run_dir(
    *, run_id: str | None, run_dir: str | None, output_dir: str, tracking: TrackingConfig
) -> Path:
    """``run_dir`` as given; else ``run_id`` as a folder name under ``output_dir``; else
    ``run_id`` as an MLflow run id, whose artifacts are downloaded to ``output_dir/mlflow-<id>``."""
    if run_dir:
        path = Path(run_dir).expanduser()
        if not path.is_dir():
            raise ConfigError(f"run_dir {str(path)!r} is not a folder", field="run_dir")
        return path
    if not run_id:
        raise ConfigError(
            "set run_id=<run folder name or MLflow run id> or run_dir=<path>", field="run_id"
        )
    local = Path(output_dir).expanduser() / run_id
    if local.is_dir():
        return local
    if not tracking.enabled:
        raise ConfigError(
            f"no run folder {str(local)!r}, and tracking is disabled so {run_id!r} cannot be an "
            "MLflow run id", field="run_id",
        )
    import mlflow
    from mlflow.exceptions import MlflowException

    from memroute.tracking.mlflow_tracking import _resolve_uri

    dest = Path(output_dir).expanduser() / f"mlflow-{run_id}"
    dest.mkdir(parents=True, exist_ok=True)
    try:
        mlflow.artifacts.download_artifacts(
            run_id=run_id, dst_path=str(dest), tracking_uri=_resolve_uri(tracking.tracking_uri)
        )
    except MlflowException as exc:
        raise ConfigError(
            f"run_id {run_id!r} is neither a folder under {output_dir!r} nor an MLflow run in "
            f"{tracking.tracking_uri}: {exc.message}", field="run_id",
        ) from None
    return dest
