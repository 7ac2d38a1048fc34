"""Read-your-writes: a user's just-journaled turn-pairs are retrievable before they reach the store.

Between the acknowledged append and the flusher's write (``interval_s`` plus the write itself,
longer while the store is down) a pair exists only in the journal. :class:`JournaledRetriever`
wraps the store-backed retriever for the Router (same ``remember`` / ``retrieve_many``):

- ``remember`` appends to the journal (durable when it returns); the flusher does the store write.
- ``retrieve_many`` reads the user's pending entries *first*, then the store. A pair flushed in
  between is then seen in the store and/or the journal copy (deduplicated by id, the journal's
  copy wins: it is the newer); reading the store first could miss a pair that moved out of the
  journal in between. With ``visible_after_s`` (``journal.visible_after_s`` on a Milvus server,
  whose Session reads show another replica's write only after a time tick) an entry flushed
  that recently is still read from the journal.

Ranking, when the wrapped retriever is a hybrid one (it has ``encoder`` and a
:class:`RetrievalConfig`): the pending pairs are scored like stored ones, dense cosine + BM25
fused by ``retrieval.fusion`` together with the store's candidates
(:mod:`memroute.journal.pending_scoring`), so an acknowledged fact is found by a paraphrase
that shares no word with it ("I am vegetarian now" / "What are my current dietary
restrictions?") and an unrelated pending pair ranks where it would once stored, behind the
relevant stored hits. One more rule (:func:`~memroute.journal.pending_scoring.recency_slot`,
``slot_floor``): if no pending pair made the top_k, the best-ranked one takes the last slot when
its cosine clears ``slot_floor`` and the weakest stored cosine shown, since a follow-up most
often asks about what was just said (measured: 16/20 -> 19/20 paraphrased follow-ups see their
pending pair over 214 stored memories; unrelated pending pairs got in no more often). Each pending pair is embedded once (a bounded cache by id and text), in
the same encoder batch as the query; the store is asked for ``candidate_k`` candidates so the
fusion sees the same pool. A user with nothing pending gets the store's list unchanged.

Otherwise (:func:`merge_pending`, e.g. a keyword-only retriever) a pending pair counts if it
shares a stemmed BM25 term with the query; up to ``max_pending`` of them, most overlapping
first (then newest), go before the store's hits. Only the newest ``PENDING_SCAN`` pending
entries of a user are considered (more exist only while the store is failing), and only the
newest ``PENDING_EMBED`` of them get a dense score (the older ones are scored by BM25).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from memroute.config.schema import RetrievalConfig
from memroute.embedding.base import Encoder
from memroute.errors import InvalidRequest
from memroute.journal.pending_scoring import (
    DEFAULT_CACHE_SIZE,
    DEFAULT_SLOT_FLOOR,
    CorpusStats,
    VectorCache,
    embed_batch,
    fuse_with_pending,
)
from memroute.journal.protocol import TurnJournal
from memroute.journal.records import JournalEntry
from memroute.memory.supersession import apply_policy, marks_for
from memroute.text.tokenize import tokenize
from memroute.types import Memory, RetrievalHit, TurnPair, memory_of, validate_user_id

PENDING_SCAN = 256
SETTLED_USERS = 65536  # users whose settled seq is remembered (one forgotten: one rebuild)
PENDING_EMBED = 64
DEFAULT_MAX_PENDING = 3


class Retriever(Protocol):
    def retrieve_many(
        self, user_ids: Sequence[str], queries: Sequence[str], *, top_k: int | None = None
    ) -> list[list[RetrievalHit]]: ...


@runtime_checkable
@runtime_checkable
class CachingRetriever(Protocol):
    """A retriever that keeps users' memories in process (the BM25 index, ``hot_vectors``)."""

    def invalidate(self, user_id: str) -> None: ...


