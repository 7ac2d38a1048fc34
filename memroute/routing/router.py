"""The Router: one request end to end (retrieve -> inject -> probe -> accept or escalate -> remember).

The same class answers in-process (benchmarks, replay) and behind Ray Serve, so what is
measured is what is served. Requests are processed tier by tier in batches
(:meth:`Router.route_many`); :meth:`Router.route` is the batch of one. :meth:`Router.route_each`
is the same flow with fault isolation (:mod:`memroute.routing.isolation`): a member whose
validation, retrieval, tier call or memory write fails gets its own exception, the others their
answers (what the server needs: concurrent requests of different tenants share a batch).

A tier that fails there (down, timed out, crashing; not the request's own 4xx) is skipped: the
member escalates to the next tier, and ``RouteDecision.tiers_skipped`` says so. When the last tier
fails, a lower tier's rejected answer is returned rather than nothing (flagged the same way); with
no answer from any tier the member gets :class:`~memroute.errors.NoTierAnswered` (503).
"""

from __future__ import annotations

import logging

import time
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from memroute.accounting.cost import Pricing
from memroute.config import RetrievalConfig, RouterConfig
from memroute.errors import BackendUnavailable, InvalidRequest, MemrouteError, NoTierAnswered
from memroute.llm.base import Backend
from memroute.routing.isolation import Steps, keep
from memroute.routing.prompt import build_messages, select_within_budget, trim_history
from memroute.text.clip import clip_utf8
from memroute.routing.confidence import CONFIDENCE
from memroute.types import (
    CallRecord,
    Message,
    ModelReply,
    RetrievalHit,
    RouteDecision,
    RouteResult,
    TurnPair,
    stable_id,
    validate_user_id,
)

log = logging.getLogger(__name__)

MAX_QUERY_BYTES = 8192  # what retrieval searches with (the store's VARCHAR and query limits)


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
    context_tokens: int | None = None  # the model's context window; None: history is not trimmed


@dataclass
class RouteRequest:
    user_id: str
    query: str
    session_time: int | None = None  # epoch seconds; default: now
    session_id: str | None = None
    turn_index: int | None = None
    system: str | None = None  # the client's system prompt; None: the router's own
    history: tuple[Message, ...] = ()  # the client's earlier turns, oldest first
    # Per-request controls (memroute.api.controls): remember this turn, read memory, pin a
    # tier (None: the cascade), this request's tau (None: the router's).
    store: bool = True
    use_memory: bool = True
    tier: int | None = None
    tau: float | None = None


@dataclass
class _Pending:
    index: int
    hits: list[RetrievalHit]
    confidences: list[float] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    memory_degraded: bool = False
    skipped: list[int] = field(default_factory=list)  # tiers that failed for this member
    tier_errors: list[str] = field(default_factory=list)  # each failed tier's error, for logs
    tier_reasons: list[str] = field(default_factory=list)  # "tier 1 (model) down", for clients
    rejected: tuple[int, str, _Prompt, ModelReply] | None = None  # latest below-tau answer
    pinned: bool = False  # the request named its tier: answered there, not escalated


@dataclass
class _Prompt:
    messages: list[Message]
    memories: list[RetrievalHit]  # the hits that fit the tier's budget
    base_tokens: int  # the prompt's tokens without the memory block and the history
    history_tokens: int = 0  # what the client's earlier turns add


def _identity(i: int) -> int:
    return i


def _index(p: _Pending) -> int:
    return p.index


def _member_index(member: tuple[_Pending, _Prompt]) -> int:
    return member[0].index


def _own_fault(exc: Exception) -> bool:
    """A request's own bad input (a 4xx), as opposed to a tier or store that failed under it."""
    return isinstance(exc, MemrouteError) and exc.status < 500


def _describe(exc: Exception) -> str:
    return exc.message if isinstance(exc, MemrouteError) else f"{type(exc).__name__}: {exc}"


