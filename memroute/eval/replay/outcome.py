"""What one replayed request cost and answered, whichever strategy or target served it.

An :class:`Outcome` is read from the Router's :class:`~memroute.types.RouteResult` in-process, or
from the ``memroute`` object of an HTTP response, so both targets fill the same columns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memroute.accounting.cost import billed_input, eff_cost
from memroute.types import CallRecord, RouteResult

CACHE_TIER = -1  # "tier" of an answer served from the semantic cache (no model called)


@dataclass
class Outcome:
    answer: str
    tier: int  # cascade index of the answering tier (CACHE_TIER: from the cache)
    model: str
    escalated: bool
    confidences: list[float]
    tokens_base: int
    tokens_injected: int
    tokens_output: int
    eff_cost: float  # EffCost with each tier's own P (the stand-in sizes)
    eff_cost_prod: float  # the same tokens priced as the production models
    usd: float
    latency_s: float  # model time (sum over the calls)
    memory_ids: list[str] = field(default_factory=list)
    calls: int = 1
    cache_hit: bool = False
    tokens_cached: int = 0  # of the input, served by the engines' prefix caches
    tokens_history: int = 0  # the session's earlier turns (replay.session_history)
    ttft_s: float | None = None  # the first call's time to first token, where the engine says
    # EffCost@prod of the cached input tokens alone, undiscounted: at cached_input_discount d
    # instead of the configured d0 the request costs eff_cost_prod + (d0 - d) * this
    cached_prod: float = 0.0
    # memroute_summary: the compaction calls this request's stored turn caused (the summary tree's
    # leaf and merge calls). They are in eff_cost, eff_cost_prod and usd above; these say how much.
    compaction_calls: int = 0
    tokens_compaction: int = 0  # their input + output tokens
    compaction_eff_cost: float = 0.0
    compaction_eff_cost_prod: float = 0.0
    # A tier refused an answer that no trusted source held (router.grounding); its confidence
    # may also have been below tau
    ungrounded: bool = False
    tier_answers: list[str] = field(default_factory=list)  # each call's answer, cheapest first

    @property
    def tokens_in(self) -> int:
        return self.tokens_base + self.tokens_injected + self.tokens_history


@dataclass(frozen=True)
class TierPrice:
    """How one cascade slot is priced: its own P, the production P it stands in for, USD."""

    params_b: float
    prod_params_b: float
    usd_per_m_input: float = 0.0
    usd_per_m_output: float = 0.0
    cached_input_discount: float = 0.0  # ModelConfig.cached_input_discount

    def usd(self, tokens_in: int, tokens_out: int, cached: int = 0) -> float:
        billed = billed_input(tokens_in, cached, self.cached_input_discount)
        return (billed * self.usd_per_m_input + tokens_out * self.usd_per_m_output) / 1e6

    def prod_eff_cost(self, tokens_in: int, tokens_out: int, cached: int = 0) -> float:
        return eff_cost(tokens_in, tokens_out, self.prod_params_b, cached_tokens=cached,
                        cached_discount=self.cached_input_discount)


def from_route_result(
    result: RouteResult, prices: Sequence[TierPrice], tier_index: Sequence[int]
) -> Outcome:
    """``tier_index[i]``: the cascade slot of the router's tier i (a one-tier router over the
    large model answers as cascade slot 1, not 0)."""
    d = result.decision
    prod = usd = cached_prod = 0.0
    for c in result.calls:
        price = prices[tier_index[c.tier]]
        cached_prod += c.cached_tokens * price.prod_params_b / 8.0
        prod += price.prod_eff_cost(c.input_tokens, c.output_tokens, c.cached_tokens)
        usd += price.usd(c.input_tokens, c.output_tokens, c.cached_tokens)
    return Outcome(
        answer=result.answer,
        tier=tier_index[d.answered_tier],
        model=d.answered_model,
        escalated=d.escalated,
        confidences=list(d.confidences),
        tokens_base=sum(c.base_prompt_tokens for c in result.calls),
        tokens_injected=sum(c.injected_tokens for c in result.calls),
        tokens_output=sum(c.output_tokens for c in result.calls),
        tokens_cached=sum(c.cached_tokens for c in result.calls),
        tokens_history=sum(c.history_tokens for c in result.calls),
        ttft_s=result.calls[0].ttft_s if result.calls else None,
        cached_prod=cached_prod,
        eff_cost=result.eff_cost,
        eff_cost_prod=prod,
        usd=usd,
        latency_s=sum(c.latency_s for c in result.calls),
        memory_ids=[str(h.memory.id) for h in d.memories],
        calls=len(result.calls),
        ungrounded=any(c.grounded is False and not c.accepted for c in result.calls),
        tier_answers=[c.answer for c in result.calls],
    )


def add_compaction(o: Outcome, calls: Sequence[CallRecord], prices: Sequence[TierPrice]) -> Outcome:
    """``o`` with the compaction ``calls`` (each priced as its cascade slot, ``CallRecord.tier``)
    added to its cost and counted in the ``compaction_*`` columns."""
    for c in calls:
        price = prices[c.tier]
        prod = price.prod_eff_cost(c.input_tokens, c.output_tokens, c.cached_tokens)
        o.compaction_calls += 1
        o.tokens_compaction += c.input_tokens + c.output_tokens
        o.compaction_eff_cost += c.eff_cost
        o.compaction_eff_cost_prod += prod
        o.eff_cost += c.eff_cost
        o.eff_cost_prod += prod
        o.usd += price.usd(c.input_tokens, c.output_tokens, c.cached_tokens)
    return o


def from_memroute_report(answer: str, report: Mapping[str, Any], prices: Sequence[TierPrice]) -> Outcome:
    """The ``memroute`` object of an HTTP response (``memroute.api.responses.memroute_report``)."""
    calls = report.get("calls") or []
    prod = usd = 0.0
    for c in calls:
        price = prices[min(int(c["tier"]), len(prices) - 1)]
        t = c["tokens"]
        tokens_in = int(t["base"]) + int(t["injected"]) + int(t.get("history", 0))
        cached = int(t.get("cached", 0))
        prod += price.prod_eff_cost(tokens_in, int(t["output"]), cached)
        usd += price.usd(tokens_in, int(t["output"]), cached)
    tokens = report["tokens"]
    return Outcome(
        answer=answer,
        tier=int(report["tier"]),
        model=str(report["model"]),
        escalated=bool(report["escalated"]),
        confidences=[float(c) for c in report["confidences"]],
        tokens_base=int(tokens["base"]),
        tokens_injected=int(tokens["injected"]),
        tokens_output=int(tokens["output"]),
        eff_cost=float(report["eff_cost"]),
        eff_cost_prod=prod,
        usd=usd,
        latency_s=sum(float(ms) for ms in report.get("latency_ms", [])) / 1000.0,
        memory_ids=[str(i) for i in report["memories_used"]["ids"]],
        calls=len(calls),
        tokens_cached=int(tokens.get("cached", 0)),
        tokens_history=int(tokens.get("history", 0)),
        ungrounded=any(c.get("grounded") is False and not c["accepted"] for c in calls),
    )
