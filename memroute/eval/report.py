"""Summary tables of a benchmark run (polars), printable as Markdown."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from memroute.accounting.cost import eff_cost
from memroute.eval.causes import CAUSES
from memroute.eval.fact_metrics import fact_layer_table


def new_run_dir(output_dir: str | Path) -> Path:
    """A fresh ``<output_dir>/<timestamp>-<6 hex>`` folder. The suffix keeps parallel sweep trials
    (Hydra multirun on Ray starts several in the same second) out of each other's files."""
    path = Path(output_dir) / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    path.mkdir(parents=True, exist_ok=False)
    return path


# Columns that may be all-null in a run (LoCoMo has no stale answers): fixed types keep the saved
# Parquet schema the same across datasets.
_TYPES: dict[str, pl.DataType] = {
    "stale_answer": pl.String(),
    "evidence": pl.List(pl.String()),
    "injected_dia_ids": pl.List(pl.String()),
    "memory_ids": pl.List(pl.Int64()),
    "evidence_injected": pl.Boolean(),
    "facts_block": pl.String(),
    "evidence_compacted": pl.Boolean(),
    "compacted_text": pl.String(),
}


def predictions_frame(rows: Sequence[Mapping[str, Any]], prod_params: Mapping[str, float]) -> pl.DataFrame:
    """One row per (condition, question); adds EffCost priced as the production models."""
    df = pl.DataFrame(list(rows), infer_schema_length=None)
    df = df.with_columns(pl.col(c).cast(t) for c, t in _TYPES.items() if c in df.columns)
    prod = [
        sum(eff_cost(c["in"], c["out"], prod_params.get(c["model"], c["params_b"])) for c in calls)
        for calls in df["calls"].to_list()
    ]
    return df.with_columns(pl.Series("eff_cost_prod", prod, dtype=pl.Float64))


def summary(df: pl.DataFrame, order: Sequence[str]) -> pl.DataFrame:
    """Per condition. With summary-tree conditions, ``+compaction`` is EffCost with each answer's
    share of its user's compaction calls (``compaction_eff_cost``, 0 for the other conditions)."""
    compacted = "compaction_eff_cost" in df.columns
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
            *([(pl.col("eff_cost") + pl.col("compaction_eff_cost")).sum().round(0)
               .alias("EffCost+compaction")] if compacted else []),
            (pl.col("evidence_injected").cast(pl.Float64).mean() * 100).round(1).alias("evid %"),
            pl.col("memory_bytes").mean().round(0).alias("mem B/q"),
            pl.col("injected_tokens").mean().round(1).alias("mem tok/q"),
        )
    )
    return _in_order(out, order)


def cause_table(df: pl.DataFrame, order: Sequence[str]) -> pl.DataFrame:
    """Per condition: questions, wrong answers and the count of each failure cause (all causes
    as columns, zeros included, so runs compare column by column)."""
    out = df.group_by("condition").agg(
        pl.len().alias("n"),
        pl.col("cause").is_not_null().sum().alias("wrong"),
        *[(pl.col("cause") == c).sum().alias(c) for c in CAUSES],
    )
    return _in_order(out, order)


def tables(df: pl.DataFrame, order: Sequence[str], group_col: str) -> dict[str, pl.DataFrame]:
    """Every table a run reports, computed from the scored predictions only (the rescore job
    calls this too, so saved and rescored tables come from the same code)."""
    return {
        "summary": summary(df, order),
        "by_group": f1_by(df, group_col, order),
        "causes": cause_table(df, order),
        # knowledge-update / temporal F1 and the stale-value rate, with and without the facts
        "fact_layer": fact_layer_table(df, order),
    }


def calls_frame(df: pl.DataFrame) -> pl.DataFrame:
    """One row per model call (condition, qid, call index, then the call record's fields)."""
    return (
        df.select("condition", "qid", "calls")
        .with_columns(pl.int_ranges(0, pl.col("calls").list.len()).alias("call"))
        .explode("calls", "call")
        .unnest("calls")
        .select("condition", "qid", "call", pl.exclude("condition", "qid", "call"))
    )


def _in_order(df: pl.DataFrame, order: Sequence[str]) -> pl.DataFrame:
    rank = {c: i for i, c in enumerate(order)}
    return df.sort(pl.col("condition").replace_strict(rank, default=len(rank)))


def f1_by(df: pl.DataFrame, column: str, order: Sequence[str]) -> pl.DataFrame:
    """F1 (%) per condition x ``column`` (fact_type or category)."""
    wide = (
        df.group_by("condition", column)
        .agg((pl.col("f1").mean() * 100).round(1).alias("F1"))
        .pivot(on=column, index="condition", values="F1", sort_columns=True)
    )
    return _in_order(wide, order)


def to_markdown(df: pl.DataFrame) -> str:
    cols = df.columns
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.iter_rows():
        lines.append("| " + " | ".join("" if v is None else str(v) for v in row) + " |")
    return "\n".join(lines)
