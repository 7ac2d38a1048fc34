"""The Router: one request end to end (retrieve -> inject -> probe -> accept or escalate -> remember).

The same class answers in-process (benchmarks, replay) and behind Ray Serve, so what is
measured is what is served. Requests are processed tier by tier in batches
(:meth:`Router.route_many`); :meth:`Router.route` is the batch of one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from memroute.accounting.cost import Pricing
from memroute.config import RetrievalConfig, RouterConfig
from memroute.errors import InvalidRequest
from memroute.llm.base import Backend
from memroute.routing.prompt import build_messages, select_within_budget
from memroute.routing.confidence import CONFIDENCE
from memroute.types import (
    CallRecord,
    Message,
    RetrievalHit,
    RouteDecision,
    RouteResult,
    TurnPair,
    stable_id,
    validate_user_id,
)


class MemoryRetriever(Protocol):
    def retrieve_many(
        self, user_ids: Sequence[str], queries: Sequence[str], *, top_k: int | None = None
    ) -> list[list[RetrievalHit]]: ...

    def remember(self, pairs: Sequence[TurnPair]) -> int: ...


@dataclass
class Tier:
    """One rung of the cascade: a back end and how its tokens are priced."""

    name: str
    backend: Backend
    pricing: Pricing


@dataclass
class RouteRequest:
    user_id: str
    query: str
    session_time: int | None = None  # epoch seconds; default: now
    session_id: str | None = None
    turn_index: int | None = None


@dataclass
class _Pending:
    index: int
    hits: list[RetrievalHit]
    confidences: list[float] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)


class Router:
    def __init__(
        self,
        tiers: Sequence[Tier],
        cfg: RouterConfig,
        retrieval: RetrievalConfig,
        retriever: MemoryRetriever | None = None,
    ) -> None:
        if not tiers:
            raise InvalidRequest("the cascade needs at least one model", field="cascade")
        if cfg.use_memory and retriever is None:
            raise InvalidRequest("router.use_memory is on but no retriever was given", field="router.use_memory")
        if not 0.0 <= cfg.tau <= 1.0:
            raise InvalidRequest(f"router.tau must be in [0, 1], got {cfg.tau}", field="router.tau")
        self.confidence_fn = CONFIDENCE.get(cfg.confidence, field="router.confidence")
        # Routing off = a single model answers everything.
        self.tiers = list(tiers) if cfg.use_routing else [tiers[0]]
        self.cfg = cfg
        self.retrieval = retrieval
        self.retriever = retriever

    # -- public API -------------------------------------------------------------------------

    def route(self, user_id: str, query: str, **kw: object) -> RouteResult:
        return self.route_many([RouteRequest(user_id, query, **kw)])[0]  # type: ignore[arg-type]

    def route_many(self, requests: Sequence[RouteRequest]) -> list[RouteResult]:
        for i, req in enumerate(requests):
            validate_user_id(req.user_id)
            if not isinstance(req.query, str) or not req.query.strip():
                raise InvalidRequest(f"request {i}: the query is empty", field="query")
        hits = self._retrieve(requests)
        pending = [_Pending(i, h) for i, h in enumerate(hits)]
        results: list[RouteResult | None] = [None] * len(requests)
        for t, tier in enumerate(self.tiers):
            if not pending:
                break
            last = t == len(self.tiers) - 1
            pending = self._run_tier(t, tier, last, requests, pending, results)
        done = [r for r in results if r is not None]
        assert len(done) == len(requests)
        if self.cfg.store_answers and self.retriever is not None:
            self.retriever.remember([self._turn_pair(q, r) for q, r in zip(requests, done)])
        return done

    # -- steps ---------------------------------------------------------------------------------

    def _retrieve(self, requests: Sequence[RouteRequest]) -> list[list[RetrievalHit]]:
        if not self.cfg.use_memory or self.retriever is None:
            return [[] for _ in requests]
        return self.retriever.retrieve_many(
            [r.user_id for r in requests], [r.query for r in requests], top_k=self.retrieval.top_k
        )

    def _budget(self, tier_index: int) -> int:
        probing = tier_index == 0 and len(self.tiers) > 1
        return self.retrieval.probe_token_budget if probing else self.retrieval.token_budget

    def _run_tier(
        self,
        t: int,
        tier: Tier,
        last: bool,
        requests: Sequence[RouteRequest],
        pending: list[_Pending],
        results: list[RouteResult | None],
    ) -> list[_Pending]:
        backend = tier.backend
        prompts: list[list[Message]] = []
        used: list[list[RetrievalHit]] = []
        base_tokens: list[int] = []
        for p in pending:
            query = requests[p.index].query
            chosen = select_within_budget(p.hits, self._budget(t), backend.count_text_tokens)
            used.append(chosen)
            prompts.append(build_messages(self.cfg.system_prompt, query, chosen))
            # Exact attribution: the same prompt without the memory block.
            base_tokens.append(backend.count_tokens(build_messages(self.cfg.system_prompt, query)))
        replies = backend.generate_many(prompts, max_tokens=self.cfg.max_tokens)
        still: list[_Pending] = []
        for p, reply, chosen, base in zip(pending, replies, used, base_tokens):
            c = self.confidence_fn(reply, self.cfg.l_min)
            accepted = last or c >= self.cfg.tau
            p.confidences.append(c)
            p.calls.append(
                CallRecord(
                    tier=t,
                    model_id=backend.model_id,
                    base_prompt_tokens=base,
                    injected_tokens=reply.prompt_tokens - base,
                    output_tokens=reply.completion_tokens,
                    eff_cost=tier.pricing.eff_cost(reply.prompt_tokens, reply.completion_tokens),
                    latency_s=reply.latency_s,
                    confidence=c,
                    accepted=accepted,
                    params_b=tier.pricing.params_b,
                )
            )
            if accepted:
                decision = RouteDecision(
                    answered_tier=t,
                    answered_model=backend.model_id,
                    confidences=list(p.confidences),
                    escalated=t > 0,
                    memories=chosen,
                )
                results[p.index] = RouteResult(reply.text.strip(), decision, p.calls)
            else:
                still.append(p)
        return still

    def _turn_pair(self, req: RouteRequest, res: RouteResult) -> TurnPair:
        now = time.time()
        session_time = req.session_time if req.session_time is not None else int(now)
        session_id = req.session_id or "live"
        # Without a caller-given turn index, derive one that is unique per answered request.
        turn = req.turn_index if req.turn_index is not None else stable_id(req.query, time.time_ns())
        return TurnPair(
            user_id=req.user_id,
            session_id=session_id,
            turn_index=turn,
            user_text=req.query,
            assistant_text=res.answer,
            session_time=session_time,
            source_model=res.decision.answered_model,
            created_at=now,
        )