def _degrade_unreadable_memory(members: Sequence[int], hits: list) -> set[int]:
    """A member whose memory could not be read (the store or the embedder failing: not its own
    bad input, a 4xx) is answered without memories and flagged, rather than failed: the models
    can still answer, and its new turn-pair still goes to the journal."""
    degraded = set()
    for k, (i, h) in enumerate(zip(members, hits)):
        if isinstance(h, Exception) and not _own_fault(h):
            log.warning("memory unreadable for a request (%s: %s); answering without it",
                        type(h).__name__, h)
            hits[k] = []
            degraded.add(i)
    return degraded


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
        """Route a batch; any failure raises (before the memory write: nothing is remembered)."""
        results = self._route(requests, Steps(isolate=False))
        assert all(isinstance(r, RouteResult) for r in results)
        return results  # type: ignore[return-value]

    def route_each(self, requests: Sequence[RouteRequest]) -> list[RouteResult | Exception]:
        """Route a batch; one result per request: its answer, or the exception that failed it
        alone. Batched calls as in :meth:`route_many` while they succeed; a batched step that
        raises is retried in halves to find the failing member(s) (see ``routing.isolation``).
        A member whose memory write fails is failed too: its answer was not remembered."""
        return self._route(requests, Steps(isolate=True))

    # -- steps ---------------------------------------------------------------------------------

    def _route(
        self, requests: Sequence[RouteRequest], steps: Steps
    ) -> list[RouteResult | Exception]:
        out: list[RouteResult | Exception | None] = [None] * len(requests)
        checked = steps.each(lambda i: self._validate(i, requests[i]), range(len(requests)))
        live, _ = keep(range(len(requests)), checked, out, _identity)
        hits = steps.batch(lambda ix: self._retrieve([requests[i] for i in ix]), live)
        degraded = _degrade_unreadable_memory(live, hits) if steps.isolate else set()
        live, hits = keep(live, hits, out, _identity)
        pending = [_Pending(i, h, memory_degraded=i in degraded, pinned=requests[i].tier is not None)
                   for i, h in zip(live, hits)]
        for t, tier in enumerate(self.tiers):
            if not pending:
                break
            last = t == len(self.tiers) - 1
            # A pinned member is answered by its tier alone, whatever its confidence.
            here = [p for p in pending if requests[p.index].tier in (None, t)]
            later = [p for p in pending if requests[p.index].tier not in (None, t)]
            pending = later + self._run_tier(t, tier, last, requests, here, out, steps)
        assert all(r is not None for r in out)
        done = {i: r for i, r in enumerate(out) if isinstance(r, RouteResult)}
        if self.cfg.store_answers and self.retriever is not None:
            answered = [i for i in done if requests[i].store]
            pairs = steps.each(lambda i: self._turn_pair(requests[i], done[i]), answered)
            answered, pairs = keep(answered, pairs, out, _identity)
            by_index = dict(zip(answered, pairs))  # built once: a retried write has the same ids
            written = steps.batch(lambda ix: self._remember([by_index[i] for i in ix]), answered)
            keep(answered, written, out, _identity)
        return out  # type: ignore[return-value]

    def _validate(self, i: int, req: RouteRequest) -> None:
        validate_user_id(req.user_id)
        if not isinstance(req.query, str) or not req.query.strip():
            raise InvalidRequest(f"request {i}: the query is empty", field="query")
        if req.tier is not None and not 0 <= req.tier < len(self.tiers):
            raise InvalidRequest(f"request {i}: tier {req.tier} is not one of 0..{len(self.tiers) - 1}",
                                 field="tier")

    def _retrieve(self, requests: Sequence[RouteRequest]) -> list[list[RetrievalHit]]:
        out: list[list[RetrievalHit]] = [[] for _ in requests]
        if not self.cfg.use_memory or self.retriever is None:
            return out
        wanted = [k for k, r in enumerate(requests) if r.use_memory]
        if not wanted:
            return out
        # A question longer than retrieval takes is searched by its start (the embedder reads
        # only its first 256 tokens anyway); the model still gets all of it.
        hits = self.retriever.retrieve_many(
            [requests[k].user_id for k in wanted],
            [clip_utf8(requests[k].query, MAX_QUERY_BYTES) for k in wanted],
            top_k=self.retrieval.top_k,
        )
        for k, h in zip(wanted, hits, strict=True):
            out[k] = h
        return out

    def _remember(self, pairs: Sequence[TurnPair]) -> list[None]:
        assert self.retriever is not None
        self.retriever.remember(pairs)
        return [None] * len(pairs)

    def _budget(self, tier_index: int) -> int:
        probing = tier_index == 0 and len(self.tiers) > 1
        return self.retrieval.probe_token_budget if probing else self.retrieval.token_budget

    def _prompt(self, t: int, tier: Tier, req: RouteRequest, hits: list[RetrievalHit]) -> _Prompt:
        backend = tier.backend
        system = self.cfg.system_prompt if req.system is None else req.system
        chosen = select_within_budget(hits, self._budget(t), backend.count_text_tokens)
        messages = build_messages(system, req.query, chosen)
        # Exact attribution: the same prompt without the memory block (and without the history).
        base = backend.count_tokens(build_messages(system, req.query))
        if not req.history:
            return _Prompt(messages, chosen, base)
        history = self._history(tier, req, messages, chosen, system)
        if not history:
            return _Prompt(messages, chosen, base)
        with_history = backend.count_tokens(build_messages(system, req.query, (), history))
        return _Prompt(build_messages(system, req.query, chosen, history), chosen, base,
                       history_tokens=with_history - base)

    def _history(
        self, tier: Tier, req: RouteRequest, messages: list[Message],
        chosen: list[RetrievalHit], system: str,
    ) -> list[Message]:
        """The client's turns that fit what the tier's context leaves after the system prompt,
        the memories, the question and the answer; oldest dropped first."""
        backend = tier.backend
        if tier.context_tokens is None:
            return list(req.history)
        room = tier.context_tokens - self.cfg.max_tokens
        history = trim_history(req.history, room - backend.count_tokens(messages),
                               backend.count_text_tokens)
        while history and backend.count_tokens(
                build_messages(system, req.query, chosen, history)) > room:
            history = history[1:]  # the estimate was short: drop the oldest until it fits
        return history

    def _run_tier(
        self,
        t: int,
        tier: Tier,
        last: bool,
        requests: Sequence[RouteRequest],
        pending: list[_Pending],
        out: list[RouteResult | Exception | None],
        steps: Steps,
    ) -> list[_Pending]:
        backend = tier.backend
        built = steps.each(lambda p: self._prompt(t, tier, requests[p.index], p.hits), pending)
        pending, prompts = keep(pending, built, out, _index)
        members = list(zip(pending, prompts))  # (pending, its prompt) per member
        replies = steps.batch(
            lambda ms: backend.generate_many(
                [pr.messages for _, pr in ms], max_tokens=self.cfg.max_tokens
            ),
            members,
        )
        still: list[_Pending] = []
        if steps.isolate:
            members, replies = self._skip_failed_tier(t, tier, last, members, replies, out, still)
        members, replies = keep(members, replies, out, _member_index)
        judged = steps.each(
            lambda mr: self._judge(t, tier, last or requests[mr[0][0].index].tier == t,
                                   requests[mr[0][0].index].tau, *mr[0], mr[1]),
            list(zip(members, replies)),
        )
        members, results = keep(members, judged, out, _member_index)
        for (p, _), result in zip(members, results):
            if result is None:
                still.append(p)
            else:
                out[p.index] = result
        return still

    def _skip_failed_tier(
        self,
        t: int,
        tier: Tier,
        last: bool,
        members: list[tuple[_Pending, _Prompt]],
        replies: list[ModelReply | Exception],
        out: list[RouteResult | Exception | None],
        still: list[_Pending],
    ) -> tuple[list[tuple[_Pending, _Prompt]], list[ModelReply | Exception]]:
        """Members whose call to tier ``t`` failed through no fault of their own go on to the next
        tier (or, at the last, get a fallback answer or NoTierAnswered); the rest are returned."""
        kept: list[tuple[_Pending, _Prompt]] = []
        kept_replies: list[ModelReply | Exception] = []
        failed: list[Exception] = []
        for member, reply in zip(members, replies, strict=True):
            if not isinstance(reply, Exception) or _own_fault(reply):
                kept.append(member)
                kept_replies.append(reply)
                continue
            failed.append(reply)
            p = member[0]
            p.skipped.append(t)
            p.tier_errors.append(f"tier {t} ({tier.backend.model_id}): {_describe(reply)}")
            down = "down" if isinstance(reply, BackendUnavailable) else "failed"
            p.tier_reasons.append(f"tier {t} ({tier.backend.model_id}) {down}")
            if not last:
                still.append(p)
            elif p.rejected is not None:
                out[p.index] = self._fallback(p)
            else:
                out[p.index] = NoTierAnswered(
                    "no model tier answered: " + "; ".join(p.tier_errors),
                    public_message="no model tier answered (" + ", ".join(p.tier_reasons)
                    + "); the request may be retried",
                    field="model",
                )
        if failed:
            log.warning("tier %d (%s) failed for %d request(s); %s: %s", t, tier.name, len(failed),
                        "answering with a lower tier's answer" if last else "escalating past it",
                        _describe(failed[0]))
        return kept, kept_replies

    def _fallback(self, p: _Pending) -> RouteResult:
        """The best answer there is when the tiers above failed: the latest rejected one."""
        assert p.rejected is not None
        t, model_id, prompt, reply = p.rejected
        for call in p.calls:
            call.accepted = call.tier == t
        return RouteResult(reply.text.strip(), self._decision(t, model_id, p, prompt), p.calls)

    def _decision(self, t: int, model_id: str, p: _Pending, prompt: _Prompt) -> RouteDecision:
        return RouteDecision(
            answered_tier=t,
            answered_model=model_id,
            confidences=list(p.confidences),
            escalated=t > 0 and not p.pinned,
            memories=prompt.memories,
            memory_degraded=p.memory_degraded,
            tiers_skipped=list(p.skipped),
        )

    def _judge(
        self, t: int, tier: Tier, last: bool, tau: float | None, p: _Pending, prompt: _Prompt,
        reply: ModelReply,
    ) -> RouteResult | None:
        """Record the call on ``p``; its result when accepted, None to escalate."""
        backend = tier.backend
        c = self.confidence_fn(reply, self.cfg.l_min)
        accepted = last or c >= (self.cfg.tau if tau is None else tau)
        p.confidences.append(c)
        p.calls.append(
            CallRecord(
                tier=t,
                model_id=backend.model_id,
                base_prompt_tokens=prompt.base_tokens,
                injected_tokens=reply.prompt_tokens - prompt.base_tokens - prompt.history_tokens,
                history_tokens=prompt.history_tokens,
                output_tokens=reply.completion_tokens,
                eff_cost=tier.pricing.eff_cost(reply.prompt_tokens, reply.completion_tokens),
                latency_s=reply.latency_s,
                confidence=c,
                accepted=accepted,
                params_b=tier.pricing.params_b,
            )
        )
        if not accepted:
            p.rejected = (t, backend.model_id, prompt, reply)
            return None
        return RouteResult(reply.text.strip(), self._decision(t, backend.model_id, p, prompt), p.calls)

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
