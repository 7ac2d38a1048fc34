"""Durable turn-pair journal: acknowledged pairs are committed durably, then flushed to the store.

- :class:`Journal` (a SQLite file: WAL, ``synchronous=FULL``) and :class:`PostgresJournal`
  (one database shared by every replica): one implementation, one schema
  (:mod:`memroute.journal.store`, :mod:`memroute.journal.schema`), one row per turn-pair id.
- :class:`TurnJournal`: the protocol the rest of the code types against.
- :class:`Flusher`: background batches to ``write_fn`` (``HybridRetriever.remember``);
  replays at start.
- :class:`JournaledRetriever`: the Router's retriever with read-your-writes over pending pairs.
- :class:`IdempotencyStore`: ``Idempotency-Key`` claims and first answers, in the same database.
"""

from __future__ import annotations

from memroute.journal.flusher import Flusher, FlusherStats
from memroute.journal.idempotency import IdempotencyConflict, IdempotencyStore
from memroute.journal.protocol import TurnJournal
from memroute.journal.read_your_writes import JournaledRetriever, merge_pending
from memroute.journal.records import JournalEntry, JournalError, JournalStats
from memroute.journal.store import Journal, PostgresJournal, open_journal

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
    "PostgresJournal",
    "TurnJournal",
    "merge_pending",
    "open_journal",
]
