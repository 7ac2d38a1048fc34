"""Hybrid retrieval of one user's memories: dense (Milvus) + BM25, fused.

The BM25 leg is ``retrieval.bm25_backend``: ``inprocess`` (a per-user bm25s index, extended in place
by this retriever's writes) or ``milvus`` (Milvus' own BM25 function, on a store with ``memory.bm25_function``).
Both legs go through the same fusion.

Isolation: the dense leg searches the store with a user filter, the sparse leg searches an
index built only from that user's rows (or Milvus with the same user filter), so a query can
never surface another user's memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from memroute.config.schema import RetrievalConfig
from memroute.embedding.base import Encoder
from memroute.errors import ConfigError, InvalidRequest
from memroute.memory.base import MemoryStore
from memroute.namespace import validate_tenant
from memroute.retrieval.bm25 import BM25Cache
from memroute.retrieval.context import add_session_context, focus_query
from memroute.retrieval.fusion import FusedHit, get_fusion, get_score_norm
from memroute.retrieval.rerank import RERANKERS, TokenEncoder
from memroute.text.tokenize import tokenize, unigrams
from memroute.types import Memory, RetrievalHit, TurnPair, memory_of, validate_user_id

STRATEGIES = ("bm25", "dense", "hybrid")
BM25_BACKENDS = ("inprocess", "milvus")
EMBED_CHUNK = 1000  # turn-pairs embedded and upserted per round (the store's write batch)
MAX_QUERY_CHARS = 8192


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
        self.encoder = encoder
        self.store = store
        self.cfg = cfg
        self.bm25 = bm25_cache or BM25Cache.from_config(store.list_user, cfg)

    # ----------------------------------------------------------------- writes
    def remember(self, pairs: Sequence[TurnPair]) -> int:
        """Embed and upsert turn-pairs; cached BM25 indexes of their users take them in."""
        items = list(pairs)
        for p in items:
            if not isinstance(p, TurnPair):
                raise InvalidRequest(f"expected TurnPair, got {type(p).__name__}", field="pairs")
            validate_user_id(p.user_id)  # before spending time on embeddings
        written = 0
        try:
            for start in range(0, len(items), EMBED_CHUNK):
                chunk = items[start : start + EMBED_CHUNK]
                vectors = self.encoder.encode([p.text() for p in chunk])
                written += self.store.upsert(chunk, vectors)
        except BaseException:
            # A partly failed write may have changed rows: never keep a stale index.
            self.bm25.invalidate_many(p.user_id for p in items)
            raise
        self.bm25.extend(memory_of(p) for p in items)
        return written

    def invalidate(self, user_id: str) -> None:
        """Forget the cached BM25 index of a user whose memories changed elsewhere."""
        self.bm25.invalidate(user_id)

    def forget_user(self, user_id: str) -> None:
        """Erasure: drop every per-user cache of ``user_id`` (the in-process BM25 index and the
        memories it holds; the Milvus BM25 leg keeps nothing here). Call after the store delete."""
        self.bm25.forget_user(user_id)

    def forget_tenant(self, tenant: str) -> None:
        """Erasure: :meth:`forget_user` for every user of ``tenant``."""
        validate_tenant(tenant)
        self.bm25.forget_tenant(tenant)

    # ------------------------------------------------------------------ reads
    def retrieve(
        self,
        user_id: str,
        query: str,
        *,
        top_k: int | None = None,
        strategy: str | None = None,
    ) -> list[RetrievalHit]:
        """Up to ``top_k`` of ``user_id``'s memories for ``query``, best first."""
        return self.retrieve_many([user_id], [query], top_k=top_k, strategy=strategy)[0]

    def retrieve_many(
        self,
        user_ids: Sequence[str],
        queries: Sequence[str],
        *,
        top_k: int | None = None,
        strategy: str | None = None,
        vectors: np.ndarray | None = None,
    ) -> list[list[RetrievalHit]]:
        """:meth:`retrieve` for aligned lists, embedding all queries in one batch; ``vectors``:
        that batch already embedded (the rows of :meth:`dense_queries`), by a caller that embeds
        more texts in the same encoder call."""
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
            self._retrieve_one(uid, q, None if vectors is None else vectors[i], k, strat, dense_queries[i])
            for i, (uid, q) in enumerate(zip(uids, queries))
        ]

    def _retrieve_one(
        self, user_id: str, query: str, vector: np.ndarray | None, top_k: int, strategy: str,
        focused: str,
    ) -> list[RetrievalHit]:
        n = max(self.cfg.candidate_k, top_k)
        if strategy == "dense":
            assert vector is not None
            return [
                RetrievalHit(m, s, dense_score=s)
                for m, s in self.store.search(user_id, vector, top_k)
            ]
        if strategy == "bm25":
            sparse = self._sparse(user_id, query, top_k)
            return [RetrievalHit(m, s, bm25_score=s) for m, s in sparse]

        assert vector is not None
        dense = self.store.search(user_id, vector, n)
        sparse = self._sparse(user_id, query, n)
        memories: dict[int, Memory] = {m.id: m for m, _ in sparse}
        memories.update((m.id, m) for m, _ in dense)  # the store's copy is the freshest
        overlap = self._overlap(user_id, query, [m for m, _ in sparse])
        fused = get_fusion(self.cfg.fusion)(
            [(m.id, s) for m, s in dense], [(m.id, s) for m, s in sparse], self.cfg, overlap
        )
        fused = add_session_context(fused, memories, self.cfg.context_weight)
        if self.cfg.rerank != "none":  # skip building the candidate texts
            fused = self._rerank(focused, fused, memories)
        return [
            RetrievalHit(
                memories[h.id], h.score, dense_score=h.dense_score, bm25_score=h.bm25_score
            )
            for h in fused[:top_k]
        ]

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

    def _sparse(self, user_id: str, query: str, limit: int) -> list[tuple[Memory, float]]:
        """The BM25 leg: (memory, score > 0), best first."""
        if self.cfg.bm25_backend == "milvus":
            return self.store.search_bm25(user_id, query, limit)  # type: ignore[attr-defined]
        return self.bm25.get(user_id).search(query, limit)

    def _overlap(self, user_id: str, query: str, hits: list[Memory]) -> Mapping[int, float]:
        """Query-term overlap of the BM25 hits (read by bm25_dominant)."""
        if self.cfg.bm25_backend == "milvus":
            return _LazyOverlap(query, hits, self.cfg.ngram, self.cfg.stem)
        return self.bm25.get(user_id).index.overlap(query, [m.id for m in hits])


class _LazyOverlap(Mapping[int, float]):
    """:meth:`BM25Index.overlap` for hits that have no in-process index. Tokenizing 50 memories
    costs ~6 ms, so a memory is tokenized only when a fusion reads its overlap."""

    def __init__(self, query: str, hits: Sequence[Memory], ngram: int, stem: bool) -> None:
        self._terms = set(unigrams(query, stem))
        self._texts = {m.id: m.text for m in hits}
        self._ngram, self._stem = ngram, stem
        self._done: dict[int, float] = {}

    def __getitem__(self, doc_id: int) -> float:
        if doc_id not in self._done:
            text = self._texts[doc_id]  # KeyError for ids outside the hits (Mapping.get: default)
            found = self._terms & set(tokenize(text, self._ngram, self._stem))
            self._done[doc_id] = len(found) / len(self._terms) if self._terms else 0.0
        return self._done[doc_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self._texts)

    def __len__(self) -> int:
        return len(self._texts)


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
