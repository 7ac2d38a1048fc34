"""Benchmark plots (PNG) from a predictions frame.

Each function takes the predictions (``predictions.parquet`` as a polars frame) and an output path
and returns the path, or None when the frame has nothing to draw (no compound condition, no
``cause`` column). Figures are built with ``matplotlib.figure.Figure`` and saved with the Agg
canvas: no pyplot state, no display, safe in workers and threads. The numbers come from
:mod:`memroute.eval.plot_tables`, where they are tested.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import polars as pl

from memroute.eval.plot_tables import (
    CAUSES,
    CORRECT_F1,
    DEFAULT_TAUS,
    cause_counts,
    condition_order,
    expected_calibration_error,
    f1_cost_table,
    reliability_table,
    small_share_table,
)


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)  # attach the Agg canvas: no pyplot, no display backend
    return fig


def _save(fig: Any, path: str | Path, *, layout: bool = True) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if layout:
        fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def reliability_diagram(
    df: pl.DataFrame, path: str | Path, bins: int = 10, threshold: float = CORRECT_F1
) -> Path:
    """One panel per model: share correct (F1 >= threshold) per confidence bin, the diagonal, and
    the number of answers in each bin. Accepted calls only (see :func:`reliability_table`)."""
    table = reliability_table(df, bins, threshold)
    models = list(dict.fromkeys(table["model"].to_list())) or ["(no calls)"]
    ece = expected_calibration_error(table)
    fig = _figure(4.2 * len(models), 4.2)
    axes = fig.subplots(1, len(models), squeeze=False)[0]
    for ax, model in zip(axes, models):
        g = table.filter(pl.col("model") == model)
        ax.plot([0, 1], [0, 1], "--", color="grey", lw=1, label="perfect calibration")
        ax.bar(g["lo"].to_list(), g["accuracy"].to_list(), width=1 / bins, align="edge",
               edgecolor="black", alpha=0.7, label="share correct")
        ax.plot(g["mean_confidence"].to_list(), g["accuracy"].to_list(), "o", color="C3", ms=4,
                label="mean confidence of the bin")
        for lo, acc, n in g.select("lo", "accuracy", "n").iter_rows():
            ax.text(lo + 0.5 / bins, min(acc, 0.93) + 0.02, str(n), ha="center", fontsize=7)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("confidence")
        ax.set_ylabel(f"share correct (F1 >= {threshold:g})")
        total = int(g["n"].sum()) if g.height else 0
        ax.set_title(f"{model}\n{total} answers, ECE {ece.get(model, 0.0):.2f}", fontsize=10)
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle("Reliability (numbers: answers per bin; accepted calls only)", fontsize=10)
    return _save(fig, path)


def small_share_vs_tau(
    df: pl.DataFrame, path: str | Path, taus: Sequence[float] = DEFAULT_TAUS, *, n_tiers: int | None = None
) -> Path | None:
    """Share answered on the small model and the resulting F1 vs tau, replayed offline per compound
    condition. The share is exact; F1 is drawn solid only where every needed answer is known."""
    table = small_share_table(df, taus, n_tiers=n_tiers)
    if table.is_empty():
        return None
    fig = _figure(10, 5)
    ax = fig.subplots()
    partial = False
    for i, (cond,) in enumerate(table.select("condition").unique(maintain_order=True).iter_rows()):
        g = table.filter(pl.col("condition") == cond)
        color = f"C{i}"
        ax.plot(g["tau"], g["share_small"], "-o", ms=3, color=color, label=f"{cond}: share on small")
        full = g.filter(pl.col("coverage") >= 1.0)
        ax.plot(full["tau"], full["f1"], "--s", ms=3, color=color, label=f"{cond}: F1")
        part = g.filter((pl.col("coverage") < 1.0) & pl.col("f1_known").is_not_null())
        if part.height:
            partial = True
            ax.plot(part["tau"], part["f1_known"], ":", marker="s", mfc="none", ms=4, color=color,
                    label=f"{cond}: F1 of known answers only")
    ax.set_xlabel("tau (accept the small model's answer when its confidence >= tau)")
    ax.set_ylabel("share / F1")
    ax.set_ylim(0, 1.05)
    note = "Replayed offline from saved confidences: the share on small is exact."
    if partial:
        note += ("\nHollow: F1 over known answers only (the tier that would answer at that tau\n"
                 "never ran for some questions, so its answer is unknown).")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title("Share on the small model vs tau")
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.text(0.01, 0.01, note, fontsize=7, va="bottom")
    return _save(fig, path, layout=False)


def f1_vs_cost(df: pl.DataFrame, path: str | Path, cost_col: str = "eff_cost") -> Path:
    """Mean F1 vs mean cost per query per condition (log x when every cost is > 0); the Pareto front
    (no other condition is both cheaper and better) is joined by a line."""
    table = f1_cost_table(df, cost_col)
    fig = _figure(7, 4.5)
    ax = fig.subplots()
    for i, r in enumerate(table.iter_rows(named=True)):
        ax.scatter(r["cost"], r["f1"], s=60, color=f"C{i}", edgecolor="black" if r["on_front"] else "none",
                   linewidth=1.5, zorder=3)
        ax.annotate(r["condition"], (r["cost"], r["f1"]), textcoords="offset points", xytext=(5, 5), fontsize=8)
    front = table.filter(pl.col("on_front")).sort("cost")
    ax.plot(front["cost"], front["f1"], "-", color="black", lw=1, zorder=2, label="Pareto front")
    if table.height and table["cost"].min() > 0:
        ax.set_xscale("log")
    ax.set_xlabel(f"mean {cost_col} per query" + (" (log)" if ax.get_xscale() == "log" else ""))
    ax.set_ylabel("mean F1")
    top = float(table["f1"].max() or 0.0) if table.height else 0.0
    ax.set_ylim(0, min(1.05, max(0.05, top * 1.2)))
    ax.legend(fontsize=8, loc="best")
    ax.set_title("F1 vs cost per condition")
    return _save(fig, path)


def causes_by_condition(df: pl.DataFrame, path: str | Path) -> Path | None:
    """Stacked bars: wrong answers per condition split by failure cause (None without ``cause``)."""
    counts = cause_counts(df)
    if counts is None:
        return None
    conds = condition_order(df)
    causes = [c for c in CAUSES if c in set(counts["cause"])] + sorted(set(counts["cause"]) - set(CAUSES))
    fig = _figure(max(6.0, 1.2 * len(conds) + 3), 4.5)
    ax = fig.subplots()
    bottom = [0] * len(conds)
    for i, cause in enumerate(causes):
        sub = {c: n for c, n in counts.filter(pl.col("cause") == cause).select("condition", "n").iter_rows()}
        heights = [sub.get(c, 0) for c in conds]
        ax.bar(range(len(conds)), heights, bottom=bottom, color=f"C{i}", label=cause)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_xticks(range(len(conds)), conds, rotation=15)
    ax.set_ylabel("wrong answers")
    ax.legend(fontsize=8)
    ax.set_title("Failure causes per condition")
    return _save(fig, path)


def cost_projection_chart(table: pl.DataFrame, path: str | Path) -> Path:
    """Monthly USD per strategy, one panel per volume (from :func:`memroute.accounting.projection.project`);
    each bar is labelled with its cost and F1."""
    volumes = list(dict.fromkeys(table["volume"].to_list()))
    fig = _figure(5.5 * max(1, len(volumes)), 4.5)
    axes = fig.subplots(1, max(1, len(volumes)), squeeze=False)[0]
    for ax, volume in zip(axes, volumes):
        g = table.filter(pl.col("volume") == volume)
        labels = [f"{s}\n({m})" for s, m in g.select("strategy", "memory").iter_rows()]
        colors = [{"all_large": "C3", "all_small": "C0", "compound": "C2"}.get(s, "C7") for s in g["strategy"]]
        ax.bar(range(g.height), g["monthly_usd"].to_list(), color=colors)
        for x, (usd, f1) in enumerate(g.select("monthly_usd", "f1").iter_rows()):
            ax.text(x, usd, f"${_short(usd)}\nF1 {100 * f1:.1f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(g.height), labels, fontsize=7)
        queries = int(g["queries_per_month"][0]) if g.height else 0
        ax.set_title(f"{volume}: {queries:,} queries/month", fontsize=10)
        ax.set_ylabel("USD per month")
        ax.margins(y=0.2)
    fig.suptitle("Projected monthly cost (measured tokens x price sheet)", fontsize=10)
    return _save(fig, path)


def _short(usd: float) -> str:
    if usd >= 1e6:
        return f"{usd / 1e6:.2f}M"
    if usd >= 1e4:
        return f"{usd / 1e3:.1f}k"
    return f"{usd:.2f}" if usd < 100 else f"{usd:,.0f}"


def all_plots(
    df: pl.DataFrame, run_dir: str | Path, *, taus: Sequence[float] = DEFAULT_TAUS,
    threshold: float = CORRECT_F1, n_tiers: int | None = None,
) -> list[Path]:
    """Every benchmark plot into ``run_dir``; returns the files written (skipped plots are absent)."""
    run_dir = Path(run_dir)
    written = [
        reliability_diagram(df, run_dir / "reliability.png", threshold=threshold),
        small_share_vs_tau(df, run_dir / "small_share_vs_tau.png", taus, n_tiers=n_tiers),
        f1_vs_cost(df, run_dir / "f1_vs_cost.png", "eff_cost"),
        f1_vs_cost(df, run_dir / "f1_vs_cost_prod.png", "eff_cost_prod") if "eff_cost_prod" in df.columns else None,
        causes_by_condition(df, run_dir / "causes.png"),
    ]
    return [p for p in written if p is not None]


__all__ = [
    "all_plots", "causes_by_condition", "cost_projection_chart", "f1_vs_cost", "reliability_diagram",
    "small_share_vs_tau",
]


def frontier_plot(curves: dict[str, list[tuple[float, float]]], path: str | Path) -> Path:
    """Confidently wrong (share of the accepted lower-tier answers that are wrong) against the
    small tier's share, one curve per score, each point one threshold (jobs.calibrate)."""
    fig = _figure(6.5, 4.5)
    ax = fig.subplots()
    for i, (name, points) in enumerate(curves.items()):
        pts = sorted(points)
        ax.plot([100 * s for s, _ in pts], [100 * w for _, w in pts], "-o", ms=3, color=f"C{i}",
                label=name)
    ax.axhline(5, color="grey", lw=0.8, ls=":")
    ax.axvline(60, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("answered by the small tier (%)")
    ax.set_ylabel("wrong among the accepted small-tier answers (%)")
    ax.set_title("Held-out users: the cascade's frontier per threshold (goal: lower right)")
    ax.legend(fontsize=8)
    return _save(fig, path)
