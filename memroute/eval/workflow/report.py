"""The workflow-depth report (markdown) from the per-depth means and the growth fits."""

from __future__ import annotations

import math
from collections.abc import Sequence

import polars as pl

from memroute.eval.workflow.analysis import at_depths, depth_marks


def _n(v: object, digits: int = 0) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        return f"{v:,.{digits}f}"
    return str(v)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(r) + " |" for r in rows)]


def source_section(source: str, depths: pl.DataFrame, fits: pl.DataFrame) -> list[str]:
    d = depths.filter(pl.col("source") == source)
    f = fits.filter(pl.col("source") == source)
    max_depth = int(d["depth"].max())
    lines = [f"## {source} workflows", ""]
    main = at_depths(d.filter(pl.col("sweep") == ""), depth_marks(max_depth)).sort(
        ["depth", "variant"], maintain_order=True)
    if main.height:
        lines += ["Mean tokens per step (over the workflows) and the cost of a workflow of that "
                  "depth (the sum of its first steps):", ""]
        lines += _table(
            ["depth", "condition", "base", "injected", "history", "output", "EffCost / step",
             "cumulative EffCost", "cumulative EffCost@prod"],
            [[str(r["depth"]), r["variant"], _n(r["base_tokens"]), _n(r["injected_tokens"]),
              _n(r["history_tokens"]), _n(r["output_tokens"]), _n(r["eff_cost"], 1),
              _n(r["cum_eff_cost"], 1), _n(r["cum_eff_cost_prod"], 0)]
             for r in main.iter_rows(named=True)])
        lines += ["", "Fit of the cumulative EffCost: cost ~ a * depth^b (least squares on the "
                  "costs; b 1 = linear growth, above 1 super-linear; R² linear: a straight line's; "
                  "the deeper half's own b says whether the growth goes on):", ""]
        lines += _table(
            ["condition", "b", "a", "R² (a depth^b)", "R² linear", "growth",
             f"b, depth {max_depth // 2 + 1}..{max_depth}", "growth there", "EffCost step 1",
             f"EffCost step {max_depth}", f"cumulative at {max_depth}"],
            [[r["variant"], _n(r["b"], 3), _n(r["a"], 1), _n(r["r2_power"], 4),
              _n(r["r2_linear"], 4), r["growth"], _n(r["b_tail"], 3), r["growth_tail"],
              _n(r["step_cost_first"], 1),
              _n(r["step_cost_last"], 1), _n(r["cum_cost_last"], 1)]
             for r in f.filter(pl.col("sweep") == "").iter_rows(named=True)])
        lines.append("")
    k = f.filter(pl.col("sweep") == "top_k")
    if k.height:
        budget = d.filter(pl.col("sweep") == "top_k")["probe_budget"][0]
        lines += [f"Capacity: memory with each top_k (memory budget {budget:,} tokens, so top_k "
                  "limits the injection; '-': still growing at the last depth):", ""]
        lines += _table(
            ["top_k", f"injected / step at {max_depth}", "max injected / step",
             "injection stops growing at depth", "b", f"b, depth {max_depth // 2 + 1}..",
             f"cumulative EffCost at {max_depth}"],
            [[str(r["top_k"]), _n(r["injected_last"]), _n(r["injected_max"]),
              _n(r["saturation_depth"]), _n(r["b"], 3), _n(r["b_tail"], 3),
              _n(r["cum_cost_last"], 1)]
             for r in k.iter_rows(named=True)])
        lines.append("")
    b = f.filter(pl.col("sweep") == "budget")
    if b.height:
        lines += [f"Memory budget (retrieval.probe_token_budget = token_budget) at top_k "
                  f"{b['top_k'][0]}:", ""]
        lines += _table(
            ["budget", f"injected / step at {max_depth}", "max injected / step",
             "max injected / answering call", "budget first leaves out a memory at depth",
             "injection stops growing at depth",
             "b", f"cumulative EffCost at {max_depth}"],
            [[_n(r["budget"]), _n(r["injected_last"]), _n(r["injected_max"]),
              _n(r["injected_call_max"]), _n(r["budget_binds_at"]), _n(r["saturation_depth"]),
              _n(r["b"], 3), _n(r["cum_cost_last"], 1)]
             for r in b.iter_rows(named=True)])
        lines.append("")
    return lines


def render(depths: pl.DataFrame, fits: pl.DataFrame, *, header: Sequence[str],
           skipped: Sequence[str], plots: Sequence[str]) -> str:
    lines = ["# Injection growth with workflow depth", "", *header, ""]
    lines += [f"- skipped: {s}" for s in skipped]
    if skipped:
        lines.append("")
    for (source,) in depths.select("source").unique(maintain_order=True).iter_rows():
        lines += source_section(source, depths, fits)
    if plots:
        lines += ["Plots: " + ", ".join(plots), ""]
    return "\n".join(lines)
