"""Route workflows step by step through the Router and attribute every step's tokens exactly.

A variant is one way of running the chain:

=============  =============================================================================
no_memory      the step's question alone (with the previous answer handed off, as every step)
memory         memroute: the step's question plus the memories retrieved for it; every
               answered step is remembered (``store_answers``, as on the serving path), so the
               next step can retrieve it; ``memory_k<K>`` / ``memory_b<B>`` are the sweeps
full_history   no memory; every earlier step (question and answer) in the prompt as history
=============  =============================================================================

Per step the row holds the sum over the step's calls (an escalated step is two calls) of the
Router's own :class:`~memroute.types.CallRecord` attribution: base + injected + history make the
engine's prompt tokens, output its completion tokens, EffCost :mod:`memroute.accounting.cost`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from memroute.accounting.cost import eff_cost
from memroute.config.schema import RetrievalConfig, RouterConfig
from memroute.config.workflow_depth import WorkflowDepthConfig
from memroute.eval.workflow.generate import Workflow, step_query, step_time
from memroute.routing.prompt import render_memory_block
from memroute.routing.router import MemoryRetriever, RouteRequest, Router, Tier
from memroute.types import Message, RetrievalHit, RouteResult, TurnPair

Row = dict[str, Any]


@dataclass(frozen=True)
class Variant:
    name: str  # no_memory | memory | full_history | memory_k<K> | memory_b<B>
    condition: str  # no_memory | memory | full_history
    top_k: int | None = None  # memory: retrieval.top_k
    probe_budget: int | None = None  # memory: retrieval.probe_token_budget (the first tier)
    budget: int | None = None  # memory: retrieval.token_budget (escalations)
    sweep: str = ""  # "" (the three conditions) | top_k | budget


def variants(cfg: WorkflowDepthConfig) -> list[Variant]:
    """The conditions, then the top_k sweep, then the budget sweep."""
    r = cfg.retrieval
    out = [Variant(c, c, *((r.top_k, r.probe_token_budget, r.token_budget) if c == "memory"
                           else (None, None, None))) for c in cfg.conditions]
    out += [Variant(f"memory_k{k}", "memory", k, cfg.sweep_budget, cfg.sweep_budget, "top_k")
            for k in cfg.top_k_sweep]
    k = cfg.budget_top_k or (max(cfg.top_k_sweep) if cfg.top_k_sweep else r.top_k)
    out += [Variant(f"memory_b{b}", "memory", k, b, b, "budget") for b in cfg.budget_sweep]
    return out


class CountingRetriever:
    """The retriever, noting how many memories each user's latest retrieval returned (so a row
    can tell a memory the budget left out from one that was never retrieved)."""

    def __init__(self, inner: MemoryRetriever) -> None:
        self.inner = inner
        self.retrieved: dict[str, int] = {}

    def retrieve_many(self, user_ids: Sequence[str], queries: Sequence[str], *,
                      top_k: int | None = None) -> list[list[RetrievalHit]]:
        hits = self.inner.retrieve_many(user_ids, queries, top_k=top_k)
        for uid, h in zip(user_ids, hits):
            self.retrieved[uid] = len(h)
        return hits

    def remember(self, pairs: Sequence[TurnPair]) -> int:
        return self.inner.remember(pairs)


def make_router(variant: Variant, tiers: Sequence[Tier], router: RouterConfig,
                retrieval: RetrievalConfig, retriever: MemoryRetriever | None) -> Router:
    """The one Router, with memory (and the write-back) on only for the memory condition."""
    memory = variant.condition == "memory"
    if memory and retriever is None:
        raise ValueError(f"{variant.name} needs a retriever")
    cfg = replace(router, use_memory=memory, store_answers=memory)
    if memory:
        retrieval = replace(retrieval, top_k=variant.top_k, probe_token_budget=variant.probe_budget,
                            token_budget=variant.budget)
    return Router(list(tiers), cfg, retrieval, retriever if memory else None)


def user_of(variant: Variant, workflow: Workflow) -> str:
    """Each (variant, workflow) has its own memory: no variant sees another's steps."""
    return f"workflow:{variant.name}.{workflow.workflow_id}"


