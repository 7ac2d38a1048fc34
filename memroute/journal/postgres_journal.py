""":class:`PostgresJournal`, the turn-pair journal on PostgreSQL: one journal shared by every
ingress replica, so a replaced pod loses nothing (an acknowledged pair is in the shared
database, not on the pod's disk).

It has the public methods and semantics of the embedded SQLite
:class:`~memroute.journal.sqlite_journal.Journal` (same names, same return types, the same
dataclasses), plus :meth:`PostgresJournal.claim` / :meth:`PostgresJournal.release` for several
flushers on one journal. Engines and URLs are the fact store's (``postgresql://`` = psycopg 3).
The rules (durability, one row per pair id, seqs, claims, and the erasure boundary against
appends on other replicas) are in docs/ARCHITECTURE.md, "The journal on PostgreSQL"; the
tables and lock keys in :mod:`memroute.journal.postgres_schema`.

Thread safety: a pooled engine; every method is one transaction (or one autocommit read) on a
connection of its own, so threads do not share a connection. Deadlocks PostgreSQL detects
between concurrent write transactions (row locks taken in different orders) are retried.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Self, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memroute.config.facts import facts_backend
from memroute.errors import ConfigError
from memroute.journal.codec import check_pair, decode_pair, encode_pair, same_content
from memroute.journal.listeners import ListenersMixin
from memroute.journal.postgres_schema import (
    DEADLOCK_RETRIES,
    NOT_ERASED,
    NOW,
    PENDING,
    POOL_SIZE,
    RETRY_SQLSTATES,
    check_lease,
    check_owner,
    check_schema,
    create_schema,
    erase_rows,
    erasure_lock_keys,
    seq_list,
)
from memroute.journal.sqlite_journal import (
    GATE_TIMEOUT_S,
    AuditEntry,
    JournalEntry,
    JournalErasure,
    JournalStats,
    _check_actor,
    _check_limit,
    _wants_recent,
    erased_entries,
)
from memroute.journal.sqlite_setup import JournalError
from memroute.memory.facts.schema import engine_url, open_engine
from memroute.namespace import SEPARATOR, validate_tenant
from memroute.types import TurnPair, validate_user_id

log = logging.getLogger(__name__)

T = TypeVar("T")


class PostgresJournal(ListenersMixin):
    """The journal in a PostgreSQL database shared by every replica (see the module doc)."""

    def __init__(
        self, url: str, *, clock: Callable[[], float] = time.time, pool_size: int = POOL_SIZE
    ) -> None:
        if facts_backend(url, field="journal.url") != "postgresql":
            raise ConfigError("the PostgreSQL journal needs a postgresql:// URL",
                              field="journal.url")
        # Shown in errors, stats and JournalConfig.path (the flusher's check): no password.
        self.path = sa.engine.make_url(engine_url(url, "postgresql")).render_as_string(
            hide_password=True)
        self._clock = clock
        self._lock = threading.RLock()
        super().__init__()  # the listeners
        self._store_gate = threading.RLock()  # see store_gate()
        self._closed = False
        self._engine = open_engine(url, "postgresql", busy_timeout_s=0.0, pool_size=pool_size)
        # Reads are single statements: autocommit, no BEGIN / COMMIT round trips.
        self._reader = self._engine.execution_options(isolation_level="AUTOCOMMIT")
        try:
            check_schema(*self._transact("open the journal", create_schema), self.path)
        except BaseException:
            self._engine.dispose()
            raise

    # ----------------------------------------------------------------- writes
    def append(self, pairs: Sequence[TurnPair]) -> list[int]:
        """Durably record ``pairs`` in one transaction; returns one seq per pair, in order.

        Every pair is checked before anything is written (:class:`InvalidRequest` on a bad
        one). When this returns, the transaction is committed (WAL flushed on the server).
        """
        items = [check_pair(p, index=i) for i, p in enumerate(pairs)]
        if not items:
            return []
        now = self._clock()
        keys = erasure_lock_keys({p.user_id for p in items})

        def write(conn: Connection) -> tuple[list[int], int]:
            for key in keys:  # an erasure of any of these users / tenants waits, or we do
                conn.execute(sa.text("SELECT pg_advisory_xact_lock_shared(:k)"), {"k": key})
            seqs: list[int] = []
            inserted = 0
            for pair in items:
                seq, new = self._append_one(conn, pair, now)
                seqs.append(seq)
                inserted += new
            return seqs, inserted

        seqs, inserted = self._transact("append", write)
        if inserted:
            self._notify(inserted)
        return seqs

    def _append_one(self, conn: Connection, pair: TurnPair, now: float) -> tuple[int, bool]:
        payload = encode_pair(pair)
        row_args = {"pid": pair.id, "uid": pair.user_id, "payload": payload, "now": now}
        while True:  # twice at most, unless prunes keep deleting the row we found
            # The existing row first (a retry is the common conflict): a no-op allocates no seq.
            row = conn.execute(sa.text(
                "SELECT seq, payload FROM journal_entries WHERE pair_id = :pid FOR UPDATE"),
                {"pid": pair.id}).first()
            if row is None:
                # Another replica may insert the same id meanwhile: ON CONFLICT waits for its
                # commit and inserts nothing; the loop then reads its row.
                seq = conn.execute(sa.text(
                    "INSERT INTO journal_entries (pair_id, user_id, payload, appended_at) "
                    "VALUES (:pid, :uid, :payload, :now) ON CONFLICT (pair_id) DO NOTHING "
                    "RETURNING seq"), row_args).scalar()
                if seq is not None:
                    return int(seq), True
                continue
            if same_content(self._decode(row[0], row[1]), pair):
                return int(row[0]), False
            # Replaced: a new seq, pending again. A live claim of the old version stays on the
            # row (claimed_seq names the version being written) so the new version is
            # written after it, not beside it; mark_flushed/mark_failed of it releases it.
            seq = conn.execute(sa.text(
                "UPDATE journal_entries SET seq = DEFAULT, user_id = :uid, payload = :payload, "
                "appended_at = :now, flushed_at = NULL, failed_at = NULL, error = NULL "
                "WHERE pair_id = :pid RETURNING seq"), row_args).scalar_one()
            return int(seq), True

    def claim(self, limit: int, *, owner: str, lease_s: float) -> list[JournalEntry]:
        """Take up to ``limit`` pending entries no live lease holds (or ``owner``'s own), oldest
        first, leased to ``owner`` for ``lease_s`` seconds of the server's clock. Until then or
        until they are marked flushed/failed no other claimer gets them."""
        limit = _check_limit(limit)
        owner = check_owner(owner)
        lease_s = check_lease(lease_s)
        sql = sa.text(
            "WITH c AS (SELECT seq FROM journal_entries "
            f"WHERE {PENDING} AND (lease_until IS NULL OR lease_until <= {NOW} "
            "OR claimed_by = :owner) "
            f"AND {NOT_ERASED} ORDER BY seq LIMIT :limit FOR UPDATE OF journal_entries SKIP LOCKED) "
            f"UPDATE journal_entries e SET claimed_by = :owner, lease_until = {NOW} + :lease, "
            "claimed_seq = e.seq FROM c WHERE e.seq = c.seq "
            "RETURNING e.seq, e.payload, e.appended_at"
        )
        rows = self._transact("claim entries", lambda conn: conn.execute(
            sql, {"owner": owner, "limit": limit, "lease": lease_s}).all())
        return [JournalEntry(s, self._decode(s, p), a) for s, p, a in sorted(rows)]

    def release(self, seqs: Iterable[int], *, owner: str) -> int:
        """Give ``owner``'s claims of ``seqs`` back unwritten (a flusher stopping); returns how
        many it held."""
        owner = check_owner(owner)
        wanted = seq_list(seqs)
        if not wanted:
            return 0
        return self._transact("release claims", lambda conn: conn.execute(sa.text(
            "UPDATE journal_entries SET claimed_by = NULL, lease_until = NULL, "
            "claimed_seq = NULL WHERE claimed_by = :owner "
            "AND claimed_seq = ANY(CAST(:seqs AS bigint[]))"),
            {"owner": owner, "seqs": wanted}).rowcount)

    def mark_flushed(self, seqs: Iterable[int]) -> int:
        """Mark pending entries written to the store; returns how many were still pending."""
        return self._mark(seqs, "flushed_at = :now", {"now": self._clock()})

    def mark_failed(self, seqs: Iterable[int], error: str) -> int:
        """Park entries the store refuses for good, so they stop blocking the queue."""
        text = error[:2000].replace("\x00", "\ufffd")  # PostgreSQL text holds no NUL
        return self._mark(seqs, "failed_at = :now, error = :error",
                          {"now": self._clock(), "error": text})

    def _mark(self, seqs: Iterable[int], assign: str, values: dict[str, Any]) -> int:
        wanted = seq_list(seqs)
        if not wanted:
            return 0

        def mark(conn: Connection) -> int:
            changed = conn.execute(sa.text(
                f"UPDATE journal_entries SET {assign}, claimed_by = NULL, lease_until = NULL, "
                f"claimed_seq = NULL WHERE {PENDING} AND seq = ANY(CAST(:seqs AS bigint[]))"),
                {**values, "seqs": wanted}).rowcount
            # Versions that replaced one of these while it was being written: now claimable.
            conn.execute(sa.text(
                "UPDATE journal_entries SET claimed_by = NULL, lease_until = NULL, "
                "claimed_seq = NULL WHERE claimed_seq = ANY(CAST(:seqs AS bigint[])) "
                "AND seq <> claimed_seq"), {"seqs": wanted})
            return int(changed)

        return self._transact("mark entries", mark)

    def requeue_failed(self) -> int:
        """Make parked entries pending again (after the cause was fixed); returns how many."""
        changed = self._transact("requeue failed entries", lambda conn: conn.execute(sa.text(
            "UPDATE journal_entries SET failed_at = NULL, error = NULL, claimed_by = NULL, "
            "lease_until = NULL, claimed_seq = NULL "
            "WHERE failed_at IS NOT NULL AND flushed_at IS NULL")).rowcount)
        if changed:
            self._notify(changed)
        return int(changed)

    def prune_flushed(self, older_than_s: float) -> int:
        """Delete entries flushed more than ``older_than_s`` ago (they live in the store now).

        A pair re-appended after its entry was pruned is journaled and flushed again, which
        rewrites the same store id: still one memory.
        """
        cutoff = self._clock() - older_than_s
        return int(self._transact("prune flushed entries", lambda conn: conn.execute(sa.text(
            "DELETE FROM journal_entries WHERE flushed_at IS NOT NULL AND flushed_at < :cutoff"),
            {"cutoff": cutoff}).rowcount))

    # ---------------------------------------------------------------- erasure
    @contextlib.contextmanager
    def store_gate(self, timeout_s: float | None = None) -> Iterator[None]:
        """Held by this process's flusher while it writes a batch and by an erasure run in
        this process from its tombstone through the store delete; reentrant. Per process only:
        a flusher on another replica is covered by :meth:`erased_among` (module doc).
        JournalError when not acquired within ``timeout_s``."""
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
        """Tombstone ``user_id`` and delete all its entries, with an audit row, in one
        transaction (see the module doc for the rule). Idempotent: again, it deletes 0 rows."""
        uid = validate_user_id(user_id)
        return self._erase("user", uid, "user_id = :uid", {"uid": uid}, actor)

    def erase_tenant(self, tenant: str, *, actor: str) -> JournalErasure:
        """:meth:`erase_user` for every user of ``tenant`` (ids ``tenant:...``) at once."""
        validate_tenant(tenant)
        prefix = f"{tenant}{SEPARATOR}"
        upper = f"{tenant}{chr(ord(SEPARATOR) + 1)}"  # 'acme;': the first id after 'acme:*'
        # the range is an index scan (C collation); the substr test keeps it exact regardless
        return self._erase(
            "tenant", tenant,
            "user_id >= :lo AND user_id < :hi AND substr(user_id, 1, :n) = :lo",
            {"lo": prefix, "hi": upper, "n": len(prefix)}, actor,
        )

    def _erase(self, scope: str, target: str, where: str, args: dict[str, Any],
               actor: str) -> JournalErasure:
        actor = _check_actor(actor)
        now = self._clock()
        with self.store_gate(GATE_TIMEOUT_S):
            audit_id, boundary, deleted = self._transact(
                f"erase {scope}", lambda conn: erase_rows(conn, scope, target, where, args,
                                                          actor=actor, now=now))
        return JournalErasure(audit_id, scope, target, boundary, deleted, now)

    def finish_erasure(self, audit_id: int, *, store_rows: int, idempotency_rows: int) -> None:
        """Complete an audit row once the other stores are erased too."""
        values = {"store": int(store_rows), "idem": int(idempotency_rows), "at": self._clock(),
                  "id": int(audit_id)}
        self._transact("finish the erasure", lambda conn: conn.execute(sa.text(
            "UPDATE journal_erasure_audit SET store_rows = :store, idempotency_rows = :idem, "
            "completed_at = :at WHERE id = :id"), values))

    def erasure_seq(self, user_id: str) -> int | None:
        """The boundary seq that applies to ``user_id`` (its own or its tenant's tombstone,
        the higher one); None if it was never erased."""
        uid = validate_user_id(user_id)
        tenant = uid.partition(SEPARATOR)[0] if SEPARATOR in uid else None
        rows = self._read(
            "SELECT max(seq) FROM journal_erasures WHERE (scope = 'user' AND target = :uid) "
            "OR (scope = 'tenant' AND target = :tenant)",
            {"uid": uid, "tenant": tenant},
        )
        return None if rows[0][0] is None else int(rows[0][0])

    def erased_among(self, entries: Sequence[JournalEntry]) -> list[JournalEntry]:
        """The entries (as read or claimed earlier) that an erasure since then covers: seq <= a
        tombstone of their user or tenant (the flusher's check after a store write). One query
        when none is gone; entries gone for another reason (replaced, pruned) do not count."""
        if not entries:
            return []
        rows = self._read(
            "SELECT seq FROM journal_entries WHERE seq = ANY(CAST(:seqs AS bigint[])) "
            f"AND {NOT_ERASED}",
            {"seqs": [e.seq for e in entries]},
        )
        alive = {int(r[0]) for r in rows}
        return erased_entries(entries, alive, self.erasure_seq)

    def erasure_audit(self, limit: int = 100, *, target: str | None = None) -> list[AuditEntry]:
        """The newest ``limit`` audit rows (of one ``target``: a user id or a tenant), newest first."""
        sql = (
            "SELECT id, at, actor, scope, target, boundary_seq, store_rows, journal_rows, "
            "idempotency_rows, completed_at FROM journal_erasure_audit"
        )
        args: dict[str, Any] = {"limit": _check_limit(limit)}
        if target is not None:
            sql += " WHERE target = :target"
            args["target"] = target
        sql += " ORDER BY id DESC LIMIT :limit"
        return [AuditEntry(*row) for row in self._read(sql, args)]

    # ------------------------------------------------------------------ reads
    def pending(
        self, limit: int | None = None, *, max_seq: int | None = None
    ) -> list[JournalEntry]:
        """Unflushed entries, oldest first (at most ``limit``; only seq <= ``max_seq``), claimed
        or not (what read-your-writes needs; flushers on several replicas use :meth:`claim`)."""
        sql = (f"SELECT seq, payload, appended_at FROM journal_entries "
               f"WHERE {PENDING} AND {NOT_ERASED}")
        args: dict[str, Any] = {}
        if max_seq is not None:
            sql += " AND seq <= :max_seq"
            args["max_seq"] = int(max_seq)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT :limit"
            args["limit"] = _check_limit(limit)
        return [JournalEntry(s, self._decode(s, p), a) for s, p, a in self._read(sql, args)]

    def pending_for_user(self, user_id: str, limit: int | None = None, *,
                         flushed_within_s: float = 0.0) -> list[JournalEntry]:
        """A user's unflushed entries, oldest first; with ``limit`` only the newest ``limit``;
        with ``flushed_within_s`` also those flushed that recently (not yet visible everywhere)."""
        validate_user_id(user_id)
        # the plain pending read stays on its partial index; the recent ones need flushed_at
        which = (f"({PENDING} OR flushed_at >= :since)" if _wants_recent(flushed_within_s)
                 else PENDING)
        sql = ("SELECT seq, payload, appended_at FROM journal_entries "
               f"WHERE {which} AND user_id = :uid AND {NOT_ERASED} ORDER BY seq DESC")
        args: dict[str, Any] = {"uid": user_id, "since": self._clock() - flushed_within_s}
        if limit is not None:
            sql += " LIMIT :limit"
            args["limit"] = _check_limit(limit)
        rows = self._read(sql, args)
        return [JournalEntry(s, self._decode(s, p), a) for s, p, a in reversed(rows)]

    def failed(self, limit: int = 100) -> list[JournalEntry]:
        """Entries parked by :meth:`mark_failed`, oldest first, with their error."""
        rows = self._read(
            "SELECT seq, payload, appended_at, error FROM journal_entries "
            "WHERE failed_at IS NOT NULL ORDER BY seq LIMIT :limit",
            {"limit": _check_limit(limit)},
        )
        return [JournalEntry(s, self._decode(s, p), a, e) for s, p, a, e in rows]

    def pending_count(self) -> int:
        return int(self._read(f"SELECT count(*) FROM journal_entries WHERE {PENDING}", {})[0][0])

    def last_seq(self) -> int:
        return int(self._read("SELECT coalesce(max(seq), 0) FROM journal_entries", {})[0][0])

    def stats(self) -> JournalStats:
        total, flushed, failed, last, oldest = self._read(
            "SELECT count(*), count(flushed_at), count(failed_at), coalesce(max(seq), 0), "
            f"(SELECT min(appended_at) FROM journal_entries WHERE {PENDING}) "
            "FROM journal_entries",
            {},
        )[0]
        return JournalStats(
            path=self.path,
            total=int(total),
            pending=int(total) - int(flushed) - int(failed),
            flushed=int(flushed),
            failed=int(failed),
            last_seq=int(last),
            oldest_pending_age_s=None if oldest is None else max(0.0, self._clock() - oldest),
        )

    # -------------------------------------------------------------- internals
    def _transact(self, what: str, fn: Callable[[Connection], T]) -> T:
        """``fn(conn)`` in one transaction, committed; retried on a deadlock or serialization
        failure (the whole transaction was rolled back); other driver errors -> JournalError."""
        for attempt in range(1, DEADLOCK_RETRIES + 1):
            self._check_open()
            try:
                with self._engine.begin() as conn:
                    return fn(conn)
            except sa.exc.DBAPIError as exc:
                state = getattr(exc.orig, "sqlstate", None)
                if state in RETRY_SQLSTATES and attempt < DEADLOCK_RETRIES:
                    log.info("journal %s: %s hit %s, retrying (%d)", self.path, what, state,
                             attempt)
                    time.sleep(0.01 * attempt)
                    continue
                raise self._error(f"{what} failed", exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _read(self, sql: str, args: dict[str, Any]) -> list[tuple[Any, ...]]:
        self._check_open()
        try:
            with self._reader.connect() as conn:
                return [tuple(r) for r in conn.execute(sa.text(sql), args).all()]
        except sa.exc.DBAPIError as exc:
            raise self._error("read failed", exc) from exc

    def _error(self, what: str, exc: sa.exc.DBAPIError) -> JournalError:
        cause = exc.orig if exc.orig is not None else exc
        return JournalError(f"journal {self.path}: {what}: {type(cause).__name__}: {cause}")

    def _check_open(self) -> None:
        if self._closed:
            raise JournalError(f"journal {self.path} is closed")

    def _decode(self, seq: int, payload: str) -> TurnPair:
        try:
            return decode_pair(payload)
        except (ValueError, TypeError) as exc:
            raise JournalError(
                f"journal {self.path}: entry seq={seq} is unreadable: {exc}"
            ) from exc

    # -------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Close every connection (a claim's lease outlives it: see :meth:`claim`)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._engine.dispose()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
