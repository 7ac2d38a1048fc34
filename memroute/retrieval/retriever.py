"""Hybrid retrieval of one user's memories: dense (Milvus) + BM25, fused.

The BM25 leg is ``retrieval.bm25_backend``: ``inprocess`` (a per-user bm25s index, extended in place
by this retriever's writes) or ``milvus`` (Milvus' own BM25 function, on a store with ``memory.bm25_function``).
Both legs go through the same fusion.

Temporal (``retrieval.temporal=auto``): a question's date expression ("in May 2023", "last
month"; :mod:`memroute.retrieval.temporal`) restricts both legs to memories of that session time
(a Milvus filter, a mask over the BM25 index); fewer than top_k there are topped up from the
unfiltered ranking.

Isolation: the dense leg searches the store with a user filter, the sparse leg searches an
index built only from that user's rows (or Milvus with the same user filter), so a query can
never surface another user's memory.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np

from memroute.config.schema import RetrievalConfig
from memroute.embedding.base import Encoder
from memroute.errors import ConfigError, InvalidRequest
from memroute.memory.base import MemoryStore
from memroute.memory.meaning import StatementSimilarity
from memroute.memory.supersession import POLICIES, apply_policy
from memroute.namespace import validate_tenant
from memroute.retrieval.bm25 import LazyOverlap
from memroute.retrieval.bm25_cache import BM25Cache
from memroute.retrieval.context import add_session_context, focus_query
from memroute.retrieval.fusion import FusedHit, get_fusion, get_score_norm
from memroute.retrieval.rerank import RERANKERS, TokenEncoder
from memroute.retrieval.temporal import (
    TimeWindow,
    fill_from,
    in_window,
    question_times,
    takes_time_window,
    time_window,
)
from memroute.retrieval.write_supersession import mark_superseded
from memroute.text.turn_kind import asks_something
from memroute.types import Memory, RetrievalHit, TurnPair, memory_of, validate_user_id

STRATEGIES = ("bm25", "dense", "hybrid")
BM25_BACKENDS = ("inprocess", "milvus")
TEMPORAL = ("auto", "off")
EMBED_CHUNK = 1000  # turn-pairs embedded and upserted per round (the store's write batch)
MAX_QUERY_CHARS = 8192
# A store that cannot filter by time is asked for this many times the candidates (up to the
# maximum), and the window is applied to what it returns.
WINDOW_POOL, MAX_WINDOW_POOL = 10, 16384
SUPERSEDED_MARGIN = 8  # extra candidates per leg, so dropping superseded rows leaves top_k


class HybridRetriever:
    def __init__(
        self,
        encoder: Encoder,
        store: MemoryStore,
        cfg: RetrievalConfig,
        *,
        bm25_cache: BM25Cache | None = None,
    ) -> None:
        _check_strategy(cfg.strategy, "retrieval.strategy")
        get_fusion(cfg.fusion)  # fail at construction, not on the first request
        get_score_norm(cfg.score_norm)
        if cfg.top_k < 1:
            raise ConfigError("top_k must be >= 1", field="retrieval.top_k")
        if cfg.candidate_k < 1:
            raise ConfigError("candidate_k must be >= 1", field="retrieval.candidate_k")
        store_dim = getattr(store, "dim", None)
        if store_dim is not None and store_dim != encoder.dim:
            raise ConfigError(
                f"the encoder produces {encoder.dim}-dim vectors but the store holds {store_dim}",
                field="embedder.dim",
            )
        if cfg.bm25_backend not in BM25_BACKENDS:
            raise ConfigError(
                f"Unknown bm25_backend {cfg.bm25_backend!r}. Available: {', '.join(BM25_BACKENDS)}",
                field="retrieval.bm25_backend",
            )
        if cfg.bm25_backend == "milvus" and not getattr(store, "bm25_function", False):
            raise ConfigError(
                "bm25_backend=milvus needs a store created with memory.bm25_function=true "
                "(Milvus >= 2.5 or Milvus Lite 3.x)",
                field="retrieval.bm25_backend",
            )
        self._rerank_order = RERANKERS.get(cfg.rerank, field="retrieval.rerank")
        if cfg.rerank != "none" and not isinstance(encoder, TokenEncoder):
            raise ConfigError(
                f"rerank={cfg.rerank} needs an encoder with token vectors (encode_tokens); "
                f"{type(encoder).__name__} has none",
                field="retrieval.rerank",
            )
        if cfg.rerank_depth < 1:
            raise ConfigError("rerank_depth must be >= 1", field="retrieval.rerank_depth")
        if cfg.temporal not in TEMPORAL:
            raise ConfigError(
                f"Unknown temporal {cfg.temporal!r}. Available: {', '.join(TEMPORAL)}",
                field="retrieval.temporal",
            )
        # A store whose search takes no time_window (a test double) is filtered here instead.
        self._store_windows = takes_time_window(store.search)
        if cfg.superseded not in POLICIES:
            raise ConfigError(
                f"Unknown superseded policy {cfg.superseded!r}. Available: {', '.join(POLICIES)}",
                field="retrieval.superseded",
            )
        self.encoder = encoder
        self.store = store
        self.cfg = cfg
        # supersession's rule 5: statements compared under the retrieval encoder
        self.similar = StatementSimilarity(encoder) if cfg.supersede_by_meaning else None
        if cfg.hot_vectors and not hasattr(store, "list_user_vectors"):
            raise ConfigError(f"hot_vectors needs a store that reads vectors back; "
                              f"{type(store).__name__} does not", field="retrieval.hot_vectors")
        loader = store.list_user_vectors if cfg.hot_vectors else store.list_user  # type: ignore[attr-defined]
        self.bm25 = bm25_cache or BM25Cache.from_config(loader, cfg)

    # ----------------------------------------------------------------- writes
    def remember(self, pairs: Sequence[TurnPair]) -> int:
        """Embed and upsert turn-pairs; cached BM25 indexes of their users take them in."""
        items = list(pairs)
        for p in items:
            if not isinstance(p, TurnPair):
                raise InvalidRequest(f"expected TurnPair, got {type(p).__name__}", field="pairs")
            validate_user_id(p.user_id)  # before spending time on embeddings
        written, blocks = 0, []
        try:
            for start in range(0, len(items), EMBED_CHUNK):
                chunk = items[start : start + EMBED_CHUNK]
                vectors = self.encoder.encode([p.text() for p in chunk])
                written += self.store.upsert(chunk, vectors)
                blocks.append(np.asarray(vectors, dtype=np.float32))
        except BaseException:
            # A partly failed write may have changed rows: never keep a stale index.
            self.bm25.invalidate_many(p.user_id for p in items)
            raise
        stacked = np.concatenate(blocks) if blocks and self.cfg.hot_vectors else None
        self.bm25.extend((memory_of(p) for p in items), vectors=stacked)
        if self.cfg.supersede and getattr(self.store, "supersession", False):
            self.supersede(items)
        return written

    def supersede(self, pairs: Sequence[TurnPair]) -> int:
        """Mark the stored pairs that ``pairs`` (just written) supersede; returns how many
        (:func:`memroute.retrieval.write_supersession.mark_superseded`)."""
        return mark_superseded(pairs, self.bm25, self.store, self.similar)

    def invalidate(self, user_id: str) -> None:
        """Forget the cached BM25 index of a user whose memories changed elsewhere."""
        self.bm25.invalidate(user_id)

    def forget_user(self, user_id: str) -> None:
        """Erasure: drop every per-user cache of ``user_id`` (the in-process BM25 index and the
        memories it holds; the Milvus BM25 leg keeps nothing here) and rule 5's statement
        vectors (keyed by text, not user: all of them go). Call after the store delete."""
        self.bm25.forget_user(user_id)
        if self.similar is not None:
            self.similar.clear()

    def forget_tenant(self, tenant: str) -> None:
        """Erasure: :meth:`forget_user` for every user of ``tenant``."""
        validate_tenant(tenant)
        self.bm25.forget_tenant(tenant)
        if self.similar is not None:
            self.similar.clear()

    # ------------------------------------------------------------------ reads
    def retrieve(
        self,
        user_id: str,
        query: str,
        *,
        top_k: int | None = None,
        strategy: str | None = None,
        question_time: float | None = None,
    ) -> list[RetrievalHit]:
        """Up to ``top_k`` of ``user_id``'s memories for ``query``, best first; relative dates in
        ``query`` count from ``question_time`` (epoch seconds; default: now)."""
        times = None if question_time is None else [question_time]
        return self.retrieve_many(
            [user_id], [query], top_k=top_k, strategy=strategy, question_times=times
        )[0]

    def retrieve_many(
        self,
        user_ids: Sequence[str],
        queries: Sequence[str],
        *,
        top_k: int | None = None,
        strategy: str | None = None,
        vectors: np.ndarray | None = None,
        question_times: Sequence[float] | None = None,
    ) -> list[list[RetrievalHit]]:
        """:meth:`retrieve` for aligned lists, embedding all queries in one batch; ``vectors``:
        that batch already embedded (the rows of :meth:`dense_queries`), by a caller that embeds
        more texts in the same encoder call; ``question_times``: when each query is asked
        (epoch seconds; default: now)."""
        if isinstance(user_ids, str) or isinstance(queries, str):
            raise InvalidRequest("user_ids and queries must be lists", field="queries")
        if len(user_ids) != len(queries):
            raise InvalidRequest(
                f"{len(user_ids)} user ids but {len(queries)} queries", field="queries"
            )
        strat = _check_strategy(strategy or self.cfg.strategy, "strategy")
        k = self.cfg.top_k if top_k is None else top_k
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidRequest(f"top_k must be a positive integer, got {k!r}", field="top_k")
        uids = [validate_user_id(u) for u in user_ids]
        for q in queries:
            _check_query(q)
        windows = self.time_windows(queries, question_times)
        if not uids:
            return []
        dense_queries = list(queries)
        if strat == "bm25":
            vectors = None
        else:
            dense_queries = self.dense_queries(uids, queries)
            if vectors is None:
                vectors = self.encoder.encode(dense_queries)
            elif len(vectors) != len(uids):
                raise InvalidRequest(f"{len(vectors)} vectors for {len(uids)} queries", field="vectors")
        return [
            self._retrieve_one(
                uid, q, None if vectors is None else vectors[i], k, strat, dense_queries[i], windows[i]
            )
            for i, (uid, q) in enumerate(zip(uids, queries))
        ]

    def time_windows(
        self, queries: Sequence[str], times: Sequence[float] | None = None
    ) -> list[TimeWindow | None]:
        """The session-time window of each query (None: no date in it, or temporal=off)."""
        at = question_times(times, len(queries), time.time())  # validated even when off
        if self.cfg.temporal == "off":
            return [None] * len(queries)
        return [time_window(q, t) for q, t in zip(queries, at)]

    def _retrieve_one(
        self, user_id: str, query: str, vector: np.ndarray | None, top_k: int, strategy: str,
        focused: str, window: TimeWindow | None,
    ) -> list[RetrievalHit]:
        hits = self._rank(user_id, query, vector, top_k, strategy, focused, window)
        if window is None or len(hits) >= top_k:
            return hits
        # Too few memories in the window (or a misparsed date): top up from the whole history.
        unfiltered = self._rank(user_id, query, vector, top_k, strategy, focused, None)
        return fill_from(hits, unfiltered, top_k)

    def _rank(
        self, user_id: str, query: str, vector: np.ndarray | None, top_k: int, strategy: str,
        focused: str, window: TimeWindow | None,
    ) -> list[RetrievalHit]:
        n = max(self.cfg.candidate_k, top_k)
        if strategy == "dense":
            assert vector is not None
            dense = self._dense(user_id, vector, self._pool(top_k), window)
            if not self._about_memories(dense, query):
                return []
            return self._current([RetrievalHit(m, s, dense_score=s) for m, s in dense])[:top_k]
        if strategy == "bm25":
            sparse = self._sparse(user_id, query, self._pool(top_k), window)
            return self._current([RetrievalHit(m, s, bm25_score=s) for m, s in sparse])[:top_k]

        assert vector is not None
        dense = self._dense(user_id, vector, self._pool(n), window)
        sparse = self._sparse(user_id, query, self._pool(n), window)
        if not sparse and not self._about_memories(dense, query):  # a shared word is evidence
            return []
        memories: dict[int, Memory] = {m.id: m for m, _ in sparse}
        memories.update((m.id, m) for m, _ in dense)  # the store's copy is the freshest
        overlap = self._overlap(user_id, query, [m for m, _ in sparse])
        fused = get_fusion(self.cfg.fusion)(
            [(m.id, s) for m, s in dense], [(m.id, s) for m, s in sparse], self.cfg, overlap
        )
        fused = add_session_context(fused, memories, self.cfg.context_weight)
        if self.cfg.rerank != "none":  # skip building the candidate texts
            fused = self._rerank(focused, fused, memories)
        return self._current([
            RetrievalHit(
                memories[h.id], h.score, dense_score=h.dense_score, bm25_score=h.bm25_score
            )
            for h in fused
        ])[:top_k]

    def _about_memories(self, dense: Sequence[tuple[Memory, float]], query: str) -> bool:
        """False when no memory reaches ``retrieval.min_similarity`` cosine to a question: it
        is about nothing the user said ("What is 89 hours in minutes?"), and any memory in its
        prompt would be paid for and unread. Hybrid asks this only when BM25 found no memory
        sharing a word with the question: a dense query stripped of the speakers' names
        (``query_focus``) can sit far from the right memory. A turn that asks nothing keeps its
        memories: they show the small model how to acknowledge ("WB-2984", not "Warranty
        Number"), and its acknowledgement is stored as memory."""
        floor = self.cfg.min_similarity
        if floor <= 0.0 or not asks_something(query):
            return True
        return bool(dense) and max(s for _, s in dense) >= floor

    def _pool(self, limit: int) -> int:
        """Candidates asked of a leg: a margin over ``limit`` for superseded rows dropped after."""
        return limit + SUPERSEDED_MARGIN if self.cfg.superseded == "exclude" else limit

    def _current(self, hits: list[RetrievalHit]) -> list[RetrievalHit]:
        return apply_policy(hits, policy=self.cfg.superseded)

    def _rerank(self, focused: str, fused: list[FusedHit], memories: Mapping[int, Memory]) -> list[FusedHit]:
        """The top ``rerank_depth`` re-ordered by the configured reranker (given the focused query,
        so the speakers' names do not match every memory); each slot keeps its score, so scores
        stay descending and the list order is the ranking."""
        head, tail = fused[: self.cfg.rerank_depth], fused[self.cfg.rerank_depth :]
        order = self._rerank_order(
            self.encoder,  # type: ignore[arg-type]  # checked at construction
            focused,
            [memories[h.id].text for h in head],
            [h.score for h in head],
            self.cfg.rerank_weight,
        )
        return [head[i]._replace(score=head[slot].score) for slot, i in enumerate(order)] + tail

    def dense_queries(self, user_ids: Sequence[str], queries: Sequence[str]) -> list[str]:
        """The texts the dense leg embeds for these queries."""
        return [self._dense_query(u, q) for u, q in zip(user_ids, queries)]

    def _dense_query(self, user_id: str, query: str) -> str:
        """The text embedded for the dense leg: the query without the words nearly all of the
        user's memories share (``retrieval.query_focus``; in-process BM25 statistics only)."""
        if self.cfg.query_focus >= 1.0 or self.cfg.bm25_backend != "inprocess":
            return query
        index = self.bm25.get(user_id).index
        return focus_query(query, index.df_ratio, self.cfg.query_focus, len(index))

    def _dense(
        self, user_id: str, vector: np.ndarray, limit: int, window: TimeWindow | None
    ) -> list[tuple[Memory, float]]:
        """The dense leg: (memory, cosine), best first; within ``window`` when one is given."""
        if self.cfg.hot_vectors:
            entry = self.bm25.get(user_id)
            if entry.vectors is not None:  # else a write without vectors dropped them: the store
                return entry.vectors.search(entry.memories, vector, limit, window)
        if window is None:
            return self.store.search(user_id, vector, limit)
        if self._store_windows:
            return self.store.search(user_id, vector, limit, time_window=window)  # type: ignore[call-arg]
        wider = min(limit * WINDOW_POOL, MAX_WINDOW_POOL)
        return in_window(self.store.search(user_id, vector, wider), window)[:limit]

    def _sparse(
        self, user_id: str, query: str, limit: int, window: TimeWindow | None = None
    ) -> list[tuple[Memory, float]]:
        """The BM25 leg: (memory, score > 0), best first; within ``window`` when one is given."""
        kw = {} if window is None else {"time_window": window}
        if self.cfg.bm25_backend == "milvus":
            return self.store.search_bm25(user_id, query, limit, **kw)  # type: ignore[attr-defined]
        return self.bm25.get(user_id).search(query, limit, **kw)

    def _overlap(self, user_id: str, query: str, hits: list[Memory]) -> Mapping[int, float]:
        """Query-term overlap of the BM25 hits (read by bm25_dominant)."""
        if self.cfg.bm25_backend == "milvus":
            return LazyOverlap(query, hits, self.cfg.ngram, self.cfg.stem)
        return self.bm25.get(user_id).index.overlap(query, [m.id for m in hits])


def _check_strategy(name: object, field: str) -> str:
    if name not in STRATEGIES:
        raise ConfigError(
            f"Unknown strategy {name!r}. Available: {', '.join(STRATEGIES)}", field=field
        )
    return name  # type: ignore[return-value]


def _check_query(query: object) -> None:
    if not isinstance(query, str) or not query.strip():
        raise InvalidRequest("query must be a non-empty string", field="query")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidRequest(f"query is longer than {MAX_QUERY_CHARS} characters", field="query")