@runtime_checkable
class VectorRetriever(Protocol):
    """A retriever that says which texts it embeds for its queries and takes them embedded
    (:class:`~memroute.retrieval.retriever.HybridRetriever`): the query vectors are shared."""

    def dense_queries(self, user_ids: Sequence[str], queries: Sequence[str]) -> list[str]: ...

    def retrieve_many(
        self, user_ids: Sequence[str], queries: Sequence[str], *, top_k: int | None = None,
        vectors: np.ndarray | None = None,
    ) -> list[list[RetrievalHit]]: ...


def pending_memory(pair: TurnPair) -> Memory:
    """The Memory the store will return for ``pair`` once flushed."""
    return memory_of(pair)


def merge_pending(
    query: str,
    hits: Sequence[RetrievalHit],
    pending: Sequence[JournalEntry],
    *,
    top_k: int,
    max_pending: int = DEFAULT_MAX_PENDING,
) -> list[RetrievalHit]:
    """Lexical fallback: pending pairs sharing a stemmed term with ``query``, then the store's
    ``hits`` minus pending ids; at most ``top_k``. Scores are the fraction of query terms
    matched (not comparable with fused scores; the list order is the ranking)."""
    query_terms = set(tokenize(query, 1, True))
    scored: list[tuple[float, int, TurnPair]] = []
    for entry in pending:
        if not query_terms:
            break
        overlap = len(query_terms & set(tokenize(entry.pair.text(), 1, True))) / len(query_terms)
        if overlap > 0:
            scored.append((overlap, entry.seq, entry.pair))
    scored.sort(key=lambda t: (-t[0], -t[1]))
    fresh = [RetrievalHit(pending_memory(p), score) for score, _, p in scored[:max_pending]]
    pending_ids = {e.pair.id for e in pending}
    stored = [h for h in hits if h.memory.id not in pending_ids]
    return (fresh + stored)[:top_k]


