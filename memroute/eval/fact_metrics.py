"""What the fact layer is for, per condition: knowledge-update and temporal F1 and the stale rate.

Question groups, from the prediction rows alone (so the rescore job recomputes them):

* **knowledge update**: a value stated and later changed; the answer is the new value. The
  built-in set's ``correction`` questions, LongMemEval's ``knowledge-update`` type.
* **temporal**: LongMemEval's ``temporal-reasoning`` type, LoCoMo's category 2 (``cat2``), and
  the built-in set's ``date`` questions (its category-2 facts other than corrections).
* **stale-value rate**: the share of questions with a known superseded value (``stale_answer``:
  the built-in corrections) whose prediction gives that old value rather than the current one
  (:func:`memroute.eval.causes.matches_stale`, the rule of the ``stale_value`` cause, here
  applied to every answer, right or wrong). Null when no question has a stale value
  (LoCoMo; LongMemEval's format does not record the old value).
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from memroute.eval.causes import matches_stale

UPDATE_TYPES = ("correction", "knowledge-update")
TEMPORAL_TYPES = ("temporal-reasoning", "date", "cat2")


def is_update(fact_type: object) -> bool:
    return fact_type in UPDATE_TYPES


def is_temporal(fact_type: object) -> bool:
    return fact_type in TEMPORAL_TYPES


def has_stale(stale_answer: object) -> bool:
    return stale_answer is not None and bool(str(stale_answer).strip())


def with_fact_flags(df: pl.DataFrame) -> pl.DataFrame:
    """Adds ``is_update``, ``is_temporal``, ``has_stale`` and ``stale`` (the prediction gives
    the superseded value; null without one) to prediction rows."""
    types = df["fact_type"].to_list()
    stale_answers = (df["stale_answer"].to_list() if "stale_answer" in df.columns
                     else [None] * df.height)
    stale = [
        matches_stale(p, s, r) if has_stale(s) else None
        for p, s, r in zip(df["prediction"].to_list(), stale_answers, df["reference"].to_list())
    ]
    return df.with_columns(
        pl.Series("is_update", [is_update(t) for t in types], dtype=pl.Boolean),
        pl.Series("is_temporal", [is_temporal(t) for t in types], dtype=pl.Boolean),
        pl.Series("has_stale", [has_stale(s) for s in stale_answers], dtype=pl.Boolean),
        pl.Series("stale", stale, dtype=pl.Boolean),
    )


def _pct(expr: pl.Expr) -> pl.Expr:
    return (expr * 100).round(1)


def fact_layer_table(df: pl.DataFrame, order: Sequence[str]) -> pl.DataFrame:
    """Per condition: F1 overall, on knowledge-update and on temporal questions (%, with their
    counts), the stale-value rate (%) and the facts injected per answer."""
    flagged = with_fact_flags(df)
    facts = ([pl.col("facts_injected").mean().round(1).alias("facts/q")]
             if "facts_injected" in df.columns else [])
    out = flagged.group_by("condition").agg(
        pl.len().alias("n"),
        _pct(pl.col("f1").mean()).alias("F1"),
        pl.col("is_update").sum().alias("update n"),
        _pct(pl.col("f1").filter(pl.col("is_update")).mean()).alias("update F1"),
        pl.col("is_temporal").sum().alias("temporal n"),
        _pct(pl.col("f1").filter(pl.col("is_temporal")).mean()).alias("temporal F1"),
        pl.col("has_stale").sum().alias("stale n"),
        _pct(pl.col("stale").cast(pl.Float64).mean()).alias("stale %"),
        *facts,
    )
    rank = {c: i for i, c in enumerate(order)}
    return out.sort(pl.col("condition").replace_strict(rank, default=len(rank)))
