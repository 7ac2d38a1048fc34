"""The amortization report of a replay: do cost and quality improve as memory accumulates?

Per window of ``window`` requests (the same boundaries for every strategy): escalation rate,
EffCost per request (stand-in and production prices), F1 over the requests with a reference,
the share of answers holding a reference's value however worded (value %), memory hit rate
(gold evidence among the injected memories), stale-answer rate (closer to a superseded value),
latency p50 / p95 of the model calls; the same split by kind; the last window against the
first; the break-even request after which memroute's cumulative cost stays below each
baseline's; and the monthly projection of the measured mix. Markdown + PNG.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl

from memroute.accounting.projection import DEFAULT_VOLUMES
from memroute.eval.report import to_markdown

REPORT = "report.md"
WINDOWS_CSV = "windows.csv"
PLOT = "amortization.png"
MAIN = "memroute"
REPLICAS_NOTE = "replicas.csv has every sample"


def metrics(group: Sequence[str]) -> list[pl.Expr]:
    """Aggregations shared by every table (scored-only means ignore nulls)."""
    return [
        pl.len().alias("n"),
        (pl.col("escalated").mean() * 100).round(1).alias("esc %"),
        pl.col("eff_cost").mean().round(1).alias("EffCost/req"),
        pl.col("eff_cost_prod").mean().round(0).alias("EffCost@prod/req"),
        (pl.col("f1").mean() * 100).round(1).alias("F1"),
        (pl.col("value_hit").cast(pl.Float64).mean() * 100).round(1).alias("value %"),
        (pl.col("evidence_hit").cast(pl.Float64).mean() * 100).round(1).alias("mem hit %"),
        (pl.col("stale").cast(pl.Float64).mean() * 100).round(1).alias("stale %"),
        (pl.col("latency_s").quantile(0.5) * 1000).round(0).alias("p50 ms"),
        (pl.col("latency_s").quantile(0.95) * 1000).round(0).alias("p95 ms"),
    ]


def windows(rows: pl.DataFrame, window: int) -> pl.DataFrame:
    return (
        rows.with_columns((pl.col("seq") // window).alias("window"))
        .group_by("strategy", "window", maintain_order=True)
        .agg(*metrics(()))
        .sort("strategy", "window")
    )


def first_last(win: pl.DataFrame, strategies: Sequence[str]) -> pl.DataFrame:
    """Each strategy's first and last window side by side, and last / first as a ratio."""
    out = []
    for s in strategies:
        w = win.filter(pl.col("strategy") == s).sort("window")
        if w.height == 0:
            continue
        first, last = w.row(0, named=True), w.row(-1, named=True)
        rec: dict[str, object] = {"strategy": s}
        for col in ("esc %", "EffCost@prod/req", "F1", "value %"):
            rec[f"{col} first"] = first[col]
            rec[f"{col} last"] = last[col]
            rec[f"{col} last/first"] = (
                round(last[col] / first[col], 2) if first[col] not in (None, 0) and last[col] is not None else None
            )
        out.append(rec)
    return pl.DataFrame(out)


def break_even(rows: pl.DataFrame, baseline: str, main: str = MAIN) -> int | None:
    """The first request (seq) from which memroute's cumulative EffCost@prod stays at or below
    ``baseline``'s to the end of the trace; None if it never does."""
    a = rows.filter(pl.col("strategy") == main).sort("seq").select("seq", "eff_cost_prod")
    b = rows.filter(pl.col("strategy") == baseline).sort("seq").select("seq", "eff_cost_prod")
    both = a.join(b, on="seq", suffix="_b").sort("seq")
    if both.height == 0:
        return None
    below = (both["eff_cost_prod"].cum_sum() <= both["eff_cost_prod_b"].cum_sum()).to_list()
    if not below[-1]:
        return None
    k = len(below) - 1
    while k > 0 and below[k - 1]:
        k -= 1
    return int(both["seq"][k])


def projection(rows: pl.DataFrame, volumes: Mapping[str, int] | None) -> pl.DataFrame:
    """Monthly EffCost@prod and USD of each strategy at the measured per-request means."""
    vols = dict(DEFAULT_VOLUMES if volumes is None else volumes)
    per = rows.group_by("strategy", maintain_order=True).agg(
        pl.col("eff_cost_prod").mean().alias("prod"), pl.col("usd").mean().alias("usd"))
    recs = []
    for r in per.iter_rows(named=True):
        rec: dict[str, object] = {"strategy": r["strategy"]}
        for name, n in vols.items():
            rec[f"{name} EffCost@prod/month"] = round(r["prod"] * n)
            rec[f"{name} USD/month"] = round(r["usd"] * n, 2)
        recs.append(rec)
    return pl.DataFrame(recs)


