"""Pending turn-pairs scored like stored ones: dense cosine + BM25 + the retriever's fusion.

A pair that is still only in the journal gets the two leg scores the store-backed
:class:`~memroute.retrieval.retriever.HybridRetriever` would give it once flushed:

- dense: cosine of its embedding (``encoder.encode(pair.text())``, cached per id and text in
  :class:`VectorCache`, so each pending pair is embedded once, not per query) with the query
  vector, embedded from the same focused query the dense leg uses;
- BM25: Lucene BM25 over the same tokens (``retrieval.ngram`` / ``retrieval.stem``), with the
  idf of a corpus made of the user's stored memories (their document frequencies from the
  in-process index; none with ``bm25_backend=milvus``) plus the pending pairs. Lengths are
  taken as average (``dl / avgdl = 1``): the index keeps no lengths.

:func:`fuse_with_pending` then ranks the store's candidates (their own leg scores) and the
pending pairs together by ``retrieval.fusion`` and session context, exactly as the retriever
ranks its candidates, so a pending pair lands where it will land once stored: ahead of the
stored hits when relevant whatever the wording, behind them when not. The opt-in rerank is
not re-applied while a user has pending pairs.
"""

from __future__ import annotations

import math
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from memroute.config.schema import RetrievalConfig
from memroute.embedding.base import Encoder
from memroute.retrieval.context import add_session_context
from memroute.retrieval.fusion import get_fusion
from memroute.text.tokenize import tokenize, unigrams
from memroute.types import Memory, RetrievalHit

DEFAULT_CACHE_SIZE = 4096  # embeddings kept (384 floats each: ~6 MB)
# The recency slot's cosine floor (MiniLM scale): paraphrased follow-ups of a statement scored
# 0.24-0.61 (median 0.36) on 20 pairs, unrelated statement/question pairs 0.06 median, 0.19 p90.
DEFAULT_SLOT_FLOOR = 0.3


class VectorCache:
    """Bounded LRU of pending-pair embeddings keyed by (id, text); thread-safe."""

    def __init__(self, max_size: int = DEFAULT_CACHE_SIZE) -> None:
        self.max_size = max_size
        self._rows: OrderedDict[tuple[int, str], np.ndarray] = OrderedDict()
        self._users: dict[tuple[int, str], str] = {}  # whose row it is: for erasure
        self._lock = threading.Lock()
        self.embedded = 0  # texts embedded so far (observability, tests)

    def missing(self, memories: Sequence[Memory]) -> list[Memory]:
        """The memories whose (id, text) has no cached vector, each once."""
        with self._lock:
            out = {m.id: m for m in memories if (m.id, m.text) not in self._rows}
        return list(out.values())

    def put(self, memories: Sequence[Memory], vectors: np.ndarray) -> None:
        with self._lock:
            self.embedded += len(memories)
            for m, v in zip(memories, vectors):
                self._rows[(m.id, m.text)] = v
                self._users[(m.id, m.text)] = m.user_id
                self._rows.move_to_end((m.id, m.text))
            while len(self._rows) > self.max_size:
                key, _ = self._rows.popitem(last=False)
                self._users.pop(key, None)

    def forget(self, belongs: Callable[[str], bool]) -> int:
        """Drop the vectors of every user ``belongs(user_id)`` picks (erasure); how many."""
        with self._lock:
            gone = [k for k, u in self._users.items() if belongs(u)]
            for k in gone:
                self._rows.pop(k, None)
                self._users.pop(k, None)
            return len(gone)

    def get(self, memories: Sequence[Memory]) -> dict[int, np.ndarray]:
        """Cached vectors by id (an evicted one is simply absent: its dense leg is skipped)."""
        with self._lock:
            out = {}
            for m in memories:
                v = self._rows.get((m.id, m.text))
                if v is not None:
                    self._rows.move_to_end((m.id, m.text))
                    out[m.id] = v
            return out

    def __len__(self) -> int:
        return len(self._rows)


def embed_batch(
    encoder: Encoder, cache: VectorCache, queries: Sequence[str], pending: Sequence[Memory]
) -> np.ndarray:
    """Query vectors for ``queries``, embedding the uncached ``pending`` texts in the same batch."""
    new = cache.missing(pending)
    if not queries and not new:
        return np.zeros((0, encoder.dim), dtype=np.float32)
    vectors = encoder.encode([*queries, *(m.text for m in new)])
    if new:
        cache.put(new, vectors[len(queries) :])
    return vectors[: len(queries)]


@dataclass(frozen=True)
class CorpusStats:
    """Document frequencies of the user's stored memories: ``df(term)`` of ``num_docs``."""

    num_docs: int
    df: Callable[[str], float]

    @classmethod
    def empty(cls) -> CorpusStats:
        return cls(0, lambda term: 0.0)


