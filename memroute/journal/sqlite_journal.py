"""A durable, append-only journal of turn-pairs in SQLite (WAL, fsync on every commit).

A turn-pair is acknowledged to the caller only after :meth:`Journal.append` returns, and that
happens only after the transaction is committed with ``synchronous=FULL``: in WAL mode the
write-ahead log is fsync'd on every commit, so an acknowledged pair survives a crash or power
loss. The flusher (:mod:`memroute.journal.flusher`) later writes pending entries to the store
and marks them flushed.

One row per turn-pair id (``TurnPair.id`` is deterministic), so a retried request never
becomes a second memory: the same pair again (equal but for ``created_at``) is a no-op that
returns the existing seq; the same id with different content replaces the entry with a new one
(new seq, pending again), like an upsert in the store: last write wins. ``seq`` is
AUTOINCREMENT, so a seq is never reused: the flusher marks *the version it wrote* flushed, and a
replaced entry (new seq) stays pending even if the old seq is marked later.

Erasure (GDPR Art. 17 / CCPA; :meth:`Journal.erase_user`, :meth:`Journal.erase_tenant`). The
rule that keeps erased data from coming back: **an erasure has a boundary seq B, the highest seq
ever allocated when it commits; an entry of the erased user (or of any user of the erased
tenant) with seq <= B is erased data, an entry with seq > B is new data.** One fsync'd
transaction writes the tombstone ``erasures(scope, target, seq=B)``, deletes every entry of the
target (pending, flushed or parked) and inserts the ``erasure_audit`` row. Appends are
serialized with it by SQLite's write lock, so each pair is either deleted by it (seq <= B) or
appended after it (seq > B, kept: a request that was in flight during the erasure and answered
afterwards is new data, as is a client re-sending an erased pair). Reads of pending entries
(:meth:`pending`, :meth:`pending_for_user`) never return an entry at or below its user's or its
tenant's tombstone, so neither the flusher nor read-your-writes can hand one out.

What the journal cannot see is a batch the flusher has already read and is writing to the store.
:meth:`store_gate` closes that gap: the flusher holds it from reading a batch to marking it
flushed, and an erasure holds it from the tombstone through the store delete
(:func:`memroute.serving.erasure.erase_user`). So every batch either reached the store before
the tombstone (the store delete that follows removes it) or is read after it (it cannot contain
erased entries), and new data (seq > B) reaches the store only after the store delete, so the
erasure never deletes it. The gate is per process; a flusher in another process on the same file
re-checks with :meth:`erased_among` after writing (see :mod:`memroute.journal.flusher`).

Thread safety: one connection guarded by a lock. SQLite serializes writers anyway; a single
connection avoids ``SQLITE_BUSY`` between threads and leaves no per-thread connections behind.
Several processes may open the same file (WAL + busy timeout); their flushers would write the
same ids, which the store's deterministic ids make harmless.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memroute.errors import InvalidRequest
from memroute.journal.codec import check_pair, decode_pair, encode_pair, same_content
from memroute.journal.listeners import ListenersMixin
from memroute.journal.sqlite_setup import (
    NOT_ERASED,
    PENDING,
    JournalError,
    open_journal_db,
    write_transaction,
)
from memroute.namespace import SEPARATOR, validate_tenant
from memroute.types import TurnPair, validate_user_id

SEQ_CHUNK = 500  # seqs per UPDATE (SQLite's bound-parameter limit is 32766 since 3.32)
MAX_ACTOR_CHARS = 256
GATE_TIMEOUT_S = 120.0  # an erasure waits this long at most for the flusher's batch in flight


@dataclass(frozen=True)
class JournalEntry:
    seq: int
    pair: TurnPair
    appended_at: float
    error: str | None = None  # set on entries parked as failed


@dataclass(frozen=True)
class JournalErasure:
    """What :meth:`Journal.erase_user` / :meth:`Journal.erase_tenant` did."""

    audit_id: int
    scope: str
    target: str
    boundary_seq: int  # entries of the target with seq <= this are erased data
    journal_rows: int
    at: float


@dataclass(frozen=True)
class AuditEntry:
    """One ``erasure_audit`` row: who erased what, when, and how many rows (no content).
    ``store_rows`` / ``idempotency_rows`` / ``completed_at`` are None while (or if) the erasure
    did not finish; re-running it completes the job."""

    id: int
    at: float
    actor: str
    scope: str
    target: str
    boundary_seq: int
    store_rows: int | None
    journal_rows: int
    idempotency_rows: int | None
    completed_at: float | None


@dataclass(frozen=True)
class JournalStats:
    path: str
    total: int
    pending: int
    flushed: int
    failed: int
    last_seq: int
    oldest_pending_age_s: float | None  # None when nothing is pending


def erased_entries(entries: Sequence[JournalEntry], alive: set[int],
                   erasure_seq: Callable[[str], int | None]) -> list[JournalEntry]:
    """Of ``entries``, those not ``alive`` (not in the journal as pending and unerased) that
    an erasure covers: at or below their user's (or tenant's) boundary seq. Both journals'
    ``erased_among``."""
    bounds: dict[str, int | None] = {}
    out = []
    for e in entries:
        if e.seq in alive:
            continue
        uid = e.pair.user_id
        if uid not in bounds:
            bounds[uid] = erasure_seq(uid)
        if (b := bounds[uid]) is not None and e.seq <= b:
            out.append(e)
    return out


class Journal(ListenersMixin):
    def __init__(self, path: str | os.PathLike[str], *, clock: Callable[[], float] = time.time):
        self.path = Path(path).expanduser().resolve()
        self._clock = clock
        self._lock = threading.RLock()
        super().__init__()  # the listeners
        self._store_gate = threading.RLock()  # see store_gate()
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
            changed = conn.execute(
                "UPDATE entries SET failed_at = NULL, error = NULL "
                "WHERE failed_at IS NOT NULL AND flushed_at IS NULL"
            ).rowcount
        if changed:
            self._notify(changed)
        return changed

    def prune_flushed(self, older_than_s: float) -> int:
        """Delete entries flushed more than ``older_than_s`` ago (they live in the store now).

        A pair re-appended after its entry was pruned is journaled and flushed again, which
        rewrites the same store id: still one memory.
        """
        with self._write() as conn:
            return conn.execute(
                "DELETE FROM entries WHERE flushed_at IS NOT NULL AND flushed_at < ?",
                (self._clock() - older_than_s,),
            ).rowcount

    # ---------------------------------------------------------------- erasure
    @contextlib.contextmanager
    def store_gate(self, timeout_s: float | None = None) -> Iterator[None]:
        """Held by the flusher while it writes a batch (read -> store write -> mark) and by an
        erasure from its tombstone through the store delete; reentrant. JournalError when not
        acquired within ``timeout_s`` (a store write hanging on a store that is down)."""
        if not self._store_gate.acquire(timeout=-1 if timeout_s is None else timeout_s):
            raise JournalError(
                f"journal {self.path}: a store write did not finish within {timeout_s} s; "
                "the erasure did not start (retry it)"
            )
        try:
            yield
        finally:
            self._store_gate.release()

    def erase_user(self, user_id: str, *, actor: str) -> JournalErasure:
        """Tombstone ``user_id`` and delete all its entries, with an audit row, in one fsync'd
        transaction (see the module doc for the rule). Idempotent: again, it deletes 0 rows."""
        uid = validate_user_id(user_id)
        return self._erase("user", uid, "user_id = ?", (uid,), actor)

    def erase_tenant(self, tenant: str, *, actor: str) -> JournalErasure:
        """:meth:`erase_user` for every user of ``tenant`` (ids ``tenant:...``) at once."""
        validate_tenant(tenant)
        prefix = f"{tenant}{SEPARATOR}"
        return self._erase(
            "tenant", tenant, "substr(user_id, 1, ?) = ?", (len(prefix), prefix), actor
        )

    def _erase(self, scope: str, target: str, where: str, args: tuple[Any, ...],
               actor: str) -> JournalErasure:
        actor = _check_actor(actor)
        now = self._clock()
        with self.store_gate(GATE_TIMEOUT_S), self._write() as conn:
            row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'entries'").fetchone()
            boundary = int(row[0]) if row else 0  # AUTOINCREMENT: covers deleted seqs too
            conn.execute(
                "INSERT INTO erasures (scope, target, seq, at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (scope, target) DO UPDATE SET seq = max(seq, excluded.seq), "
                "at = excluded.at",
                (scope, target, boundary, now),
            )
            deleted = conn.execute(f"DELETE FROM entries WHERE {where}", args).rowcount
            cur = conn.execute(
                "INSERT INTO erasure_audit (at, actor, scope, target, boundary_seq, journal_rows) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (now, actor, scope, target, boundary, deleted),
            )
            audit_id = int(cur.lastrowid)
        return JournalErasure(audit_id, scope, target, boundary, int(deleted), now)

    def finish_erasure(self, audit_id: int, *, store_rows: int, idempotency_rows: int) -> None:
        """Complete an audit row once the other stores are erased too."""
        with self._write() as conn:
            conn.execute(
                "UPDATE erasure_audit SET store_rows = ?, idempotency_rows = ?, completed_at = ? "
                "WHERE id = ?",
                (int(store_rows), int(idempotency_rows), self._clock(), int(audit_id)),
            )

    def erasure_seq(self, user_id: str) -> int | None:
        """The boundary seq that applies to ``user_id`` (its own or its tenant's tombstone,
        the higher one); None if it was never erased."""
        uid = validate_user_id(user_id)
        tenant = uid.partition(SEPARATOR)[0] if SEPARATOR in uid else None
        rows = self._read(
            "SELECT max(seq) FROM erasures WHERE (scope = 'user' AND target = ?) "
            "OR (scope = 'tenant' AND target = ?)",
            [uid, tenant],
        )
        return None if rows[0][0] is None else int(rows[0][0])

    def erased_among(self, entries: Sequence[JournalEntry]) -> list[JournalEntry]:
        """The entries (as read earlier) that an erasure since then covers: seq <= a tombstone
        of their user or tenant (the flusher's check after a store write). One query when none
        is gone; entries gone for another reason (replaced by a newer version) do not count."""
        seqs = [e.seq for e in entries]
        alive: set[int] = set()
        for start in range(0, len(seqs), SEQ_CHUNK):
            chunk = seqs[start : start + SEQ_CHUNK]
            rows = self._read(
                f"SELECT seq FROM entries WHERE seq IN ({','.join('?' * len(chunk))}) "
                f"AND {NOT_ERASED}",
                chunk,
            )
            alive.update(int(r[0]) for r in rows)
        return erased_entries(entries, alive, self.erasure_seq)

    def erasure_audit(self, limit: int = 100, *, target: str | None = None) -> list[AuditEntry]:
        """The newest ``limit`` audit rows (of one ``target``: a user id or a tenant), newest first."""
        sql = (
            "SELECT id, at, actor, scope, target, boundary_seq, store_rows, journal_rows, "
            "idempotency_rows, completed_at FROM erasure_audit"
        )
        args: list[Any] = []
        if target is not None:
            sql += " WHERE target = ?"
            args.append(target)
        sql += " ORDER BY id DESC LIMIT ?"
        args.append(_check_limit(limit))
        return [AuditEntry(*row) for row in self._read(sql, args)]

    # ------------------------------------------------------------------ reads
    def pending(
        self, limit: int | None = None, *, max_seq: int | None = None
    ) -> list[JournalEntry]:
        """Unflushed entries, oldest first (at most ``limit``; only seq <= ``max_seq``)."""
        sql = f"SELECT seq, payload, appended_at FROM entries WHERE {PENDING} AND {NOT_ERASED}"
        args: list[Any] = []
        if max_seq is not None:
            sql += " AND seq <= ?"
            args.append(int(max_seq))
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(_check_limit(limit))
        return [JournalEntry(s, self._decode(s, p), a) for s, p, a in self._read(sql, args)]

    def pending_for_user(self, user_id: str, limit: int | None = None, *,
                         flushed_within_s: float = 0.0) -> list[JournalEntry]:
        """A user's unflushed entries, oldest first; with ``limit`` only the newest ``limit``;
        with ``flushed_within_s`` also those flushed that recently (not yet visible everywhere)."""
        validate_user_id(user_id)
        # the plain pending read stays on its partial index; the recent ones need flushed_at
        recent = _wants_recent(flushed_within_s)
        which = f"({PENDING} OR flushed_at >= ?)" if recent else PENDING
        sql = ("SELECT seq, payload, appended_at FROM entries "
               f"WHERE {which} AND user_id = ? AND {NOT_ERASED} ORDER BY seq DESC")
        args: list[Any] = [self._clock() - flushed_within_s, user_id] if recent else [user_id]
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


def _check_actor(actor: object) -> str:
    if (not isinstance(actor, str) or not actor.strip() or len(actor) > MAX_ACTOR_CHARS
            or not actor.isprintable()):
        raise InvalidRequest(f"actor must be printable text of 1-{MAX_ACTOR_CHARS} characters",
                             field="actor")
    return actor


def _wants_recent(within_s: object) -> bool:
    """Whether recently flushed entries are asked for (``flushed_within_s`` > 0), checked."""
    if isinstance(within_s, bool) or not isinstance(within_s, (int, float)) or within_s < 0:
        raise ValueError(f"flushed_within_s must be a number of seconds >= 0, got {within_s!r}")
    return within_s > 0


def _check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive integer, got {limit!r}")
    return limit