def extraction_lines(rows: pl.DataFrame) -> str:
    """One line per strategy whose rows name their extracting tier (memroute_facts)."""
    if "extraction_tier" not in rows.columns:
        return ""
    cols = [c for c in ("extraction_tier", "extraction_model", "extraction_keys")
            if c in rows.columns]
    seen = (rows.filter(pl.col("extraction_tier").is_not_null())
            .select("strategy", *cols).unique(maintain_order=True))
    return "\n".join(
        f"- {r['strategy']}: tier {r['extraction_tier']}"
        + (f" ({r['extraction_model']})" if r.get("extraction_model") else "")
        + (f", keys {r['extraction_keys']}" if r.get("extraction_keys") else "")
        for r in seen.iter_rows(named=True))


def prefix_cache_table(rows: pl.DataFrame) -> pl.DataFrame:
    """Per strategy: prompt tokens per request, the share the engines' prefix caches served
    (engine-reported, or counted from token ids: memroute.llm.prefix_cache), and the prefill
    tokens left to compute. Empty for rows written before the column existed."""
    if "tokens_cached" not in rows.columns or not rows.height:
        return pl.DataFrame()
    prompt = pl.col("tokens_base") + pl.col("tokens_injected")
    if "tokens_history" in rows.columns:
        prompt = prompt + pl.col("tokens_history")
    aggs = [prompt.mean().round(0).alias("prompt tok/req"),
            (pl.col("tokens_cached").sum() / prompt.sum() * 100).round(1).alias("cached %"),
            (prompt - pl.col("tokens_cached")).mean().round(0).alias("prefill tok/req")]
    if "ttft_s" in rows.columns and rows["ttft_s"].drop_nulls().len():
        aggs += [(pl.col("ttft_s").quantile(q) * 1000).round(0).alias(f"TTFT p{int(q * 100)} ms")
                 for q in (0.5, 0.95)]
    return rows.group_by("strategy", maintain_order=True).agg(*aggs)


def compaction_table(rows: pl.DataFrame) -> pl.DataFrame:
    """Per strategy that compacts (memroute_summary): its compaction calls and their share of
    its EffCost@prod (already inside eff_cost_prod), and the injected memory per request."""
    if "compaction_calls" not in rows.columns:
        return pl.DataFrame()
    rows = rows.filter(pl.col("strategy").is_in(
        rows.filter(pl.col("compaction_calls") > 0)["strategy"].unique().to_list()))
    return rows.group_by("strategy", maintain_order=True).agg(
        pl.len().alias("requests"),
        pl.col("compaction_calls").sum().alias("compaction calls"),
        pl.col("tokens_compaction").sum().alias("compaction tokens"),
        pl.col("compaction_eff_cost_prod").sum().round(0).alias("compaction EffCost@prod"),
        (pl.col("compaction_eff_cost_prod").sum() / pl.col("eff_cost_prod").sum() * 100)
        .round(1).alias("% of EffCost@prod"),
        pl.col("tokens_injected").mean().round(0).alias("injected tok/req"),
    )


def timing_table(timings: Mapping[str, Mapping[str, float]]) -> pl.DataFrame:
    """Where each strategy's replay time went: the models, the strategy around them (retrieval,
    token counts, memory writes), and the replay driver itself (scoring, checkpoint)."""
    recs = []
    for name, t in timings.items():
        total = t.get("total_s") or 0.0
        if not total or "answer_s" not in t:
            continue  # resumed with nothing left to send, or sharded (each shard times itself)
        recs.append({
            "strategy": name, "requests": int(t.get("requests", 0)), "wall_s": round(total, 1),
            "model_s": round(t["model_s"], 1),
            "strategy overhead %": round(100 * (t["answer_s"] - t["model_s"]) / total, 1),
            "shadow %": round(100 * t["shadow_s"] / total, 1),
            "driver overhead %": round(100 * (total - t["answer_s"] - t["shadow_s"]) / total, 2),
        })
    return pl.DataFrame(recs)


