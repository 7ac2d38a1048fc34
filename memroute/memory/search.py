"""Memory search: one ranking over a user's facts, atomic context units and turn-pairs, with a
confidence for the whole answer and a keyword fallback over the raw turns when nothing matches.

Sources (each read for ``search.candidate_k`` candidates):

- facts: the user's active facts (``FactStore.active``) as ``"<key words>: <value>"`` texts; BM25
  over them (the index given as ``lexical_index``: the project's BM25, cached per user until
  the active set changes) plus dense similarity to cached fact vectors (a fact row never
  changes: a new value is a new row, so a vector is never stale);
- units: :meth:`UnitIndex.search` (hybrid dense + BM25 over the units' collection);
- turns: the turn-pair retriever (hybrid, with read-your-writes when it is the journaled one).

The sources' own scores do not compare (RRF over one corpus, BM25 over another), so every
candidate gets the same score in [0, 1]: ``dense_weight`` x its cosine similarity to the query
(negative, or not among the dense candidates: 0) plus ``1 - dense_weight`` x the share of the
query's words it holds (stemmed, stopwords out). Results with score 0 are dropped; ties go to
facts, then units, then turns.

Confidence, from the best score: ``high`` >= ``search.high``, ``medium`` >= ``search.medium``,
else ``low`` (no result: ``low``). When the best score is below ``search.fallback_below`` the
raw turns (``raw_turns``: the store's rows and what the journal still holds) are scanned for
the query's words as substrings; each hit scores ``floor x matched share x 0.99`` where
``floor`` is the lowest real score returned (no real result: ``fallback_below``), so a
fallback hit always ranks below every real match. Up to ``top_k`` of them follow the real
results, marked ``fallback``.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np

from memroute.config.search import MAX_TOP_K, SearchConfig, check_search_config
from memroute.embedding.base import Encoder
from memroute.errors import InvalidRequest
from memroute.memory.facts.types import Fact
from memroute.namespace import SEPARATOR
from memroute.text.tokenize import STOPWORDS, tokenize, unigrams
from memroute.types import Memory, RetrievalHit, stable_id, validate_user_id

KINDS = ("fact", "unit", "turn")  # also the tie order
HIGH, MEDIUM, LOW = "high", "medium", "low"
FALLBACK_SCALE = 0.99  # keeps a full keyword match strictly below the floor
MAX_INDEXED_USERS = 256  # per-user fact BM25 indexes kept
_WORD_RE = re.compile(r"\w+")


class LexicalIndex(Protocol):
    def search(self, query: str, limit: int) -> list[tuple[int, float]]: ...


class ActiveFacts(Protocol):
    def active(self, user_id: str) -> list[Fact]: ...


class TurnRetriever(Protocol):
    """A HybridRetriever or the journaled one (read-your-writes): with ``dense_queries`` and
    ``vectors=`` both share the search's one query embedding."""

    def retrieve_many(self, user_ids: Sequence[str], queries: Sequence[str], *,
                      top_k: int | None = None) -> list[list[RetrievalHit]]: ...


class UnitSearch(Protocol):
    def search(self, user_id: str, query: str, top_k: int, *,
               vector: np.ndarray | None = None) -> list[RetrievalHit]: ...


@dataclass(frozen=True)
class SearchHit:
    kind: str  # fact | unit | turn
    id: int
    text: str
    score: float
    session_time: float | None  # the turn's time; a fact's valid_from
    fallback: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # key/value of a fact, turn_id of a unit

    def to_json(self) -> dict[str, Any]:
        day = (None if self.session_time is None else
               datetime.fromtimestamp(self.session_time, tz=UTC).date().isoformat())
        return {"kind": self.kind, "id": str(self.id), "text": self.text,
                "score": round(self.score, 4), "session_time": self.session_time, "date": day,
                "fallback": self.fallback, **self.extra}


@dataclass(frozen=True)
class SearchResult:
    confidence: str
    hits: list[SearchHit]
    fallback: bool  # the best score was below search.fallback_below: the raw turns were scanned
    best_score: float

    def to_json(self) -> dict[str, Any]:
        return {"object": "memory.search", "confidence": self.confidence,
                "fallback": self.fallback, "results": [h.to_json() for h in self.hits]}


