"""The numbers behind the benchmark plots, computed from a predictions frame (pure polars).

:mod:`memroute.eval.plots` only draws these tables, so every number on a plot is unit tested here.
The input is ``predictions.parquet`` as written by :func:`memroute.eval.run.run_benchmark`: one row
per (condition, question) with ``f1``, ``on_small``, ``confidences`` and ``calls`` (a list of
``{tier, model, in, out, confidence, accepted, ...}``, tier = index within the condition's cascade).
"""

from __future__ import annotations

from typing import Sequence

import polars as pl

from memroute.eval.causes import CAUSES, WRONG_BELOW

from memroute.eval.conditions import CONDITIONS

# A row counts as correct when its token F1 reaches this (LoCoMo answers are short phrases, so a
# partial overlap of half the tokens is taken as answering the question).
CORRECT_F1 = WRONG_BELOW  # one definition of a correct answer (F1 >= 0.5), shared with causes
DEFAULT_TAUS: tuple[float, ...] = tuple(round(i / 20, 2) for i in range(21))

# Conditions that ran the same prompt on one tier of a compound condition's cascade (greedy decoding,
# same memories or none, same token budget), so their answer *is* that tier's answer. "first" is tier 0,
# "last" the last tier. warm_memory_only is not the probe of warm_compound: a single tier gets the
# escalation budget (retrieval.token_budget), the probe of a cascade retrieval.probe_token_budget.
SAME_PROMPT_AS: dict[str, dict[str, str]] = {
    "cold_compound": {"first": "cold_small", "last": "cold_large"},
    "warm_compound": {"last": "warm_large"},
}


def condition_order(df: pl.DataFrame) -> list[str]:
    """Conditions in the order they were run (first appearance)."""
    return list(dict.fromkeys(df["condition"].to_list()))


def call_frame(df: pl.DataFrame) -> pl.DataFrame:
    """One row per model call: ``row`` (index of the prediction row), condition, f1 and the call's fields."""
    return (
        df.with_row_index("row")
        .select("row", "condition", "f1", "calls")
        .explode("calls")
        .drop_nulls("calls")
        .unnest("calls")
    )


def reliability_table(df: pl.DataFrame, bins: int = 10, threshold: float = CORRECT_F1) -> pl.DataFrame:
    """Confidence bins vs share correct, per model.

    Only accepted calls count: their answer is the row's prediction, so the row's F1 says whether
    *that call* was right (a rejected probe's answer was discarded and never scored).
    Bin ``b`` holds confidences in ``[b/bins, (b+1)/bins)``; confidence 1.0 goes to the last bin.
    Columns: model, bin, lo, hi, n, mean_confidence, accuracy (share with f1 >= threshold).
    """
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    calls = call_frame(df).filter(pl.col("accepted"))
    # + 1e-9: 0.57 * 100 is 56.999... in floating point and belongs to bin 57.
    b = ((pl.col("confidence").clip(0.0, 1.0) * bins + 1e-9).floor().cast(pl.Int64)).clip(0, bins - 1)
    return (
        calls.with_columns(b.alias("bin"), (pl.col("f1") >= threshold).alias("correct"))
        .group_by("model", "bin")
        .agg(
            pl.len().alias("n"),
            pl.col("confidence").mean().alias("mean_confidence"),
            pl.col("correct").cast(pl.Float64).mean().alias("accuracy"),
        )
        .with_columns((pl.col("bin") / bins).alias("lo"), ((pl.col("bin") + 1) / bins).alias("hi"))
        .select("model", "bin", "lo", "hi", "n", "mean_confidence", "accuracy")
        .sort("model", "bin")
    )


def expected_calibration_error(table: pl.DataFrame) -> dict[str, float]:
    """ECE per model from :func:`reliability_table`: sum over bins of n/N * |accuracy - confidence|."""
    out: dict[str, float] = {}
    for (model,), g in table.group_by("model", maintain_order=True):
        total = g["n"].sum()
        gap = (g["accuracy"] - g["mean_confidence"]).abs()
        out[str(model)] = float((g["n"] * gap).sum() / total) if total else 0.0
    return out


def compound_conditions(df: pl.DataFrame) -> list[str]:
    """Conditions that route over several tiers (registered ones by definition, others if any call escalated)."""
    out = []
    escalated = set(call_frame(df).filter(pl.col("tier") > 0)["condition"].to_list())
    for c in condition_order(df):
        cond = CONDITIONS.get(c) if c in CONDITIONS else None
        if (cond is not None and cond.tiers == "all" and cond.use_routing) or (cond is None and c in escalated):
            out.append(c)
    return out


def _f1_by_question(df: pl.DataFrame, condition: str) -> dict[tuple, float]:
    rows = df.filter(pl.col("condition") == condition).select("sample_id", "qid", "f1")
    rows = rows.unique(subset=["sample_id", "qid"], keep="none")  # ambiguous keys borrow nothing
    return {(s, q): f for s, q, f in rows.iter_rows()}


