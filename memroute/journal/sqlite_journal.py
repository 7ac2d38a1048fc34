"""A durable, append-only journal of turn-pairs in SQLite (WAL, fsync on every commit).

A turn-pair is acknowledged to the caller only after :meth:`Journal.append` returns, and that
happens only after the transaction is committed with ``synchronous=FULL``: in WAL mode the
write-ahead log is fsync'd on every commit, so an acknowledged pair survives a crash or power
loss. The flusher (:mod:`memroute.journal.flusher`) later writes pending entries to the store
and marks them flushed.

One row per turn-pair id (``TurnPair.id`` is deterministic), so a retried request never
becomes a second memory:

- the same pair again (equal but for ``created_at``) is a no-op and returns the existing seq;
- the same id with different content replaces the entry with a new one (new seq, pending
  again), like an upsert in the store: last write wins.

``seq`` is AUTOINCREMENT so a seq is never reused: the flusher marks *the version it wrote*
flushed, and a replaced entry (new seq) stays pending even if the old seq is marked later.

Thread safety: one connection guarded by a lock. SQLite serializes writers anyway; a single
connection avoids ``SQLITE_BUSY`` between threads and leaves no per-thread connections behind.
Several processes may open the same file (WAL + busy timeout); their flushers would write the
same ids, which the store's deterministic ids make harmless.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memroute.journal.codec import check_pair, decode_pair, encode_pair, same_content
from memroute.journal.sqlite_setup import (
    PENDING,
    JournalError,
    open_journal_db,
    write_transaction,
)
from memroute.types import TurnPair, validate_user_id

log = logging.getLogger(__name__)

SEQ_CHUNK = 500  # seqs per UPDATE (SQLite's bound-parameter limit is 32766 since 3.32)


@dataclass(frozen=True)
class JournalEntry:
    seq: int
    pair: TurnPair
    appended_at: float
    error: str | None = None  # set on entries parked as failed


@dataclass(frozen=True)
class JournalStats:
    path: str
    total: int
    pending: int
    flushed: int
    failed: int
    last_seq: int
    oldest_pending_age_s: float | None  # None when nothing is pending


class Journal:
    def __init__(self, path: str | os.PathLike[str], *, clock: Callable[[], float] = time.time):
        self.path = Path(path).expanduser().resolve()
        self._clock = clock
        self._lock = threading.RLock()
        self._listeners: list[Callable[[int], None]] = []
        self._conn: sqlite3.Connection | None = open_journal_db(self.path)

    # ----------------------------------------------------------------- writes
    def append(self, pairs: Sequence[TurnPair]) -> list[int]:
        """Durably record ``pairs`` in one transaction; returns one seq per pair, in order.

        Every pair is checked before anything is written (:class:`InvalidRequest` on a bad
        one). When this returns, the pairs are on disk (fsync'd).
        """
        items = [check_pair(p, index=i) for i, p in enumerate(pairs)]
        if not items:
            return []
        now = self._clock()
        seqs: list[int] = []
        inserted = 0
        with self._write() as conn:
            for pair in items:
                row = conn.execute(
                    "SELECT seq, payload FROM entries WHERE pair_id = ?", (pair.id,)
                ).fetchone()
                if row is not None:
                    if same_content(self._decode(row[0], row[1]), pair):
                        seqs.append(row[0])
                        continue
                    conn.execute("DELETE FROM entries WHERE seq = ?", (row[0],))
                cur = conn.execute(
                    "INSERT INTO entries (pair_id, user_id, payload, appended_at) "
                    "VALUES (?, ?, ?, ?)",
                    (pair.id, pair.user_id, encode_pair(pair), now),
                )
                seqs.append(int(cur.lastrowid))
                inserted += 1
        if inserted:
            self._notify(inserted)
        return seqs

    def mark_flushed(self, seqs: Iterable[int]) -> int:
        """Mark pending entries written to the store; returns how many were still pending."""
        return self._mark(seqs, "flushed_at = ?", (self._clock(),))

    def mark_failed(self, seqs: Iterable[int], error: str) -> int:
        """Park entries the store refuses for good, so they stop blocking the queue."""
        return self._mark(seqs, "failed_at = ?, error = ?", (self._clock(), error[:2000]))

    def _mark(self, seqs: Iterable[int], assign: str, values: tuple[Any, ...]) -> int:
        wanted = [int(s) for s in seqs]
        changed = 0
        with self._write() as conn:
            for start in range(0, len(wanted), SEQ_CHUNK):
                chunk = wanted[start : start + SEQ_CHUNK]
                marks = ",".join("?" * len(chunk))
                cur = conn.execute(
                    f"UPDATE entries SET {assign} WHERE {PENDING} AND seq IN ({marks})",
                    (*values, *chunk),
                )
                changed += cur.rowcount
        return changed

    def requeue_failed(self) -> int:
        """Make parked entries pending again (after the cause was fixed); returns how many."""
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE entries SET failed_at = NULL, error = NULL "
                "WHERE failed_at IS NOT NULL AND flushed_at IS NULL"
            )
            changed = cur.rowcount
        if changed:
            self._notify(changed)
        return changed

    def prune_flushed(self, older_than_s: float) -> int:
        """Delete entries flushed more than ``older_than_s`` ago (they live in the store now).

        A pair re-appended after its entry was pruned is journaled and flushed again, which
        rewrites the same store id: still one memory.
        """
        with self._write() as conn:
            cur = conn.execute(
                "DELETE FROM entries WHERE flushed_at IS NOT NULL AND flushed_at < ?",
                (self._clock() - older_than_s,),
            )
            return cur.rowcount

    # ------------------------------------------------------------------ reads
    def pending(
        self, limit: int | None = None, *, max_seq: int | None = None
    ) -> list[JournalEntry]:
        """Unflushed entries, oldest first (at most ``limit``; only seq <= ``max_seq``)."""
        sql = f"SELECT seq, payload, appended_at FROM entries WHERE {PENDING}"
        args: list[Any] = []
        if max_seq is not None:
            sql += " AND seq <= ?"
            args.append(int(max_seq))
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(_check_limit(limit))
        return [JournalEntry(s, self._decode(s, p), a) for s, p, a in self._read(sql, args)]

    def pending_for_user(self, user_id: str, limit: int | None = None) -> list[JournalEntry]:
        """A user's unflushed entries, oldest first; with ``limit`` only the newest ``limit``."""
        validate_user_id(user_id)
        sql = f"SELECT seq, payload, appended_at FROM entries WHERE {PENDING} AND user_id = ?"
        args: list[Any] = [user_id]
        sql += " ORDER BY seq DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(_check_limit(limit))
        rows = self._read(sql, args)
        return [JournalEntry(s, self._decode(s, p), a) for s, p, a in reversed(rows)]

    def failed(self, limit: int = 100) -> list[JournalEntry]:
        """Entries parked by :meth:`mark_failed`, oldest first, with their error."""
        rows = self._read(
            "SELECT seq, payload, appended_at, error FROM entries "
            "WHERE failed_at IS NOT NULL ORDER BY seq LIMIT ?",
            [_check_limit(limit)],
        )
        return [JournalEntry(s, self._decode(s, p), a, e) for s, p, a, e in rows]

    def pending_count(self) -> int:
        return int(self._read(f"SELECT count(*) FROM entries WHERE {PENDING}", [])[0][0])

    def last_seq(self) -> int:
        return int(self._read("SELECT coalesce(max(seq), 0) FROM entries", [])[0][0])

    def stats(self) -> JournalStats:
        total, flushed, failed, last, oldest = self._read(
            "SELECT count(*), count(flushed_at), count(failed_at), coalesce(max(seq), 0), "
            f"(SELECT min(appended_at) FROM entries WHERE {PENDING}) FROM entries",
            [],
        )[0]
        return JournalStats(
            path=str(self.path),
            total=int(total),
            pending=int(total) - int(flushed) - int(failed),
            flushed=int(flushed),
            failed=int(failed),
            last_seq=int(last),
            oldest_pending_age_s=None if oldest is None else max(0.0, self._clock() - oldest),
        )

    # ---------------------------------------------------------------- wake-up
    def add_listener(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(n_new_entries)`` after each append that recorded something new."""
        with self._lock:
            self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[int], None]) -> None:
        with self._lock:
            if callback in self._listeners:
                self._listeners.remove(callback)

    def _notify(self, n: int) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for callback in listeners:
            try:
                callback(n)
            except Exception:  # the append is durable already; a wake-up must not undo the ack
                log.exception("journal listener %r failed", callback)

    # -------------------------------------------------------------- internals
    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock, write_transaction(self._connection(), self.path) as conn:
            yield conn

    def _read(self, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._lock:
            conn = self._connection()
            try:
                return conn.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise JournalError(f"journal {self.path}: read failed: {exc}") from exc

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise JournalError(f"journal {self.path} is closed")
        return self._conn

    def _decode(self, seq: int, payload: str) -> TurnPair:
        try:
            return decode_pair(payload)
        except (ValueError, TypeError) as exc:
            raise JournalError(
                f"journal {self.path}: entry seq={seq} is unreadable: {exc}"
            ) from exc

    # -------------------------------------------------------------- lifecycle
    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @property
    def closed(self) -> bool:
        return self._conn is None

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive integer, got {limit!r}")
    return limit

