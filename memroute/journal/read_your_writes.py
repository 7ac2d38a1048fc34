"""Read-your-writes: a user's just-journaled turn-pairs are retrievable before they reach the store.

Between the acknowledged append and the flusher's write (``interval_s`` plus the write itself,
longer while the store is down) a pair exists only in the journal. :class:`JournaledRetriever`
wraps the store-backed retriever for the Router (same ``remember`` / ``retrieve_many``):

- ``remember`` appends to the journal (durable when it returns); the flusher does the store write.
- ``retrieve_many`` reads the user's pending entries *first*, then the store. A pair flushed in
  between is then seen in the store and/or the journal copy (deduplicated by id); reading the
  store first could miss a pair that moved out of the journal in between.

Merge rule (:func:`merge_pending`), simple on purpose: a pending pair counts if it shares at
least one BM25 term with the query (:func:`memroute.text.tokenize.tokenize`, unigrams and
their variants) -- the condition under which the BM25 leg could find it once flushed. Up to
``max_pending`` of them, most overlapping first (then newest), go *before* the store's hits,
because a follow-up question most often asks about what was just said and nothing else can
find it yet; the list is then cut to ``top_k``. Their ``score`` is the fraction of query terms
matched (not comparable with fused scores; the list order is the ranking). A store hit whose id
is pending is dropped: the journal holds the newer version. Only the newest
``PENDING_SCAN`` pending entries of a user are considered (more exist only while the store is
failing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from memroute.errors import InvalidRequest
from memroute.journal.sqlite_journal import Journal, JournalEntry
from memroute.text.tokenize import tokenize
from memroute.types import Memory, RetrievalHit, TurnPair, memory_of, validate_user_id

PENDING_SCAN = 256
DEFAULT_MAX_PENDING = 3


class Retriever(Protocol):
    def retrieve_many(
        self, user_ids: Sequence[str], queries: Sequence[str], *, top_k: int | None = None
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
    """Matching pending pairs, then the store's ``hits`` minus pending ids; at most ``top_k``."""
    query_terms = set(tokenize(query, 1))
    scored: list[tuple[float, int, TurnPair]] = []
    for entry in pending:
        if not query_terms:
            break
        overlap = len(query_terms & set(tokenize(entry.pair.text(), 1))) / len(query_terms)
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
        journal: Journal,
        *,
        default_top_k: int | None = None,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 0:
            raise InvalidRequest("max_pending must be an integer >= 0", field="max_pending")
        cfg = getattr(retriever, "cfg", None)
        self.default_top_k = default_top_k or getattr(cfg, "top_k", None) or 5
        self.retriever = retriever
        self.journal = journal
        self.max_pending = max_pending

    def remember(self, pairs: Sequence[TurnPair]) -> int:
        """Durably journal ``pairs`` (the flusher writes them to the store); returns how many."""
        return len(set(self.journal.append(pairs)))

    def retrieve(self, user_id: str, query: str, *, top_k: int | None = None) -> list[RetrievalHit]:
        return self.retrieve_many([user_id], [query], top_k=top_k)[0]

    def retrieve_many(
        self, user_ids: Sequence[str], queries: Sequence[str], *, top_k: int | None = None
    ) -> list[list[RetrievalHit]]:
        if isinstance(user_ids, str):
            raise InvalidRequest("user_ids must be a list", field="user_ids")
        # The journal snapshot is taken before the store is read (see the module doc).
        snapshot: Mapping[str, list[JournalEntry]] = {
            uid: self.journal.pending_for_user(validate_user_id(uid), PENDING_SCAN)
            for uid in dict.fromkeys(user_ids)
        }
        all_hits = self.retriever.retrieve_many(user_ids, queries, top_k=top_k)
        k = self.default_top_k if top_k is None else top_k
        return [
            merge_pending(q, hits, snapshot[uid], top_k=k, max_pending=self.max_pending)
            for uid, q, hits in zip(user_ids, queries, all_hits)
        ]
