"""From per-step rows to growth: means per depth, cumulative cost, the power-law fit, where the
capacity (top_k) and the memory budget stop the injection growing."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import polars as pl

TOKEN_COLUMNS = ("base_tokens", "injected_tokens", "history_tokens", "output_tokens")
# b within this of 1 reads as linear growth of the cumulative cost; above it super-linear.
LINEAR_TOLERANCE = 0.1


def per_depth(rows: pl.DataFrame) -> pl.DataFrame:
    """Mean over the workflows per (source, variant, depth), with the cumulative cost and
    injected tokens of a workflow of that depth (the sum of its first ``depth`` steps)."""
    keys = ["source", "variant", "condition", "sweep", "top_k", "probe_budget", "budget"]
    means = (rows.group_by([*keys, "depth"], maintain_order=True)
             .agg(*(pl.col(c).mean() for c in (*TOKEN_COLUMNS, "answer_injected_tokens", "eff_cost",
                                                "eff_cost_prod",
                                                "memories_injected", "memories_retrieved",
                                                "calls")),
                  pl.col("budget_bound").any(), pl.len().alias("workflows")))
    # rows come source by source, variant by variant, depth by depth: that order is kept
    per = ["source", "variant"]
    return means.with_columns(
        pl.col(c).cum_sum().over(per).alias(f"cum_{c}")
        for c in ("eff_cost", "eff_cost_prod", "injected_tokens")
    )


def fit_power(depth: Sequence[float], value: Sequence[float]) -> tuple[float, float, float]:
    """``value ~ a * depth ** b`` by least squares on the values themselves: ``(a, b, R^2)``.
    Not in log-log space: there the first, cheapest steps (no hand-off yet, a short answer)
    weigh as much as the last ones and bend b away from 1 for a cost that grows by a constant
    per step. For each b, a is closed-form; b is found on a grid over [-2, 4], then refined to
    1e-6. Fewer than two points give nan."""
    pts = [(d, v) for d, v in zip(depth, value) if d > 0]
    if len(pts) < 2:
        return float("nan"), float("nan"), float("nan")
    x, y = (np.asarray(c, dtype=float) for c in zip(*pts))

    def best(grid: np.ndarray) -> tuple[float, float, float]:
        xb = x[None, :] ** grid[:, None]
        a = (xb @ y) / np.einsum("ij,ij->i", xb, xb)
        sse = ((y[None, :] - a[:, None] * xb) ** 2).sum(axis=1)
        i = int(np.argmin(sse))
        return float(a[i]), float(grid[i]), float(sse[i])

    _, b, _ = best(np.linspace(-2.0, 4.0, 6001))
    a, b, sse = best(np.linspace(b - 1e-3, b + 1e-3, 2001))
    total = float(((y - y.mean()) ** 2).sum())
    return a, b, 1.0 if total == 0 else 1.0 - sse / total


def fit_linear(depth: Sequence[float], value: Sequence[float]) -> tuple[float, float, float]:
    """``value ~ slope * depth + intercept``: ``(slope, intercept, R^2)``."""
    if len(depth) < 2:
        return float("nan"), float("nan"), float("nan")
    x, y = np.asarray(depth, dtype=float), np.asarray(value, dtype=float)
    slope, intercept = np.polyfit(x, y, 1)
    return float(slope), float(intercept), _r2(y, intercept + slope * x)


def _r2(y: np.ndarray, fitted: np.ndarray) -> float:
    total = float(((y - y.mean()) ** 2).sum())
    return 1.0 if total == 0 else 1.0 - float(((y - fitted) ** 2).sum()) / total


def growth_kind(b: float) -> str:
    if math.isnan(b):
        return "n/a"
    if b > 1 + LINEAR_TOLERANCE:
        return "super-linear"
    return "linear" if b >= 1 - LINEAR_TOLERANCE else "sub-linear"


def growth(depths: pl.DataFrame, cost: str = "eff_cost") -> pl.DataFrame:
    """Per (source, variant): the fit of the cumulative ``cost`` on depth (power and linear),
    per-step cost and injected tokens at the first and the last depth."""
    out = []
    for (source, variant), g in depths.group_by(["source", "variant"], maintain_order=True):
        g = g.sort("depth")
        d, cum = g["depth"].to_list(), g[f"cum_{cost}"].to_list()
        a, b, r2_power = fit_power(d, cum)
        slope, _, r2_linear = fit_linear(d, cum)
        # The deeper half: does the growth go on once memory is full? The per-step cost there
        # ~ d^(b_tail - 1), the cumulative cost's own exponent at that depth (a power fit of the
        # cumulative tail itself would read the cheaper first steps as growth).
        half = len(d) // 2
        steps = g[cost].to_list()
        b_tail = 1 + fit_power(d[half:], steps[half:])[1] if len(d) >= 4 else float("nan")
        first, last = g.row(0, named=True), g.row(-1, named=True)
        out.append({
            "source": source, "variant": variant, "condition": first["condition"],
            "sweep": first["sweep"], "top_k": first["top_k"], "budget": first["probe_budget"],
            "max_depth": last["depth"], "a": a, "b": b, "r2_power": r2_power,
            "r2_linear": r2_linear, "growth": growth_kind(b), "b_tail": b_tail,
            "growth_tail": growth_kind(b_tail),
            "step_cost_first": first[cost], "step_cost_last": last[cost],
            "cum_cost_last": last[f"cum_{cost}"],
            "injected_first": first["injected_tokens"], "injected_last": last["injected_tokens"],
            "history_last": last["history_tokens"],
            "injected_max": float(g["injected_tokens"].max()),
            # the answering call's block alone: what one call's memory budget caps
            "injected_call_max": float(g["answer_injected_tokens"].max()),
            "saturation_depth": saturation_depth(g),
            "budget_binds_at": _first_depth(g.filter(pl.col("budget_bound"))),
        })
    return pl.DataFrame(out)


SATURATED = 0.95  # injected tokens within 5% of their largest value: the injection has stopped
STILL_GROWING = 0.01  # a slope over the deepest quarter above 1% of that value per step


def saturation_depth(g: pl.DataFrame) -> int | None:
    """The first depth at which the injected tokens per step reach 95% of their largest value
    (capped there by top_k or by the budget; memories differ in length, so the plateau is not
    flat). None when nothing is injected, or when the injection still grows over the deepest
    quarter of the depths (it never stopped within the run)."""
    top = float(g["injected_tokens"].max() or 0) if g.height else 0.0
    if top <= 0:
        return None
    tail = g.tail(max(4, g.height // 4))
    slope = fit_linear(tail["depth"].to_list(), tail["injected_tokens"].to_list())[0]
    if slope > STILL_GROWING * top:
        return None
    return _first_depth(g.filter(pl.col("injected_tokens") >= SATURATED * top))


def _first_depth(g: pl.DataFrame) -> int | None:
    return None if g.is_empty() else int(g["depth"].min())


def at_depths(depths: pl.DataFrame, marks: Sequence[int]) -> pl.DataFrame:
    """The rows at the depths ``marks`` (those the run reached)."""
    return depths.filter(pl.col("depth").is_in(list(marks)))


def depth_marks(max_depth: int) -> list[int]:
    """1, 2, 4, 8, ... up to max_depth, and max_depth itself."""
    marks, d = [], 1
    while d < max_depth:
        marks.append(d)
        d *= 2
    return [*marks, max_depth]
