"""Durable turn-pair journal: acknowledged pairs are fsync'd in SQLite, then flushed to the store.

- :class:`Journal` (SQLite, WAL, ``synchronous=FULL``): one row per turn-pair id.
- :class:`Flusher`: background batches to ``write_fn`` (``HybridRetriever.remember``);
  replays at start.
- :class:`JournaledRetriever`: the Router's retriever with read-your-writes over pending pairs.
- :func:`namespaced_user_id`: the (tenant, user) memory namespace as one store user id.
"""

from __future__ import annotations

from memroute.journal.config import JournalConfig, check_journal_config
from memroute.journal.flusher import Flusher, FlusherStats
from memroute.journal.namespace import namespaced_user_id
from memroute.journal.read_your_writes import JournaledRetriever, merge_pending
from memroute.journal.sqlite_journal import Journal, JournalEntry, JournalError, JournalStats

__all__ = [
    "Flusher",
    "FlusherStats",
    "Journal",
    "JournalConfig",
    "JournalEntry",
    "JournalError",
    "JournalStats",
    "JournaledRetriever",
    "check_journal_config",
    "merge_pending",
    "namespaced_user_id",
]