def write_report(rows: pl.DataFrame, run_dir: Path, *, window: int,
                 volumes: Mapping[str, int] | None = None,
                 strategies: Sequence[str] | None = None,
                 timings: Mapping[str, Mapping[str, float]] | None = None) -> tuple[str, list[str]]:
    """Markdown (returned and written) and the plot; returns (report, file names written)."""
    if "value_hit" not in rows.columns:  # rows of a run from before the value measure
        rows = rows.with_columns(pl.lit(None, dtype=pl.Boolean).alias("value_hit"))
    strategies = list(strategies or rows["strategy"].unique(maintain_order=True).to_list())
    win = windows(rows, window)
    win.write_csv(run_dir / WINDOWS_CSV)
    overall = rows.group_by("strategy", maintain_order=True).agg(*metrics(())).sort(
        pl.col("strategy").replace_strict({s: i for i, s in enumerate(strategies)}, default=99))
    by_kind = (rows.group_by("strategy", "kind", maintain_order=True).agg(*metrics(()))
               .sort("strategy", "kind"))
    n_windows = int(rows["seq"].max() // window) + 1 if rows.height else 0
    parts = [
        f"## replay: {rows['seq'].n_unique()} requests, {len(strategies)} strategies, "
        f"{n_windows} windows of {window}",
        "Whole trace per strategy (F1 over requests with a reference; value %: answers holding "
        "a reference's value, however worded; mem hit %: gold evidence among the injected "
        "memories; stale %: answers closer to a superseded value):",
        to_markdown(overall),
        "First and last window:",
        to_markdown(first_last(win, strategies)),
    ]
    extraction = extraction_lines(rows)
    if extraction:
        parts += ["Fact extraction (which cascade tier extracted the facts):", extraction]
    if MAIN in strategies:
        lines = []
        for b in strategies:
            if b == MAIN:
                continue
            k = break_even(rows, b)
            lines.append(f"- vs {b}: " + ("never within the trace" if k is None else f"from request {k}"))
        parts += ["Break-even (memroute's cumulative EffCost@prod at or below the baseline's to the end):",
                  "\n".join(lines)]
    by_domain = (rows.group_by("strategy", "domain", maintain_order=True).agg(*metrics(()))
                 .sort("strategy", "domain"))
    parts += ["Per kind:", to_markdown(by_kind), "Per domain (personal facts only memory can know; "
              "general questions the large model answers better):", to_markdown(by_domain),
              "Monthly projection at the measured per-request means:",
              to_markdown(projection(rows, volumes)),
              f"Per window: {WINDOWS_CSV}; curves: {PLOT}"]
    replicas = run_dir / "replicas.csv"
    if replicas.is_file():
        samples = pl.read_csv(replicas)
        if samples.height:
            per = samples.group_by("deployment", maintain_order=True).agg(
                pl.col("replicas").first().alias("start"), pl.col("replicas").max().alias("peak"),
                pl.col("replicas").last().alias("end"), pl.col("t_s").max().alias("sampled s"))
            parts.insert(-1, "Serve replicas during the replay (RUNNING, sampled each second; "
                             f"{REPLICAS_NOTE}):")
            parts.insert(-1, to_markdown(per))
    cache = prefix_cache_table(rows)
    if cache.height:
        parts.insert(-1, "Prompt tokens and the prefix cache (router.memory_position decides what "
                         "repeats as a prefix):")
        parts.insert(-1, to_markdown(cache))
    compaction = compaction_table(rows)
    if compaction.height:
        parts.insert(-1, "Compaction (the summary tree's own calls, included in the EffCost above):")
        parts.insert(-1, to_markdown(compaction))
    table = timing_table(timings or {})
    if table.height:
        parts.insert(-1, "Time (model: the engines' own time; strategy overhead: retrieval, token "
                         "counts, memory writes; driver overhead: scoring and checkpoint):")
        parts.insert(-1, to_markdown(table))
    report = "\n\n".join(parts)
    (run_dir / REPORT).write_text(report + "\n")
    plot(rows, win, run_dir / PLOT, strategies)
    return report, [REPORT, WINDOWS_CSV, PLOT]


def plot(rows: pl.DataFrame, win: pl.DataFrame, path: Path, strategies: Sequence[str]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    panels = [("esc %", "escalation rate (%)"), ("EffCost@prod/req", "EffCost@prod per request"),
              ("F1", "F1 (%)")]
    for ax, (col, title) in zip(axes.flat, panels):
        for s in strategies:
            w = win.filter(pl.col("strategy") == s).sort("window")
            ax.plot(w["window"].to_list(), w[col].to_list(), marker="o", label=s)
        ax.set_title(title)
        ax.set_xlabel("window")
    ax = axes.flat[3]
    for s in strategies:
        r = rows.filter(pl.col("strategy") == s).sort("seq")
        ax.plot(r["seq"].to_list(), r["eff_cost_prod"].cum_sum().to_list(), label=s)
    ax.set_title("cumulative EffCost@prod")
    ax.set_xlabel("request")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
