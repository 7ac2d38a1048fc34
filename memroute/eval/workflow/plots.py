"""Workflow-depth plots (PNG), drawn like :mod:`memroute.eval.plots`: a bare ``Figure`` on the
Agg canvas, no pyplot state. Input: :func:`memroute.eval.workflow.analysis.per_depth`'s frame."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from memroute.eval.workflow.analysis import fit_power


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def cost_vs_depth(depths: pl.DataFrame, source: str, path: str | Path,
                  cost: str = "eff_cost") -> Path | None:
    """Per-step and cumulative cost vs depth for the three conditions; the cumulative panel
    adds each condition's fit ``a * depth ** b`` (dashed)."""
    g = depths.filter((pl.col("source") == source) & (pl.col("sweep") == ""))
    if g.is_empty():
        return None
    fig = _figure(11, 4.5)
    step_ax, cum_ax = fig.subplots(1, 2)
    for i, (variant,) in enumerate(g.select("variant").unique(maintain_order=True).iter_rows()):
        v = g.filter(pl.col("variant") == variant).sort("depth")
        d, color = v["depth"].to_list(), f"C{i}"
        step_ax.plot(d, v[cost].to_list(), "-o", ms=3, color=color, label=variant)
        cum = v[f"cum_{cost}"].to_list()
        a, b, _ = fit_power(d, cum)
        cum_ax.plot(d, cum, "-o", ms=3, color=color, label=f"{variant} (b = {b:.2f})")
        cum_ax.plot(d, [a * x ** b for x in d], "--", lw=1, color=color)
    step_ax.set_title(f"{source}: cost of each step")
    cum_ax.set_title(f"{source}: cumulative cost (dashed: a * depth^b)")
    for ax, label in ((step_ax, f"{cost} per step"), (cum_ax, f"cumulative {cost}")):
        ax.set_xlabel("workflow depth (step)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, Path(path))


def injection_vs_depth(depths: pl.DataFrame, source: str, path: str | Path) -> Path | None:
    """Injected memory tokens per step vs depth: one line per top_k of the capacity sweep, and
    one per memory budget of the budget sweep (dotted: the budget)."""
    g = depths.filter(pl.col("source") == source)
    sweeps = [s for s in ("top_k", "budget") if g.filter(pl.col("sweep") == s).height]
    if not sweeps:
        return None
    fig = _figure(5.5 * len(sweeps), 4.5)
    axes = fig.subplots(1, len(sweeps), squeeze=False)[0]
    for ax, sweep in zip(axes, sweeps):
        s = g.filter(pl.col("sweep") == sweep)
        for i, (variant,) in enumerate(s.select("variant").unique(maintain_order=True).iter_rows()):
            v = s.filter(pl.col("variant") == variant).sort("depth")
            first = v.row(0, named=True)
            label = (f"top_k {first['top_k']}" if sweep == "top_k"
                     else f"budget {first['probe_budget']}")
            ax.plot(v["depth"].to_list(), v["injected_tokens"].to_list(), "-o", ms=2,
                    color=f"C{i}", label=label)
            if sweep == "budget":
                ax.axhline(first["probe_budget"], ls=":", lw=1, color=f"C{i}")
        top_k = s.row(0, named=True)["top_k"]
        ax.set_title(f"{source}: injected tokens per step, "
                     + ("by top_k" if sweep == "top_k" else f"by budget (top_k {top_k})"),
                     fontsize=10)
        ax.set_xlabel("workflow depth (step)")
        ax.set_ylabel("injected memory tokens per step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, Path(path))