def small_share_table(
    df: pl.DataFrame, taus: Sequence[float] = DEFAULT_TAUS, *, n_tiers: int | None = None
) -> pl.DataFrame:
    """Replay the router's rule offline at other thresholds for every compound condition.

    At ``tau`` a question is answered by the first tier whose confidence is >= tau, or by the last
    tier. Tier 0 always ran, so ``share_small`` is exact at any tau. Its F1 needs the answer of the
    tier that would answer: known when that tier answered in the run, or from a condition that ran
    the same prompt on that tier alone (:data:`SAME_PROMPT_AS`). ``coverage`` is the share of
    questions whose F1 at tau is known; ``f1`` is set only at full coverage, ``f1_known`` is the mean
    over the known ones. ``n_tiers``: the cascade length (default: the deepest tier seen, at least 2).
    Columns: condition, tau, n, share_small, coverage, f1, f1_known.
    """
    out: list[dict] = []
    has_keys = {"sample_id", "qid"} <= set(df.columns)
    calls = call_frame(df)
    for cond in compound_conditions(df):
        sub = df.filter(pl.col("condition") == cond)
        deepest = calls.filter(pl.col("condition") == cond)["tier"].max()
        tiers = n_tiers or max(2, int(deepest or 0) + 1)
        borrowed: dict[int, dict[tuple, float]] = {}
        if has_keys:
            for which, source in SAME_PROMPT_AS.get(cond, {}).items():
                if source in set(df["condition"].to_list()):
                    borrowed[0 if which == "first" else tiers - 1] = _f1_by_question(df, source)
        cols = ["confidences", "answered_tier", "f1"] + (["sample_id", "qid"] if has_keys else [])
        records = sub.select(cols).iter_rows(named=True)
        questions = []
        for r in records:
            known = {t: src[(r["sample_id"], r["qid"])] for t, src in borrowed.items()
                     if (r["sample_id"], r["qid"]) in src} if has_keys else {}
            known[int(r["answered_tier"])] = float(r["f1"])  # the run's own answer wins
            questions.append((list(r["confidences"] or []), known))
        for tau in taus:
            on_small, scores, missing = 0, [], 0
            for conf, known in questions:
                tier = _answering_tier(conf, tau, tiers)
                on_small += tier == 0
                if tier is not None and tier in known:
                    scores.append(known[tier])
                else:
                    missing += 1
            n = len(questions)
            out.append({
                "condition": cond, "tau": float(tau), "n": n,
                "share_small": on_small / n if n else 0.0,
                "coverage": len(scores) / n if n else 0.0,
                "f1": sum(scores) / n if n and not missing else None,
                "f1_known": sum(scores) / len(scores) if scores else None,
            })
    schema = {"condition": pl.String, "tau": pl.Float64, "n": pl.Int64, "share_small": pl.Float64,
              "coverage": pl.Float64, "f1": pl.Float64, "f1_known": pl.Float64}
    return pl.DataFrame(out, schema=schema)


def _answering_tier(confidences: Sequence[float], tau: float, n_tiers: int) -> int | None:
    """The router's rule: the first tier with confidence >= tau, else the last; None when a needed
    confidence was never measured (that tier did not run)."""
    for t in range(n_tiers - 1):
        if t >= len(confidences):
            return None
        if confidences[t] >= tau:
            return t
    return n_tiers - 1


def pareto_front(costs: Sequence[float], scores: Sequence[float]) -> list[bool]:
    """True for points no other point dominates (costs no more and scores no less, one strictly)."""
    pts = list(zip(costs, scores))
    return [
        not any(cj <= ci and sj >= si and (cj < ci or sj > si) for cj, sj in pts)
        for ci, si in pts
    ]


def f1_cost_table(df: pl.DataFrame, cost_col: str = "eff_cost") -> pl.DataFrame:
    """Mean F1 and mean cost per query per condition, with ``on_front`` (Pareto optimal)."""
    if cost_col not in df.columns:
        raise ValueError(f"no column {cost_col!r} in the predictions (have {', '.join(df.columns)})")
    order = {c: i for i, c in enumerate(condition_order(df))}
    table = (
        df.group_by("condition")
        .agg(pl.len().alias("n"), pl.col("f1").mean().alias("f1"), pl.col(cost_col).mean().alias("cost"))
        .sort(pl.col("condition").replace_strict(order))
    )
    front = pareto_front(table["cost"].to_list(), table["f1"].to_list())
    return table.with_columns(pl.Series("on_front", front, dtype=pl.Boolean))


def cause_counts(df: pl.DataFrame) -> pl.DataFrame | None:
    """Failure causes per condition (long: condition, cause, n); None without a ``cause`` column."""
    if "cause" not in df.columns:
        return None
    order = {c: i for i, c in enumerate(condition_order(df))}
    return (
        df.filter(pl.col("cause").is_not_null())
        .group_by("condition", "cause")
        .agg(pl.len().alias("n"))
        .sort(pl.col("condition").replace_strict(order), "cause")
    )