def check_query(query: object, top_k: object, max_chars: int) -> tuple[str, int]:
    """``query`` and ``top_k`` checked (:class:`InvalidRequest` naming the field)."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidRequest("query must be a non-empty string", field="query")
    if len(query) > max_chars:
        raise InvalidRequest(f"query has {len(query)} characters; at most {max_chars}",
                             field="query")
    if "\x00" in query:
        raise InvalidRequest("query contains a NUL character", field="query")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise InvalidRequest(f"top_k must be an integer in 1..{MAX_TOP_K}, got {top_k!r}",
                             field="top_k")
    return query.strip(), top_k


def confidence_of(best: float, cfg: SearchConfig) -> str:
    return HIGH if best >= cfg.high else MEDIUM if best >= cfg.medium else LOW


def fact_text(f: Fact) -> str:
    """What a fact is matched as: ``user.home_city`` + ``Lyon`` -> ``user home city: Lyon``."""
    return f"{f.key.replace('.', ' ').replace('_', ' ')}: {f.value}"


def word_share(query_terms: set[str], text: str) -> float:
    """Share of the query's (stemmed) words that ``text`` holds, variants included."""
    if not query_terms:
        return 0.0
    return len(query_terms & set(tokenize(text, 1, True))) / len(query_terms)


class MemorySearch:
    def __init__(
        self,
        facts: ActiveFacts,
        turns: TurnRetriever,
        cfg: SearchConfig | None = None,
        *,
        lexical_index: Callable[[Iterable[tuple[int, str]]], LexicalIndex],
        encoder: Encoder | None = None,
        units: UnitSearch | None = None,
        raw_turns: Callable[[str], Sequence[Memory]] | None = None,
    ) -> None:
        self.cfg = check_search_config(cfg or SearchConfig())
        self.facts, self.turns, self.units = facts, turns, units
        self.encoder = encoder  # None: facts are matched by their words only
        self.lexical_index = lexical_index
        self.raw_turns = raw_turns
        self._vectors: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()
        self._indexes: OrderedDict[str, tuple[tuple[int, ...], LexicalIndex]] = OrderedDict()
        self._lock = threading.Lock()

    def search(self, user_id: str, query: str, top_k: int = 5) -> SearchResult:
        uid = validate_user_id(user_id)
        q, k = check_query(query, top_k, self.cfg.max_query_chars)
        terms = set(unigrams(q, True))
        qvec, turn_vecs = self._embed(uid, q)
        n = self.cfg.candidate_k
        hits = self._facts(uid, q, terms, qvec)
        if self.units is not None:
            hits += [self._scored("unit", h, terms) for h in
                     self.units.search(uid, q, n, vector=qvec)]
        kw = {} if turn_vecs is None else {"vectors": turn_vecs}
        hits += [self._scored("turn", h, terms) for h in
                 self.turns.retrieve_many([uid], [q], top_k=n, **kw)[0]]
        real = _ranked([h for h in hits if h.score > 0])[:k]
        best = real[0].score if real else 0.0
        fallback = best < self.cfg.fallback_below
        if fallback and self.raw_turns is not None:
            floor = real[-1].score if real else self.cfg.fallback_below
            seen = {h.id for h in real if h.kind == "turn"}
            real += self._fallback(uid, q, floor, seen, k)
        return SearchResult(confidence_of(best, self.cfg), real, fallback, best)

    def _embed(self, uid: str, q: str) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The query's vector (facts, units) and, when the turn retriever takes one, the rows
        of its dense query: one encoder call (a query costs ~20 ms of MiniLM on a CPU core)."""
        if self.encoder is None:
            return None, None
        dense = getattr(self.turns, "dense_queries", None)
        focused = dense([uid], [q])[0] if dense is not None else None
        texts = [q] if focused in (None, q) else [q, focused]
        vecs = np.asarray(self.encoder.encode(texts))
        return vecs[0], (None if focused is None else vecs[-1:])

    # -- sources -----------------------------------------------------------------------------

    def _scored(self, kind: str, hit: RetrievalHit, terms: set[str]) -> SearchHit:
        m = hit.memory
        extra = {"turn_id": str(_turn_id(m))} if kind == "unit" else {}
        return SearchHit(kind, m.id, m.text, self._score(hit.dense_score, terms, m.text),
                         float(m.session_time), extra=extra)

    def _score(self, cosine: float | None, terms: set[str], text: str) -> float:
        w = self.cfg.dense_weight
        dense = min(max(cosine or 0.0, 0.0), 1.0)
        return w * dense + (1.0 - w) * word_share(terms, text)

    def _facts(self, uid: str, q: str, terms: set[str], qvec: np.ndarray | None
               ) -> list[SearchHit]:
        active = {f.id: f for f in self.facts.active(uid)}
        if not active:
            return []
        n = self.cfg.candidate_k
        candidates = {fid for fid, _ in self._fact_index(uid, active).search(q, n)}
        cosines: dict[int, float] = {}
        if qvec is not None:
            ids = list(active)
            sims = self._fact_vectors(uid, [active[i] for i in ids]) @ qvec
            top = np.argsort(-sims, kind="stable")[:n]
            cosines = {ids[i]: float(sims[i]) for i in range(len(ids))}
            candidates.update(ids[i] for i in top)
        out = []
        for fid in candidates:
            f = active[fid]
            out.append(SearchHit(
                "fact", f.id, f"{f.key}: {f.value}",
                self._score(cosines.get(fid), terms, fact_text(f)), float(f.valid_from),
                extra={"key": f.key, "value": f.value, "source": f.source}))
        return out

    def _fact_index(self, uid: str, active: dict[int, Fact]) -> LexicalIndex:
        ids = tuple(sorted(active))
        with self._lock:
            cached = self._indexes.get(uid)
            if cached is not None and cached[0] == ids:
                self._indexes.move_to_end(uid)
                return cached[1]
        index = self.lexical_index((i, fact_text(active[i])) for i in ids)
        with self._lock:
            self._indexes[uid] = (ids, index)
            while len(self._indexes) > MAX_INDEXED_USERS:
                self._indexes.popitem(last=False)
        return index

    def _fact_vectors(self, uid: str, facts: list[Fact]) -> np.ndarray:
        assert self.encoder is not None
        with self._lock:
            got = {f.id: v for f in facts if (v := self._vectors.get((uid, f.id))) is not None}
        missing = [f for f in facts if f.id not in got]
        if missing:
            vecs = np.asarray(self.encoder.encode([fact_text(f) for f in missing]))
            got.update((f.id, v) for f, v in zip(missing, vecs))
            with self._lock:
                for f, v in zip(missing, vecs):
                    self._vectors[(uid, f.id)] = v
                while len(self._vectors) > self.cfg.fact_vector_cache:
                    self._vectors.popitem(last=False)
        return np.stack([got[f.id] for f in facts])

    def _fallback(self, uid: str, q: str, floor: float, seen: set[int], k: int
                  ) -> list[SearchHit]:
        """Raw turns holding the query's words as substrings, scored below ``floor``."""
        assert self.raw_turns is not None
        words = [w for w in _WORD_RE.findall(q.lower()) if w not in STOPWORDS and len(w) > 1]
        needles = list(dict.fromkeys(words)) or [q.lower()]
        scored = []
        for m in self.raw_turns(uid):
            if m.id in seen:
                continue
            text = m.text.lower()
            share = sum(w in text for w in needles) / len(needles)
            if share > 0:
                scored.append((share, m))
        scored.sort(key=lambda sm: (-sm[0], -sm[1].session_time, sm[1].id))
        return [SearchHit("turn", m.id, m.text, floor * share * FALLBACK_SCALE,
                          float(m.session_time), fallback=True) for share, m in scored[:k]]

    # -- erasure: the per-user caches (fact vectors and indexes) -----------------------------

    def forget_user(self, user_id: str) -> int:
        return self._forget(lambda u: u == user_id)

    def forget_tenant(self, tenant: str) -> int:
        prefix = f"{tenant}{SEPARATOR}"
        return self._forget(lambda u: u.startswith(prefix))

    def _forget(self, match: Callable[[str], bool]) -> int:
        with self._lock:
            keys = [key for key in self._vectors if match(key[0])]
            for key in keys:
                del self._vectors[key]
            for uid in [u for u in self._indexes if match(u)]:
                del self._indexes[uid]
        return len(keys)


def _turn_id(m: Memory) -> int:
    return stable_id(m.user_id, m.session_id, m.turn_index)


def _ranked(hits: list[SearchHit]) -> list[SearchHit]:
    return sorted(hits, key=lambda h: (-h.score, KINDS.index(h.kind), h.id))


__all__ = ["HIGH", "LOW", "MEDIUM", "MemorySearch", "SearchHit", "SearchResult", "check_query",
           "confidence_of", "fact_text", "word_share"]
