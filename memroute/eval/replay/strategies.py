"""What a user could run on the same traffic: memroute and the baselines it must beat.

Each strategy answers a wave of requests (distinct users, in trace order) and returns one
:class:`~memroute.eval.replay.outcome.Outcome` per request. The routed ones all run the one
:class:`~memroute.routing.router.Router` class, with memory and routing switched as named:

=================  ==========================================================================
memroute           memory + confidence routing; every answered turn is stored (cross-model)
memroute_facts     memroute with the fact layer: facts extracted from the stored turns by the
                   first tier (the served lane, waited for per wave), current values injected
memroute_summary   memroute with a compacting summary tree instead of the turn-pairs (sessions
                   summarized by ``summary.tier``, merged upward under ``summary.budget_tokens``;
                   :mod:`memroute.memory.summary`). Each request pays for the compaction its
                   stored turn caused; its ``memory_ids`` are the turn-pairs under what it was
                   shown (a summary stands for every pair it covers), so evidence hits compare.
cascade_no_memory  confidence routing alone, no memory
always_small       the first tier, no memory
always_large       the last tier, no memory
semantic_cache     GPTCache-style: a past query of the same user within ``cache_threshold``
                   cosine returns that answer as is; otherwise the last tier answers and is
                   cached. Shown honestly on updated facts (it returns the stale answer) and on
                   paraphrases (they may miss the cache).
=================  ==========================================================================
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from memroute.config.schema import RetrievalConfig, RouterConfig
from memroute.datasets.records import TraceRequest
from memroute.eval.replay.outcome import (
    CACHE_TIER,
    Outcome,
    TierPrice,
    add_compaction,
    from_route_result,
)
from memroute.eval.replay.scoring import best_f1
from memroute.namespace import namespace
from memroute.registry import Registry
from memroute.routing.confidence_features import features as answer_features
from memroute.memory.summary import SummaryMemory
from memroute.routing.facts_block import FactsSource
from memroute.routing.router import MemoryRetriever, Router, RouteRequest, Tier
from memroute.text.answers import holds_value
from memroute.types import Message

Wave = Sequence[tuple[int, TraceRequest]]  # (row number in the trace, request)


class Strategy(Protocol):
    name: str
    stores_memory: bool  # its answers become memories (evidence hits are measured only then)
    # optional ``row_fields``: a dict merged into each of its rows (memroute_facts: which tier
    # extracted its facts, extraction_tier / extraction_model / extraction_keys)

    def answer_many(self, wave: Wave) -> list[Outcome]: ...


def route_request(seq: int, req: TraceRequest, history: Sequence[Message] = ()) -> RouteRequest:
    """The Router's request for trace row ``seq``: the user's namespace, the trace's session and
    time, and the row number as turn index (so a stored answer's id is known in advance)."""
    return RouteRequest(
        user_id=namespace(req.tenant, req.user_id), query=req.query, session_time=int(req.ts),
        session_id=req.session_id, turn_index=seq, history=tuple(history),
    )


@dataclass
class StrategyParts:
    """What the strategies are built from (made once per strategy by the replay run)."""

    tiers: list[Tier]
    prices: list[TierPrice]
    router: RouterConfig
    retrieval: RetrievalConfig
    retriever: MemoryRetriever | None  # a fresh store per strategy: none shares memory
    encoder: Callable[[Sequence[str]], np.ndarray] | None = None  # semantic cache
    cache_threshold: float = 0.9
    facts: FactsSource | None = None  # memroute_facts: the fact layer's store (replay/facts.py)
    session_history: bool = False  # ReplayConfig.session_history
    summary: SummaryMemory | None = None  # memroute_summary: the users' summary trees
    summary_file: Path | None = None  # where they are saved after every wave (a resumed run)


class RoutedStrategy:
    def __init__(self, name: str, parts: StrategyParts, tier_slots: Sequence[int], *,
                 memory: bool, routing: bool, facts: bool = False, summary: bool = False) -> None:
        if facts and parts.facts is None:
            raise ValueError(f"{name} needs the fact layer (StrategyParts.facts)")
        if summary and parts.summary is None:
            raise ValueError(f"{name} needs the summary trees (StrategyParts.summary)")
        self.summary = parts.summary if summary else None
        self.summary_file = parts.summary_file
        self.name = name
        self.stores_memory = memory
        self.slots = list(tier_slots)
        cfg = replace(parts.router, use_memory=memory, use_routing=routing, store_answers=memory)
        self.router = Router([parts.tiers[i] for i in self.slots], cfg, parts.retrieval,
                             (self.summary or parts.retriever) if memory else None,
                             facts=parts.facts if facts else None)
        self.prices = parts.prices
        # (tenant, user, session) -> its turns so far, when requests carry their session
        self.sessions: dict[tuple[str, str, str], list[Message]] | None = (
            {} if parts.session_history else None)

    def answer_many(self, wave: Wave) -> list[Outcome]:
        keys = [(req.tenant, req.user_id, req.session_id) for _, req in wave]
        turns = self.sessions if self.sessions is not None else {}
        results = self.router.route_many([route_request(seq, req, turns.get(k, ()))
                                          for (seq, req), k in zip(wave, keys)])
        if self.sessions is not None:
            for (_, req), k, r in zip(wave, keys, results):
                self.sessions.setdefault(k, []).extend(
                    [Message("user", req.query), Message("assistant", r.answer)])
        outcomes = [from_route_result(r, self.prices, self.slots) for r in results]
        if self.summary is not None:
            self._add_compaction(wave, outcomes)
        return outcomes

    def _add_compaction(self, wave: Wave, outcomes: list[Outcome]) -> None:
        tree = self.summary
        assert tree is not None
        for (_, req), o in zip(wave, outcomes):
            add_compaction(o, tree.drain_calls(namespace(req.tenant, req.user_id)), self.prices)
            o.memory_ids = [str(p) for m in o.memory_ids for p in tree.covers(int(m))]
        if self.summary_file is not None:
            tree.save(self.summary_file)


class SemanticCache:
    """Per-user cache of (query vector, answer); lookups see the answers of earlier waves."""

    stores_memory = False  # the class is its own builder (STRATEGIES): known before it is built

    def __init__(self, name: str, parts: StrategyParts) -> None:
        if parts.encoder is None:
            raise ValueError("semantic_cache needs an encoder")
        self.name = name
        self.encode = parts.encoder
        self.threshold = parts.cache_threshold
        self.large = RoutedStrategy(name, parts, [len(parts.tiers) - 1], memory=False, routing=False)
        self.vectors: dict[str, list[np.ndarray]] = {}
        self.answers: dict[str, list[Outcome]] = {}

    def answer_many(self, wave: Wave) -> list[Outcome]:
        vecs = _unit(np.asarray(self.encode([req.query for _, req in wave]), dtype=np.float32))
        users = [namespace(req.tenant, req.user_id) for _, req in wave]
        out: list[Outcome | None] = [None] * len(wave)
        misses: list[int] = []
        for i, (user, v) in enumerate(zip(users, vecs)):
            past = self.vectors.get(user)
            if past:
                sims = np.stack(past) @ v
                best = int(np.argmax(sims))
                if float(sims[best]) >= self.threshold:
                    out[i] = _cached(self.answers[user][best].answer, float(sims[best]))
                    continue
            misses.append(i)
        if misses:
            for i, o in zip(misses, self.large.answer_many([wave[i] for i in misses])):
                out[i] = o
                self.vectors.setdefault(users[i], []).append(vecs[i])
                self.answers.setdefault(users[i], []).append(o)
        return [o for o in out if o is not None]


def _cached(answer: str, similarity: float) -> Outcome:
    return Outcome(answer=answer, tier=CACHE_TIER, model="cache", escalated=False,
                   confidences=[similarity], tokens_base=0, tokens_injected=0, tokens_output=0,
                   eff_cost=0.0, eff_cost_prod=0.0, usd=0.0, latency_s=0.0, calls=0, cache_hit=True)


def _unit(m: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.where(norms == 0, 1.0, norms)


class StrategyBuilder(Protocol):
    """Makes a strategy by name. ``stores_memory`` is the built strategy's, known before it is
    built: the run gives a fresh memory store to those strategies only (``needs_memory``)."""

    stores_memory: bool

    def __call__(self, name: str, parts: StrategyParts) -> Strategy: ...


@dataclass(frozen=True)
class Routed:
    """A strategy of the one Router: its tiers (all | first | last), memory and routing on or off,
    and the fact layer (memroute_facts: facts extracted from the stored answers, injected)."""

    tiers: str
    stores_memory: bool
    routing: bool
    facts: bool = False
    summary: bool = False  # the summary tree instead of the turn-pairs (memroute_summary)

    def __call__(self, name: str, parts: StrategyParts) -> Strategy:
        n = len(parts.tiers)
        slots = {"all": range(n), "first": [0], "last": [n - 1]}[self.tiers]
        return RoutedStrategy(name, parts, slots, memory=self.stores_memory, routing=self.routing,
                              facts=self.facts, summary=self.summary)


STRATEGIES: Registry[StrategyBuilder] = Registry("replay strategy")
STRATEGIES.add("memroute", Routed("all", stores_memory=True, routing=True))
STRATEGIES.add("memroute_facts", Routed("all", stores_memory=True, routing=True, facts=True))
STRATEGIES.add("memroute_summary", Routed("all", stores_memory=True, routing=True, summary=True))
STRATEGIES.add("cascade_no_memory", Routed("all", stores_memory=False, routing=True))
STRATEGIES.add("always_small", Routed("first", stores_memory=False, routing=False))
STRATEGIES.add("always_large", Routed("last", stores_memory=False, routing=False))
STRATEGIES.add("semantic_cache", SemanticCache)


def needs_memory(name: str) -> bool:
    """Whether strategy ``name`` is built with a memory store: exactly when it stores memory."""
    return STRATEGIES.get(name, field="strategies").stores_memory


def needs_facts(name: str) -> bool:
    return bool(getattr(STRATEGIES.get(name, field="strategies"), "facts", False))


def needs_summary(name: str) -> bool:
    """Whether strategy ``name`` reads a summary tree (then it needs no Milvus store)."""
    return bool(getattr(STRATEGIES.get(name, field="strategies"), "summary", False))


class ShadowRecorder:
    """Every tier alone, with the memories the routed request will see, on a sampled share of
    requests (before the routed call, so the memory is the same): the calibration's samples.
    Each row carries every tier's confidence (``router.confidence``, never a calibrator's) and
    its answer's features (``memroute.routing.confidence_features``), for jobs.calibrate."""

    def __init__(self, parts: StrategyParts, share: float) -> None:
        cfg = replace(parts.router, use_routing=False, store_answers=False, calibrator=None)
        self.routers = [Router([t], cfg, parts.retrieval, parts.retriever if cfg.use_memory else None)
                        for t in parts.tiers]
        self.share = share

    def sampled(self, request_id: str) -> bool:
        digest = hashlib.sha256(request_id.encode()).digest()
        return int.from_bytes(digest[:4], "big") / 2**32 < self.share

    def record(self, wave: Wave) -> list[dict[str, object]]:
        chosen = [(seq, req) for seq, req in wave if self.sampled(req.request_id) and req.references]
        if not chosen:
            return []
        per_tier = [r.route_many([route_request(s, q) for s, q in chosen]) for r in self.routers]
        rows = []
        for k, (seq, req) in enumerate(chosen):
            results = [tier_results[k] for tier_results in per_tier]
            rows.append({
                "request_id": req.request_id, "seq": seq, "user_id": namespace(req.tenant, req.user_id),
                "kind": req.kind, "answers": [r.answer for r in results],
                "confidences": [r.decision.confidences[0] for r in results],
                "f1": [best_f1(r.answer, req.references) for r in results],
                "value_hit": [holds_value(r.answer, req.references) for r in results],
                "eff_cost": [r.eff_cost for r in results],
                # router.grounding's verdict on each tier's answer (None: not checked)
                "grounded": [r.calls[0].grounded if r.calls else None for r in results],
                "features": [answer_features(r.reply, r.decision.memories, req.query)
                             for r in results],
            })
        return rows
