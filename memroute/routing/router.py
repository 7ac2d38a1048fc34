"""The Router: one request end to end (retrieve -> inject -> probe -> accept or escalate -> remember).

With a facts provider (``Router(..., facts=fact_store)``) the user's active facts are injected
before the retrieved turn-pairs, within the same memory budget (:mod:`memroute.routing.facts_block`).

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

Whether a tier's reply is accepted is :mod:`memroute.routing.judge`'s to say.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

from memroute.config import RetrievalConfig, RouterConfig
from memroute.errors import InvalidRequest
from memroute.memory.facts.types import Fact
from memroute.retrieval.followup import retrieval_query
from memroute.routing.calibrator import Calibrator
from memroute.routing.confidence import CONFIDENCE
from memroute.routing.decoding import Decoding, count_prompt, decoding_for, generate_grouped
from memroute.routing.echo import read_echo
from memroute.routing.facts_block import FactsSource, facts_reader, read_facts, select_facts
from memroute.routing.grounding import client_texts
from memroute.routing.isolation import Steps, keep
from memroute.routing.judge import Judge, decision, fallback
from memroute.routing.live import LiveHooks, live_result, streams
from memroute.routing.members import Pending, Prompt
from memroute.routing.request import RouteRequest, Tier, turn_pair_of
from memroute.routing.router_settings import calibrator_for, check_router_settings
from memroute.routing.prompt import (MemoryLayout, build_messages, history_within,
                                     memory_layout, select_within_budget, system_prompt_for)
from memroute.routing.repeats import trust_by
from memroute.routing.tier_failures import degrade_unreadable_memory, skip_failed_tier
from memroute.routing.tier_memories import candidates_k, memories_for
from memroute.text.clip import clip_utf8
from memroute.text.turn_kind import asks_something
from memroute.types import ModelReply, RetrievalHit, RouteResult, TurnPair, validate_user_id

MAX_QUERY_BYTES = 8192  # what retrieval searches with (the store's VARCHAR and query limits)


class MemoryRetriever(Protocol):
    def retrieve_many(
        self, user_ids: Sequence[str], queries: Sequence[str], *, top_k: int | None = None
    ) -> list[list[RetrievalHit]]: ...

    def remember(self, pairs: Sequence[TurnPair]) -> int: ...


def _identity(i: int) -> int:
    return i


def _index(p: Pending) -> int:
    return p.index


def _member_index(member: tuple[Pending, Prompt]) -> int:
    return member[0].index


class Router:
    def __init__(
        self,
        tiers: Sequence[Tier],
        cfg: RouterConfig,
        retrieval: RetrievalConfig,
        retriever: MemoryRetriever | None = None,
        facts: FactsSource | None = None,
        calibrator: Calibrator | None = None,
    ) -> None:
        """``facts``: where the user's current facts come from (a fact store, or a callable
        user_id -> facts); None: no facts block, only the retrieved turn-pairs.
        ``calibrator``: P(correct) from an answer's features decides acceptance (None: the
        one ``cfg.calibrator`` names is loaded, if any; :mod:`memroute.routing.calibrator`)."""
        if not tiers:
            raise InvalidRequest("the cascade needs at least one model", field="cascade")
        if cfg.use_memory and retriever is None:
            raise InvalidRequest("router.use_memory is on but no retriever was given", field="router.use_memory")
        check_router_settings(cfg, retrieval)
        self.calibrator, self.threshold = calibrator_for(cfg, calibrator)
        # Routing off = a single model answers everything.
        self.tiers = list(tiers) if cfg.use_routing else [tiers[0]]
        self.cfg = cfg
        self.retrieval = retrieval
        self.retriever = retriever
        self.facts = None if facts is None else facts_reader(facts)
        self.layout = memory_layout(cfg)
        # Per tier, the models whose stored answers are no evidence for its own answer: itself
        # and the cheaper tiers (memroute.routing.grounding).
        ids = [t.backend.model_id for t in self.tiers]
        untrusted = [frozenset(ids[: t + 1]) for t in range(len(ids))]
        self.untrusted = untrusted
        self._judge = Judge(cfg, CONFIDENCE.get(cfg.confidence, field="router.confidence"),
                            self.calibrator, self.threshold, untrusted)
        self._trust = trust_by(ids)  # which of a repeated question's copies to keep

    # -- public API -------------------------------------------------------------------------

    def layout_for(self, t: int, query: str | None) -> MemoryLayout:
        """The memory block's layout for tier ``t`` answering ``query``: dates resolved for the
        question, and above the first tier the cheaper tiers' replies left out unless
        ``router.cheaper_replies``."""
        layout = self.layout.for_question(query)
        if t > 0 and not self.cfg.cheaper_replies:
            layout = layout.for_tier(self.untrusted[t - 1])
        return layout

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
        degraded = degrade_unreadable_memory(live, hits) if steps.isolate else set()
        live, hits = keep(live, hits, out, _identity)
        facts = {} if self.facts is None or not self.cfg.use_memory else read_facts(
            self.facts, [(i, requests[i].user_id, _now(requests[i])) for i in live
                         if requests[i].use_memory], isolate=steps.isolate, degraded=degraded)
        pending = [Pending(i, h, memory_degraded=i in degraded, pinned=requests[i].tier is not None,
                           query=requests[i].query)
                   for i, h in zip(live, hits)]
        for t, tier in enumerate(self.tiers):
            if not pending:
                break
            last = t == len(self.tiers) - 1
            # A pinned member is answered by its tier alone, whatever its confidence.
            here = [p for p in pending if requests[p.index].tier in (None, t)]
            later = [p for p in pending if requests[p.index].tier not in (None, t)]
            pending = later + self._run_tier(t, tier, last, requests, here, out, steps, facts)
        assert all(r is not None for r in out)
        # A live stream journals its own turn-pair once its answer is complete.
        done = {i: r for i, r in enumerate(out) if isinstance(r, RouteResult) and r.stream is None}
        if self.cfg.store_answers and self.retriever is not None:
            # A tool-call turn is not an answer yet: the loop's last step stores the question
            # with the final answer.
            answered = [i for i in done if requests[i].store and not done[i].tool_calls]
            pairs = steps.each(lambda i: turn_pair_of(requests[i], done[i]), answered)
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
        # A follow-up is searched with what it refers to (memroute.retrieval.followup). A
        # question longer than retrieval takes is searched by its start (the embedder reads only
        # its first 256 tokens anyway); the model still gets all of it.
        queries = [retrieval_query(requests[k].query, requests[k].history,
                                   when=self.retrieval.followup) for k in wanted]
        hits = self.retriever.retrieve_many(
            [requests[k].user_id for k in wanted], [clip_utf8(q, MAX_QUERY_BYTES) for q in queries],
            top_k=candidates_k(self.retrieval.top_k, self.cfg))
        for k, h in zip(wanted, hits, strict=True):
            out[k] = h
        return out

    def _remember(self, pairs: Sequence[TurnPair]) -> list[None]:
        assert self.retriever is not None
        self.retriever.remember(pairs)
        return [None] * len(pairs)

    def _budget(self, tier_index: int) -> int:
        """The first (cheapest) tier reads probe_token_budget of memory whether or not a tier
        follows it, so the cascade's probe sees exactly what that model sees alone (the
        memory-only condition); escalations read token_budget."""
        return self.retrieval.probe_token_budget if tier_index == 0 else self.retrieval.token_budget

    def _decoding(self, t: int, req: RouteRequest) -> Decoding:
        probing = t < len(self.tiers) - 1 and req.tier is None
        return decoding_for(
            max_tokens=req.max_tokens, temperature=req.temperature, stop=req.stop,
            options=req.options, default_max_tokens=self.cfg.max_tokens, probing=probing,
            probe_decoding=self.cfg.probe_decoding,
        )

    def _prompt(
        self, t: int, tier: Tier, req: RouteRequest, hits: list[RetrievalHit],
        facts: list[Fact] | None = None,
    ) -> Prompt:
        backend = tier.backend
        decoding = self._decoding(t, req)
        system = system_prompt_for(self.cfg, req.query, req.system)
        budget = self._budget(t)
        # The facts first, with this tier's tokenizer; the turn-pairs fill what they leave.
        _, block = select_facts(facts or (), budget, backend.count_text_tokens, _now(req))
        if block:
            budget -= backend.count_text_tokens(block) + 1  # +1: the blocks' separator
        hits = memories_for(t, hits, req.query, self.cfg, top_k=self.retrieval.top_k,
                            trust=self._trust)
        now, layout = _now(req), self.layout_for(t, req.query)
        chosen = select_within_budget(hits, budget, backend.count_text_tokens, layout, now)
        messages = build_messages(system, req.query, chosen, tail=req.tail, facts=block,
                                  layout=layout, now=now)
        evidence = self._evidence(req, block)
        # Exact attribution: the same prompt without the facts and memory blocks (and without
        # the history), so the facts block counts as injected memory;
        # the current turn (question, tool calls and results) and the offered tools are base.
        base = count_prompt(backend, build_messages(system, req.query, tail=req.tail), req.options)
        if not req.history:
            return Prompt(messages, chosen, base, decoding, evidence=evidence)
        # The client's turns that fit what the tier's context leaves; oldest dropped first.
        history = list(req.history) if tier.context_tokens is None else history_within(
            req.history, tier.context_tokens - decoding.max_tokens,
            lambda h: build_messages(system, req.query, chosen, h, req.tail, block, layout, now),
            lambda m: count_prompt(backend, m, req.options), backend.count_text_tokens)
        if not history:
            return Prompt(messages, chosen, base, decoding, evidence=evidence)
        with_history = count_prompt(
            backend, build_messages(system, req.query, (), history, req.tail), req.options)
        return Prompt(build_messages(system, req.query, chosen, history, req.tail, facts=block,
                                     layout=layout, now=now),
                      chosen, base, decoding, history_tokens=with_history - base,
                      evidence=evidence)

    def _evidence(self, req: RouteRequest, facts_block: str) -> list[str] | None:
        """Besides the memories, what a lower tier's answer to ``req`` may be read from; None
        when its answer is not checked (grounding off, no memory, a turn that asks nothing)."""
        if (self.cfg.grounding == "off" or not self.cfg.use_memory or not req.use_memory
                or not asks_something(req.query)):
            return None
        return [facts_block, *client_texts(req.history, req.tail)]

    def _run_tier(
        self,
        t: int,
        tier: Tier,
        last: bool,
        requests: Sequence[RouteRequest],
        pending: list[Pending],
        out: list[RouteResult | Exception | None],
        steps: Steps,
        facts: dict[int, list[Fact]],
    ) -> list[Pending]:
        backend = tier.backend
        built = steps.each(
            lambda p: self._prompt(t, tier, requests[p.index], p.hits, facts.get(p.index)), pending)
        pending, prompts = keep(pending, built, out, _index)
        members = []  # (pending, its prompt) per member; a live stream's member leaves here
        for p, pr in zip(pending, prompts):
            if streams(t, last, requests[p.index]):
                out[p.index] = live_result(t, tier, p, pr, self._live_hooks(
                    t, tier, p, pr, requests[p.index]))
            else:
                members.append((p, pr))
        replies = steps.batch(
            lambda ms: generate_grouped(backend, [pr.messages for _, pr in ms],
                                        [pr.decoding for _, pr in ms]),
            members,
        )
        still: list[Pending] = []
        if steps.isolate:
            members, replies = skip_failed_tier(t, tier.name, backend.model_id, last, members,
                                                replies, out, still, fallback)
        members, replies = keep(members, replies, out, _member_index)

        def judge(member: tuple[Pending, Prompt], reply: ModelReply) -> RouteResult | None:
            req = requests[member[0].index]
            if self.cfg.read_echoes:  # here, so that a defect in it fails one member only
                reply = read_echo(reply, req.query)
            return self._judge(t, tier, last or req.tier == t, req.tau, *member, reply)

        judged = steps.each(lambda mr: judge(*mr), list(zip(members, replies)))
        members, results = keep(members, judged, out, _member_index)
        for (p, _), result in zip(members, results):
            if result is None:
                still.append(p)
            else:
                out[p.index] = result
        return still

    # -- streaming: memroute.routing.live -----------------------------------------------------

    def _live_hooks(self, t: int, tier: Tier, p: Pending, prompt: Prompt,
                    req: RouteRequest) -> LiveHooks:
        store = self.cfg.store_answers and self.retriever is not None and req.store
        return LiveHooks(
            decision=decision(t, tier.backend.model_id, p, prompt),
            judge=lambda reply: self._judge(t, tier, True, None, p, prompt, reply),
            fallback=lambda: fallback(p),
            remember=(lambda res: self._remember([turn_pair_of(req, res)])) if store else None,
        )


def _now(req: RouteRequest) -> float:
    return float(req.session_time) if req.session_time is not None else time.time()

