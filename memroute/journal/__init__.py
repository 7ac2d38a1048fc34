"""Durable turn-pair journal: acknowledged pairs are fsync'd in SQLite, then flushed to the store.

- :class:`Journal` (SQLite, WAL, ``synchronous=FULL``): one row per turn-pair id.
- :class:`Flusher`: background batches to ``write_fn`` (``HybridRetriever.remember``);
  replays at start.
- :class:`JournaledRetriever`: the Router's retriever with read-your-writes over pending pairs.
- :class:`IdempotencyStore`: ``Idempotency-Key`` claims and first answers, in the same file.
"""

from __future__ import annotations

from memroute.journal.flusher import Flusher, FlusherStats
from memroute.journal.idempotency import IdempotencyConflict, IdempotencyStore
from memroute.journal.read_your_writes import JournaledRetriever, merge_pending
from memroute.journal.sqlite_journal import Journal, JournalEntry, JournalError, JournalStats

__all__ = [
    "Flusher",
    "FlusherStats",
    "IdempotencyConflict",
    "IdempotencyStore",
    "Journal",
    "JournalEntry",
    "JournalError",
    "JournalStats",
    "JournaledRetriever",
    "merge_pending",
]