def run_variant(
    variant: Variant,
    router: Router,
    workflows: Sequence[Workflow],
    *,
    prod_params_b: Sequence[float],
    retrieved: dict[str, int] | None = None,
    handoff: bool = True,
    step_seconds: int = 60,
    on_step: Callable[[int], None] | None = None,
    on_result: Callable[[Row, RouteResult], None] | None = None,
) -> list[Row]:
    """Every workflow's steps in order, one batch per depth (the workflows are distinct users,
    so their steps batch like concurrent requests). ``retrieved``: the CountingRetriever's map;
    ``on_result(row, result)``: each step's row with the Router's result (tests check it)."""
    depth = min((len(w.steps) for w in workflows), default=0)
    previous: list[str | None] = [None] * len(workflows)
    history: list[list[Message]] = [[] for _ in workflows]
    rows: list[Row] = []
    for k in range(1, depth + 1):
        requests = [
            RouteRequest(user_id=user_of(variant, w), query=step_query(w, k, previous[i], handoff),
                         session_time=step_time(i, k, step_seconds), session_id=w.workflow_id,
                         turn_index=k,
                         history=tuple(history[i]) if variant.condition == "full_history" else ())
            for i, w in enumerate(workflows)
        ]
        for i, (req, result) in enumerate(zip(requests, router.route_many(requests))):
            # The router may retrieve more candidates than it reads (router.statement_slot):
            # top_k of them are what a budget could leave out.
            n = min((retrieved or {}).get(req.user_id, 0), router.retrieval.top_k) \
                if variant.condition == "memory" else 0
            row = step_row(variant, workflows[i], k, req, result, router, prod_params_b, n)
            rows.append(row)
            if on_result is not None:
                on_result(row, result)
            history[i] += [Message("user", req.query), Message("assistant", result.answer)]
            previous[i] = result.answer
        if on_step is not None:
            on_step(len(workflows))
    return rows


def step_row(variant: Variant, workflow: Workflow, k: int, req: RouteRequest, result: RouteResult,
             router: Router, prod_params_b: Sequence[float], retrieved: int) -> Row:
    """One step's attribution, summed over its calls; the memory block of the answering call
    is re-rendered and counted with that tier's tokenizer as a cross-check of ``injected``."""
    calls = result.calls
    tier = result.decision.answered_tier
    memories = result.decision.memories
    now = float(req.session_time or 0)
    layout = router.layout_for(tier, req.query)
    block = render_memory_block(memories, layout, now) if memories else ""
    answering = next((c for c in calls if c.accepted), calls[-1])
    base, injected, hist, out = (sum(getattr(c, f) for c in calls) for f in
                                 ("base_prompt_tokens", "injected_tokens", "history_tokens",
                                  "output_tokens"))
    return {
        "source": workflow.source, "workflow": workflow.workflow_id, "variant": variant.name,
        "condition": variant.condition, "sweep": variant.sweep, "top_k": variant.top_k,
        "probe_budget": variant.probe_budget, "budget": variant.budget, "depth": k,
        "session_time": req.session_time,
        "calls": len(calls), "answered_tier": tier, "escalated": result.decision.escalated,
        "base_tokens": base, "injected_tokens": injected, "history_tokens": hist,
        "output_tokens": out, "input_tokens": base + injected + hist,
        "total_tokens": base + injected + hist + out,
        "answer_injected_tokens": answering.injected_tokens,
        "memory_block_tokens": router.tiers[tier].backend.count_text_tokens(block) if block else 0,
        "memories_retrieved": retrieved, "memories_injected": len(memories),
        # the budget left out a memory retrieval found (the answering tier's budget)
        "budget_bound": retrieved > len(memories),
        "eff_cost": sum(c.eff_cost for c in calls),
        "eff_cost_prod": sum(eff_cost(c.input_tokens, c.output_tokens, prod_params_b[c.tier])
                             for c in calls),
        "query": req.query, "answer": result.answer,
    }
