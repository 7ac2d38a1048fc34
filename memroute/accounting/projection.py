"""Monthly dollar cost of serving strategies, projected from a benchmark run's measured tokens.

Each evaluation condition stands for a deployment strategy (:data:`STRATEGY_OF`):

===================  ============  =======================================================
strategy             memory        condition
===================  ============  =======================================================
all_large            cold | warm   cold_large | warm_large (when the run has it)
all_small            cold | warm   cold_small | warm_memory_only
compound             cold | warm   cold_compound | warm_compound
===================  ============  =======================================================

A call is priced by its role: every call of all_small is ``small``, every call of all_large is
``large``; in compound the probe (tier 0) is ``small`` and every escalation (tier >= 1; in a 3-tier
cascade the middle tier too, a conservative upper bound) is ``large``. Tokens per query are the
condition's mean over its questions, input including the injected memories, rejected probe calls
included (they are paid for). Monthly USD = queries per month x USD per query.
"""

from __future__ import annotations

from typing import Mapping

import polars as pl

from memroute.config.cost_report import PriceSheet

STRATEGIES = ("all_large", "all_small", "compound")
STRATEGY_OF: dict[str, tuple[str, str]] = {
    "cold_large": ("all_large", "cold"),
    "warm_large": ("all_large", "warm"),
    "cold_small": ("all_small", "cold"),
    "warm_memory_only": ("all_small", "warm"),
    "cold_compound": ("compound", "cold"),
    "warm_compound": ("compound", "warm"),
}
DEFAULT_VOLUMES: dict[str, int] = {"personal": 7_000, "enterprise": 3_000_000}


def tokens_per_query(df: pl.DataFrame) -> pl.DataFrame:
    """Mean input/output tokens per query per role for every condition of :data:`STRATEGY_OF`.

    Columns: strategy, memory, condition, n, f1, share_small, small_in, small_out, large_in, large_out.
    """
    known = [c for c in dict.fromkeys(df["condition"].to_list()) if c in STRATEGY_OF]
    if not known:
        raise ValueError(
            f"no condition of the predictions maps to a strategy: have {sorted(set(df['condition']))}, "
            f"need any of {', '.join(STRATEGY_OF)}"
        )
    sub = df.filter(pl.col("condition").is_in(known))
    strategy = pl.col("condition").replace_strict({c: s for c, (s, _) in STRATEGY_OF.items()}, default=None)
    memory = pl.col("condition").replace_strict({c: m for c, (_, m) in STRATEGY_OF.items()}, default=None)
    per_q = (
        sub.select("condition", "calls").with_row_index("row")
        .explode("calls").drop_nulls("calls").unnest("calls")
        .with_columns(strategy.alias("strategy"))
        .with_columns(
            pl.when(pl.col("strategy") == "all_small").then(pl.lit("small"))
            .when(pl.col("strategy") == "all_large").then(pl.lit("large"))
            .when(pl.col("tier") == 0).then(pl.lit("small"))
            .otherwise(pl.lit("large")).alias("role")
        )
    )
    sums = per_q.group_by("condition").agg(
        *(pl.col(tok).filter(pl.col("role") == role).sum().alias(f"{role}_{tok}")
          for role in ("small", "large") for tok in ("in", "out"))
    )
    stats = sub.group_by("condition").agg(
        pl.len().alias("n"), pl.col("f1").mean().alias("f1"),
        pl.col("on_small").cast(pl.Float64).mean().alias("share_small"),
    )
    tok_cols = ["small_in", "small_out", "large_in", "large_out"]
    out = (
        stats.join(sums, on="condition", how="left")
        .with_columns(*(pl.col(c).fill_null(0).cast(pl.Float64) / pl.col("n") for c in tok_cols))
        .with_columns(strategy.alias("strategy"), memory.alias("memory"))
    )
    return _ordered(out).select("strategy", "memory", "condition", "n", "f1", "share_small", *tok_cols)


