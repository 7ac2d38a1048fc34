"""What the flusher, read-your-writes, erasure and the serving core need of a journal.

:class:`~memroute.journal.store.Journal` (SQLite) and
:class:`~memroute.journal.store.PostgresJournal` implement it; tests may pass fakes. ``shared``
says whether other processes hand out the same entries (a PostgreSQL journal every replica
appends to): its flushers then :meth:`~TurnJournal.claim` batches under a lease and poll,
since appends elsewhere wake nobody here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from memroute.journal.records import AuditEntry, JournalEntry, JournalErasure, JournalStats
from memroute.types import TurnPair


class TurnJournal(Protocol):
    """The journal protocol (module doc); semantics in :mod:`memroute.journal.store`."""

    path: Path | str
    shared: bool

    def append(self, pairs: Sequence[TurnPair]) -> list[int]: ...

    def claim(self, limit: int, *, owner: str, lease_s: float) -> list[JournalEntry]: ...

    def release(self, seqs: Iterable[int], *, owner: str) -> int: ...

    def mark_flushed(self, seqs: Iterable[int]) -> int: ...

    def mark_failed(self, seqs: Iterable[int], error: str) -> int: ...

    def pending(self, limit: int | None = None, *,
                max_seq: int | None = None) -> list[JournalEntry]: ...

    def pending_for_user(self, user_id: str, limit: int | None = None, *,
                         flushed_within_s: float = 0.0) -> list[JournalEntry]: ...

    def settled_seq(self, user_id: str, settled_s: float = 0.0, *,
                    writer: str | None = None) -> int: ...

    def pending_count(self) -> int: ...

    def last_seq(self) -> int: ...

    def stats(self) -> JournalStats: ...

    def store_gate(self, timeout_s: float | None = None) -> AbstractContextManager[None]: ...

    def erase_user(self, user_id: str, *, actor: str) -> JournalErasure: ...

    def erase_tenant(self, tenant: str, *, actor: str) -> JournalErasure: ...

    def finish_erasure(self, audit_id: int, *, store_rows: int,
                       idempotency_rows: int) -> None: ...

    def erased_among(self, entries: Sequence[JournalEntry]) -> list[JournalEntry]: ...

    def erasure_audit(self, limit: int = 100, *,
                      target: str | None = None) -> list[AuditEntry]: ...

    def add_listener(self, callback: Callable[[int], None]) -> None: ...

    def remove_listener(self, callback: Callable[[int], None]) -> None: ...

    def close(self) -> None: ...
