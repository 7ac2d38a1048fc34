"""Summary tables of a benchmark run (polars), printable as Markdown."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any, Mapping, Sequence

import polars as pl

from memroute.accounting.cost import eff_cost


def new_run_dir(output_dir: str | Path) -> Path:
    """A fresh ``<output_dir>/<timestamp>-<6 hex>`` folder. The suffix keeps parallel sweep trials
    (Hydra multirun on Ray starts several in the same second) out of each other's files."""
    path = Path(output_dir) / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    path.mkdir(parents=True, exist_ok=False)
    return path


def predictions_frame(rows: Sequence[Mapping[str, Any]], prod_params: Mapping[str, float]) -> pl.DataFrame:
    """One row per (condition, question); adds EffCost priced as the production models."""
    df = pl.DataFrame(list(rows), infer_schema_length=None)
    prod = [
        sum(eff_cost(c["in"], c["out"], prod_params.get(c["model"], c["params_b"])) for c in calls)
        for calls in df["calls"].to_list()
    ]
    return df.with_columns(pl.Series("eff_cost_prod", prod, dtype=pl.Float64))


def summary(df: pl.DataFrame, order: Sequence[str]) -> pl.DataFrame:
    out = (
        df.group_by("condition")
        .agg(
            pl.len().alias("n"),
            (pl.col("f1").mean() * 100).round(1).alias("F1"),
            (pl.col("bleu1").mean() * 100).round(1).alias("BLEU-1"),
            (pl.col("on_small").mean() * 100).round(1).alias("% small"),
            pl.col("input_tokens").sum().alias("in"),
            pl.col("injected_tokens").sum().alias("injected"),
            pl.col("output_tokens").sum().alias("out"),
            pl.col("eff_cost").sum().round(0).alias("EffCost"),
            pl.col("eff_cost_prod").sum().round(0).alias("EffCost@prod"),
            (pl.col("evidence_injected").cast(pl.Float64).mean() * 100).round(1).alias("evid %"),
        )
    )
    rank = {c: i for i, c in enumerate(order)}
    return out.sort(pl.col("condition").replace_strict(rank, default=len(rank)))


def f1_by(df: pl.DataFrame, column: str, order: Sequence[str]) -> pl.DataFrame:
    """F1 (%) per condition x ``column`` (fact_type or category)."""
    wide = (
        df.group_by("condition", column)
        .agg((pl.col("f1").mean() * 100).round(1).alias("F1"))
        .pivot(on=column, index="condition", values="F1", sort_columns=True)
    )
    rank = {c: i for i, c in enumerate(order)}
    return wide.sort(pl.col("condition").replace_strict(rank, default=len(rank)))


def to_markdown(df: pl.DataFrame) -> str:
    cols = df.columns
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.iter_rows():
        lines.append("| " + " | ".join("" if v is None else str(v) for v in row) + " |")
    return "\n".join(lines)