class JournaledRetriever:
    """The Router's retriever with a durable journal in front of the store (see module doc)."""

    def __init__(
        self,
        retriever: Retriever,
        journal: TurnJournal,
        *,
        default_top_k: int | None = None,
        max_pending: int = DEFAULT_MAX_PENDING,
        cache_size: int = DEFAULT_CACHE_SIZE,
        slot_floor: float | None = DEFAULT_SLOT_FLOOR,
        visible_after_s: float = 0.0,
        writer: str | None = None,
    ) -> None:
        if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 0:
            raise InvalidRequest("max_pending must be an integer >= 0", field="max_pending")
        cfg = getattr(retriever, "cfg", None)
        self.default_top_k = default_top_k or getattr(cfg, "top_k", None) or 5
        self.retriever = retriever
        self.journal = journal
        self.max_pending = max_pending
        self.slot_floor = slot_floor  # None: no recency slot, the fused order only
        # journal.visible_after_s: flushed entries read from the journal until the store shows them
        self.visible_after_s = visible_after_s
        encoder = getattr(retriever, "encoder", None)
        # Scored like stored pairs when the retriever is a hybrid one; lexical fallback otherwise.
        self.cfg: RetrievalConfig | None = (
            cfg if isinstance(cfg, RetrievalConfig) and isinstance(encoder, Encoder) else None
        )
        self.encoder: Encoder | None = encoder if self.cfg is not None else None
        # supersession by meaning (rule 5), as the wrapped retriever's flusher applies it
        self.similar = getattr(retriever, "similar", None)
        self.vectors = VectorCache(cache_size)
        # decided once: whether the wrapped retriever takes the query vectors embedded here
        self.vector_retriever = retriever if isinstance(retriever, VectorRetriever) else None
        # A shared journal: other replicas' flushers write to the store behind this process's
        # cached copies of a user's memories; the user's settled seq says when to drop one.
        self.caching = (retriever if journal.shared and isinstance(retriever, CachingRetriever)
                        else None)
        self.writer = writer  # this process's flusher: its writes keep the cache in step
        self._settled: OrderedDict[str, int] = OrderedDict()  # user -> settled seq seen
        self._settled_lock = threading.Lock()

    def _revalidate(self, user_ids: Iterable[str]) -> None:
        """Drop the wrapped retriever's cached copy of a user another replica wrote to.

        An entry flushed ``visible_after_s`` ago or more is in the store for every reader; the
        newer ones are read from the journal (the snapshot above). A user's settled seq (of the
        entries other flushers wrote: this process's own writes extend its cache) that moved
        since this process last looked means a write it has not seen: the cache is rebuilt
        from the store on the next read, with a read that sees every acknowledged write
        (``BM25Cache``: a Session read may not show another client's write yet, and a rebuild
        that missed it would be kept). A user first seen here is dropped once if another
        writer ever wrote to it (its copy may predate that). One indexed query per user per
        request."""
        assert self.caching is not None
        for uid in user_ids:
            seq = self.journal.settled_seq(uid, self.visible_after_s, writer=self.writer)
            with self._settled_lock:
                seen = self._settled.pop(uid, None)
                self._settled[uid] = seq
                if len(self._settled) > SETTLED_USERS:
                    self._settled.popitem(last=False)
            if seq > (seen or 0):
                self.caching.invalidate(uid)

    def forget_user(self, user_id: str) -> int:
        """Erasure: drop the user's pending-pair vectors (the journal rows go in the journal)."""
        return self.vectors.forget(lambda u: u == user_id)

    def forget_tenant(self, tenant: str) -> int:
        return self.vectors.forget(lambda u: u.startswith(f"{tenant}:"))

    def remember(self, pairs: Sequence[TurnPair]) -> int:
        """Durably journal ``pairs`` (the flusher writes them to the store); returns how many."""
        return len(set(self.journal.append(pairs)))

    def retrieve(self, user_id: str, query: str, *, top_k: int | None = None) -> list[RetrievalHit]:
        return self.retrieve_many([user_id], [query], top_k=top_k)[0]

    def dense_queries(self, user_ids: Sequence[str], queries: Sequence[str]) -> list[str]:
        """The texts the wrapped retriever embeds for ``queries`` (the queries themselves when
        it does not say): a caller that embeds them passes the rows back as ``vectors=``."""
        if self.vector_retriever is None:
            return list(queries)
        return list(self.vector_retriever.dense_queries(user_ids, queries))

    def retrieve_many(
        self, user_ids: Sequence[str], queries: Sequence[str], *, top_k: int | None = None,
        vectors: np.ndarray | None = None,
    ) -> list[list[RetrievalHit]]:
        """``vectors``: the rows of :meth:`dense_queries`, embedded by the caller already (the
        memory search shares its query embedding); the pending texts are embedded here."""
        if isinstance(user_ids, str):
            raise InvalidRequest("user_ids must be a list", field="user_ids")
        # The journal snapshot is taken before the store is read (see the module doc).
        snapshot: Mapping[str, list[JournalEntry]] = {
            uid: self.journal.pending_for_user(validate_user_id(uid), PENDING_SCAN,
                                               flushed_within_s=self.visible_after_s)
            for uid in dict.fromkeys(user_ids)
        }
        if self.caching is not None:
            self._revalidate(snapshot)
        k = self.default_top_k if top_k is None else top_k
        shared = self.vector_retriever is not None
        given = {"vectors": vectors} if shared and vectors is not None else {}
        if vectors is not None and len(vectors) != len(user_ids):
            raise InvalidRequest(f"{len(vectors)} vectors for {len(user_ids)} queries",
                                 field="vectors")
        if self.cfg is None or not any(snapshot.values()):
            all_hits = self.retriever.retrieve_many(user_ids, queries, top_k=top_k, **given)
            all_hits, snapshot = self._supersede(user_ids, all_hits, snapshot)
            return [
                merge_pending(q, hits, snapshot[uid], top_k=k, max_pending=self.max_pending)
                for uid, q, hits in zip(user_ids, queries, all_hits)
            ]
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidRequest(f"top_k must be a positive integer, got {k!r}", field="top_k")
        user_ids, queries = list(user_ids), list(queries)
        pending = {uid: [pending_memory(e.pair) for e in es] for uid, es in snapshot.items()}
        pending_marks = {uid: marks_for([e.pair for e in es], pending[uid], self.similar)
                         for uid, es in snapshot.items() if es}
        pending = {uid: [m for m in ms if m.id not in pending_marks.get(uid, {})]
                   for uid, ms in pending.items()}
        stats = {uid: self._stats(uid) for uid in pending if pending[uid]}
        if self.cfg.strategy != "bm25":
            # One encoder call: every query not embedded by the caller (the store search takes
            # them too, when it can) and the pending texts not embedded yet.
            assert self.encoder is not None
            to_embed = [m for uid in stats for m in pending[uid][-PENDING_EMBED:]]
            if vectors is not None and shared:
                embed_batch(self.encoder, self.vectors, [], to_embed)
            else:
                vectors = embed_batch(self.encoder, self.vectors,
                                      self.dense_queries(user_ids, queries), to_embed)
        else:
            vectors = None
        # The fusion pool: the store's candidates, not only its top_k.
        all_hits = self.retriever.retrieve_many(
            user_ids, queries, top_k=max(k, self.cfg.candidate_k),
            **({"vectors": vectors} if shared and vectors is not None else {}),
        )
        all_hits, _ = self._supersede(user_ids, all_hits, snapshot)
        return self._rank(user_ids, queries, all_hits, pending, stats, vectors, k)

    def _rank(
        self,
        user_ids: list[str],
        queries: list[str],
        all_hits: list[list[RetrievalHit]],
        pending: Mapping[str, list[Memory]],
        stats: Mapping[str, CorpusStats],
        vectors: np.ndarray | None,
        k: int,
    ) -> list[list[RetrievalHit]]:
        cfg = self.cfg
        assert cfg is not None
        qvecs: dict[int, np.ndarray] = {}
        if vectors is not None:
            qvecs = {i: vectors[i] for i, uid in enumerate(user_ids) if pending[uid]}
        out = []
        for i, (uid, q, hits) in enumerate(zip(user_ids, queries, all_hits)):
            if not pending[uid]:
                out.append(list(hits[:k]))
                continue
            out.append(fuse_with_pending(
                q, qvecs.get(i), hits, pending[uid], self.vectors.get(pending[uid]),
                stats[uid], cfg, top_k=k, slot_floor=self.slot_floor,
            ))
        return out

    def _supersede(
        self, user_ids: Sequence[str], all_hits: list[list[RetrievalHit]],
        snapshot: Mapping[str, list[JournalEntry]],
    ) -> tuple[list[list[RetrievalHit]], dict[str, list[JournalEntry]]]:
        """The rule the flusher applies once it writes them, applied to the pending pairs now:
        a pending change statement hides the stored hits and the older pending pairs it
        supersedes (``retrieval.superseded``)."""
        cfg = getattr(self.retriever, "cfg", None)
        if isinstance(cfg, RetrievalConfig) and not cfg.supersede:
            return all_hits, dict(snapshot)
        policy = cfg.superseded if isinstance(cfg, RetrievalConfig) else "exclude"
        out, kept = [], {}
        for uid, hits in zip(user_ids, all_hits):
            entries = snapshot.get(uid, [])
            if not entries:
                out.append(list(hits))
                kept[uid] = []
                continue
            pairs = [e.pair for e in entries]
            # rule 5 here sees the retrieved candidates, the flusher the user's whole history
            marks = marks_for(pairs, [*(h.memory for h in hits), *map(pending_memory, pairs)],
                              self.similar)
            out.append(apply_policy(list(hits), marks, policy))
            kept[uid] = [e for e in entries if e.pair.id not in marks]
        return out, kept

    def _stats(self, user_id: str) -> CorpusStats:
        """Document frequencies of the user's stored memories (in-process BM25 index only)."""
        assert self.cfg is not None
        bm25 = getattr(self.retriever, "bm25", None)
        if self.cfg.bm25_backend != "inprocess" or bm25 is None:
            return CorpusStats.empty()
        index = bm25.get(user_id).index
        n = len(index)
        return CorpusStats(n, lambda term: index.df_ratio(term) * n)

