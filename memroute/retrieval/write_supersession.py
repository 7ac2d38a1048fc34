"""Supersession on the write path: which stored turn-pairs the pairs just written replace.

Change statements ("I changed my locker code, it's ER-6544 now") are matched against the
user's BM25 candidates (or, with rule 5's statement similarity, every memory), and new pairs
that restate a value an earlier update replaced are marked too (``restated_marks``). Rows are
marked in the store, never deleted; the user's cached BM25 copy is dropped, as it lacks the
marks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from memroute.memory.base import MemoryStore
from memroute.memory.meaning import StatementSimilarity
from memroute.memory.supersession import as_update, marks_for, restated_marks
from memroute.retrieval.bm25_cache import BM25Cache
from memroute.types import TurnPair

SUPERSEDE_POOL = 256  # BM25 candidates checked against each change statement


def mark_superseded(pairs: Sequence[TurnPair], bm25: BM25Cache, store: MemoryStore,
                    similar: StatementSimilarity | None) -> int:
    """Mark the stored pairs that ``pairs`` (just written) supersede, and new pairs that
    restate a value an earlier update replaced; returns how many. Change statements are
    checked against the user's BM25 candidates; other pairs only against the updates that
    superseded something, in a cached user."""
    by_user: dict[str, list[TurnPair]] = {}
    for p in pairs:
        by_user.setdefault(p.user_id, []).append(p)
    marked = 0
    for uid, news in by_user.items():
        updates = [p for p in news if as_update(p.user_text) is not None]
        # Restated old values are looked for only in a cached user (one just served): a
        # plain write never loads a user's whole history.
        entry = bm25.get(uid) if updates else bm25.peek(uid)
        if entry is None:
            continue
        # Candidates: the user's memories BM25 finds for each update (an older pair must
        # share most of its subject words), so a long history is not scanned whole; by
        # meaning (rule 5), every memory: its words may be none of the update's.
        if similar is not None:
            pool = dict(entry.memories)
        else:
            pool = {m.id: m for p in updates
                    for m, _ in entry.search(p.user_text, SUPERSEDE_POOL)}
            pool.update((p.id, entry.memories[p.id]) for p in updates
                        if p.id in entry.memories)
        marks = marks_for(updates, pool.values(), similar)
        if marks or any(m.superseded_by for m in entry.memories.values()):
            current = [replace(m, superseded_by=marks[m.id][0]) if m.id in marks else m
                       for m in entry.memories.values()]
            marks.update(restated_marks(news, current))
        if marks:
            marked += store.mark_superseded(uid, marks)  # type: ignore[attr-defined]
            bm25.invalidate(uid)  # the cached copies lack the marks
    return marked