def project(
    df: pl.DataFrame, sheet: PriceSheet | None = None, volumes: Mapping[str, int] | None = None
) -> pl.DataFrame:
    """One row per (strategy, memory, volume): measured tokens per query, USD per query, monthly USD
    and the strategy's F1 (mean token F1 of its condition, 0-1).

    Columns: strategy, memory, condition, volume, queries_per_month, n, f1, share_small, small_in,
    small_out, large_in, large_out, usd_per_query, monthly_usd.
    """
    sheet = sheet or PriceSheet()
    volumes = dict(DEFAULT_VOLUMES if volumes is None else volumes)
    if not volumes:
        raise ValueError("volumes is empty: give at least one {name: queries per month}")
    for name, q in volumes.items():
        if q < 0:
            raise ValueError(f"volumes.{name} must be >= 0, got {q}")
    tokens = tokens_per_query(df)
    usd = [
        sheet.small.usd(si, so) + sheet.large.usd(li, lo)
        for si, so, li, lo in tokens.select("small_in", "small_out", "large_in", "large_out").iter_rows()
    ]
    tokens = tokens.with_columns(pl.Series("usd_per_query", usd, dtype=pl.Float64))
    vol = pl.DataFrame({"volume": list(volumes), "queries_per_month": [int(v) for v in volumes.values()]})
    vol_rank = {v: i for i, v in enumerate(volumes)}
    out = tokens.join(vol, how="cross").with_columns(
        (pl.col("usd_per_query") * pl.col("queries_per_month")).alias("monthly_usd")
    )
    out = out.sort(pl.col("volume").replace_strict(vol_rank), maintain_order=True)
    cols = ["strategy", "memory", "condition", "volume", "queries_per_month", "n", "f1", "share_small",
            "small_in", "small_out", "large_in", "large_out", "usd_per_query", "monthly_usd"]
    return out.select(cols)


def projection_markdown(table: pl.DataFrame, sheet: PriceSheet | None = None) -> str:
    """The projection as Markdown: one line per strategy, a monthly USD column per volume, and the
    cost relative to all_large with the same memory (or cold all_large when the run has no warm one)."""
    sheet = sheet or PriceSheet()
    volumes = list(dict.fromkeys(table["volume"].to_list()))
    queries = dict(table.select("volume", "queries_per_month").unique(maintain_order=True).iter_rows())
    first = table.filter(pl.col("volume") == volumes[0])
    large = {m: u for s, m, u in first.select("strategy", "memory", "usd_per_query").iter_rows() if s == "all_large"}
    head = ["strategy", "memory", "condition", "F1 %", "% small", "in/q small", "out/q small",
            "in/q large", "out/q large", "USD/query"]
    head += [f"{v} USD/month ({queries[v]:,} q)" for v in volumes] + ["vs all_large"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in first.iter_rows(named=True):
        monthly = {v: u for v, u in table.filter(
            (pl.col("strategy") == r["strategy"]) & (pl.col("memory") == r["memory"])
        ).select("volume", "monthly_usd").iter_rows()}
        ref = large.get(r["memory"], large.get("cold"))
        rel = f"{100 * r['usd_per_query'] / ref:.0f}%" if ref else ""
        cells = [r["strategy"], r["memory"], r["condition"], f"{100 * r['f1']:.1f}",
                 f"{100 * r['share_small']:.0f}", f"{r['small_in']:.0f}", f"{r['small_out']:.1f}",
                 f"{r['large_in']:.0f}", f"{r['large_out']:.1f}", f"{r['usd_per_query']:.6f}"]
        cells += [_money(monthly[v]) for v in volumes] + [rel]
        lines.append("| " + " | ".join(cells) + " |")
    prices = (f"small {sheet.small.usd_per_m_input:g}/{sheet.small.usd_per_m_output:g}, "
              f"large {sheet.large.usd_per_m_input:g}/{sheet.large.usd_per_m_output:g} USD per M input/output tokens")
    return "\n".join([
        f"## Cost projection ({prices})",
        "",
        "Tokens per query are measured in the run (input includes injected memories; rejected probe "
        "calls are counted); all_small = cold_small / warm_memory_only, compound = cold_compound / "
        "warm_compound, all_large = cold_large / warm_large. 'vs all_large': cost per query relative to "
        "all_large with the same memory (cold when the run has no warm_large).",
        "",
        *lines,
    ])


def _money(usd: float) -> str:
    """Enough digits that a small personal bill does not print as 0.00."""
    return f"{usd:,.0f}" if usd >= 1000 else f"{usd:.2f}" if usd >= 1 else f"{usd:.4f}"


def _ordered(df: pl.DataFrame) -> pl.DataFrame:
    rank = {s: i for i, s in enumerate(STRATEGIES)}
    return df.sort(pl.col("strategy").replace_strict(rank), pl.col("memory"))
