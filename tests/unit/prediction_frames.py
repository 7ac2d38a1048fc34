"""Hand-built prediction rows in the schema of memroute.eval.benchmark._row (plots, cost projection)."""

from __future__ import annotations

from typing import Any, Sequence

import polars as pl

from memroute.accounting.cost import eff_cost


def call(tier: int, model: str, tokens_in: int, out: int, confidence: float, accepted: bool,
         params_b: float = 1.0) -> dict[str, Any]:
    return {"tier": tier, "model": model, "in": tokens_in, "injected": 0, "out": out, "confidence": confidence,
            "accepted": accepted, "latency_s": 0.1, "params_b": params_b}


def row(condition: str, qid: str, f1: float, calls: Sequence[dict[str, Any]], *, small_model: str = "small",
        cause: str | None = None, sample_id: str = "u1") -> dict[str, Any]:
    answered = next(c for c in calls if c["accepted"])
    r = {
        "condition": condition, "sample_id": sample_id, "qid": qid, "category": 1, "fact_type": "cat1",
        "f1": f1, "bleu1": f1, "answered_tier": answered["tier"], "answered_model": answered["model"],
        "on_small": answered["model"] == small_model, "escalated": answered["tier"] > 0,
        "confidences": [c["confidence"] for c in calls],
        "input_tokens": sum(c["in"] for c in calls), "injected_tokens": 0,
        "output_tokens": sum(c["out"] for c in calls),
        "eff_cost": sum(eff_cost(c["in"], c["out"], c["params_b"]) for c in calls),
        "calls": list(calls), "cause": cause,
    }
    r["eff_cost_prod"] = r["eff_cost"] * 10
    return r


def frame(rows: Sequence[dict[str, Any]], *, with_cause: bool = False) -> pl.DataFrame:
    """The predictions frame; without ``with_cause`` it has no ``cause`` column (runs before causes)."""
    df = pl.DataFrame(list(rows), infer_schema_length=None)
    return df.with_columns(pl.col("cause").cast(pl.String)) if with_cause else df.drop("cause")