def bm25_scores(
    query: str, docs: Sequence[Memory], stats: CorpusStats, cfg: RetrievalConfig
) -> dict[int, float]:
    """Lucene BM25 of each pending doc for ``query`` over stored + pending documents."""
    q_terms = tokenize(query, cfg.ngram, cfg.stem)
    if not q_terms or not docs:
        return {}
    tfs = {m.id: Counter(tokenize(m.text, cfg.ngram, cfg.stem)) for m in docs}
    n = stats.num_docs + len(tfs)
    idf: dict[str, float] = {}
    for t in set(q_terms):
        df = stats.df(t) + sum(1 for tf in tfs.values() if t in tf)
        idf[t] = math.log(1 + (n - df + 0.5) / (df + 0.5))
    out: dict[int, float] = {}
    for doc_id, tf in tfs.items():
        s = sum(idf[t] * tf[t] / (cfg.bm25_k1 + tf[t]) for t in q_terms if tf[t])
        if s > 0:
            out[doc_id] = s
    return out


class _Overlap(Mapping[int, float]):
    """Query-term overlap of candidate texts (read by bm25_dominant only), computed on demand."""

    def __init__(self, query: str, texts: Mapping[int, str], cfg: RetrievalConfig) -> None:
        self._terms = set(unigrams(query, cfg.stem))
        self._texts, self._cfg = texts, cfg

    def __getitem__(self, doc_id: int) -> float:
        found = self._terms & set(tokenize(self._texts[doc_id], self._cfg.ngram, self._cfg.stem))
        return len(found) / len(self._terms) if self._terms else 0.0

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._texts)

    def __len__(self) -> int:
        return len(self._texts)


def _desc(leg: dict[int, float]) -> list[tuple[int, float]]:
    return sorted(leg.items(), key=lambda t: -t[1])


def fuse_with_pending(
    query: str,
    query_vector: np.ndarray | None,
    stored: Sequence[RetrievalHit],
    pending: Sequence[Memory],
    vectors: Mapping[int, np.ndarray],
    stats: CorpusStats,
    cfg: RetrievalConfig,
    *,
    top_k: int,
    slot_floor: float | None = DEFAULT_SLOT_FLOOR,
) -> list[RetrievalHit]:
    """The store's candidates and the pending memories ranked together (see the module doc).

    ``stored`` carry their leg scores (``dense_score`` / ``bm25_score``); a stored id that is
    pending is replaced by the pending copy (newer). Returns at most ``top_k``, best first.
    With ``slot_floor`` set, see :func:`recency_slot`.
    """
    fresh = {m.id: m for m in pending}
    memories = {h.memory.id: h.memory for h in stored if h.memory.id not in fresh}
    dense = {h.memory.id: h.dense_score for h in stored if h.memory.id in memories}
    sparse = {h.memory.id: h.bm25_score for h in stored if h.memory.id in memories}
    dense_leg = {i: s for i, s in dense.items() if s is not None}
    sparse_leg = {i: s for i, s in sparse.items() if s is not None}
    memories.update(fresh)
    if query_vector is not None and cfg.strategy != "bm25":
        for doc_id, v in vectors.items():
            if doc_id in fresh:
                dense_leg[doc_id] = float(np.dot(v, query_vector))
    if cfg.strategy != "dense":
        sparse_leg.update(bm25_scores(query, list(fresh.values()), stats, cfg))
    d, s = _desc(dense_leg), _desc(sparse_leg)
    if cfg.strategy == "dense" or cfg.strategy == "bm25":
        leg = d if cfg.strategy == "dense" else s
        key = "dense_score" if cfg.strategy == "dense" else "bm25_score"
        hits = [RetrievalHit(memories[i], v, **{key: v}) for i, v in leg]
    else:
        texts = {i: memories[i].text for i, _ in s}
        fused = get_fusion(cfg.fusion)(d, s, cfg, _Overlap(query, texts, cfg))
        fused = add_session_context(fused, memories, cfg.context_weight)
        hits = [
            RetrievalHit(memories[h.id], h.score, dense_score=h.dense_score, bm25_score=h.bm25_score)
            for h in fused
        ]
    if slot_floor is None:
        return hits[:top_k]
    return recency_slot(hits, set(fresh), top_k=top_k, floor=slot_floor)


def recency_slot(
    hits: Sequence[RetrievalHit], pending_ids: set[int], *, top_k: int, floor: float
) -> list[RetrievalHit]:
    """``hits[:top_k]``, except that when no pending pair made it, the first pending one below
    that either has a cosine of at least ``floor`` and of the weakest stored hit shown, or is the
    query's best BM25 match, takes the last slot: a follow-up most often asks about what was just
    said. (The second case because zscore fusion gives a lone BM25 match no weight: a new code or
    name that only the pending pair holds would rank by its cosine alone.)

    Measured on 20 paraphrased statement / follow-up pairs over LoCoMo conv-26 (214 memories):
    the pending pair in the top 5 16/20 -> 19/20; one unrelated pending pair entered the top 5
    8/20 times either way and never pushed the relevant stored pair out.
    """
    top = list(hits[:top_k])
    if not top or any(h.memory.id in pending_ids for h in top):
        return top
    weakest = min((h.dense_score for h in top if h.dense_score is not None), default=floor)
    best_bm25 = max((h.bm25_score for h in hits if h.bm25_score is not None), default=None)
    for h in hits[top_k:]:
        if h.memory.id not in pending_ids:
            continue
        close = h.dense_score is not None and h.dense_score >= max(floor, weakest)
        if close or (h.bm25_score is not None and h.bm25_score == best_bm25):
            top[-1] = h
            break
    return top
