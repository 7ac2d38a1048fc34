"""Idempotency keys: a retried request (same tenant, same ``Idempotency-Key``) gets the first answer.

Why in the journal's SQLite file: the answer must be as durable as the turn-pair it produced
(WAL, ``synchronous=FULL``), and a replay that resumes after a server restart must still find
it. The table is created next to ``entries`` with ``IF NOT EXISTS``: older code ignores it, so
the journal's schema version stays.

Table ``idempotency``, one row per (tenant, key):

- ``in_progress``: claimed by ``owner`` (host:pid:claim); the claimer routes the request, then
  :meth:`IdempotencyStore.complete` (the response JSON; the first completion wins) or
  :meth:`IdempotencyStore.forget` (it failed: the row is deleted so a retry may run).
- ``completed``: ``response`` holds the first answer; every retry with the same body gets it.

``body_hash`` (sha256 of the canonical JSON body) tells a retry from a different request
(:class:`Conflict`). A claim older than ``lease_s`` is taken over (its process died or hung);
claims of dead processes on this host are dropped at open, claims of this store at close.
Rows older than ``ttl_s`` (from ``created_at``) count as absent and are swept lazily.

Erasure: ``response`` is content (the answer text), so an erased user's rows go too. Keys are
per tenant, and neither the key nor the stored response names the user, so :meth:`begin`
records the memory namespace (``tenant:user``) when given, in the side table
``idempotency_users`` (tenant, key) -> user_id; a trigger deletes its row with the key's row, so
every path that drops a key (forget, TTL sweep, dead claims) keeps it in step. A side table
rather than a column: the ``idempotency`` table keeps its shape for older code. Rows written
before (or without a user) are unattributed. :meth:`IdempotencyStore.erase_user` deletes the
user's rows and, by default, the tenant's unattributed rows as well, since they may be the user's: the cost for the tenant's other users is only that a retry of such a key
runs again instead of replaying (its turn-pair id comes from the key, so it replaces its pair).
:meth:`IdempotencyStore.erase_tenant` deletes every row of the tenant. A request whose claim is
deleted while it runs cannot record its answer afterwards (:meth:`complete` returns False).

A duplicate that finds the key in progress waits up to ``wait_s`` (woken at once by this
store's completions, polling for other processes' ones), then gets :class:`InProgress`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from memroute.errors import MemrouteError
from memroute.journal.sqlite_setup import JournalError, open_journal_db, write_transaction
from memroute.namespace import SEPARATOR, validate_tenant
from memroute.types import validate_user_id

log = logging.getLogger(__name__)

IN_PROGRESS, COMPLETED = "in_progress", "completed"
POLL_S = 0.1  # how often a waiting duplicate re-reads the row (other processes' completions)
MAX_KEY_CHARS = 255
TABLE = f"""
CREATE TABLE IF NOT EXISTS idempotency (
    tenant TEXT NOT NULL,
    key TEXT NOT NULL,
    body_hash TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('{IN_PROGRESS}', '{COMPLETED}')),
    owner TEXT NOT NULL,
    response TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (tenant, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idempotency_created ON idempotency(created_at)
"""
# Added later (erasure): the namespace a key's request belongs to (absent for older keys).
USERS_TABLE = (
    (
        "CREATE TABLE IF NOT EXISTS idempotency_users (tenant TEXT NOT NULL, key TEXT NOT NULL, "
        "user_id TEXT NOT NULL, PRIMARY KEY (tenant, key)) WITHOUT ROWID"
    ),
    "CREATE INDEX IF NOT EXISTS idempotency_users_user ON idempotency_users(user_id)",
    (
        "CREATE TRIGGER IF NOT EXISTS idempotency_users_gc AFTER DELETE ON idempotency BEGIN "
        "DELETE FROM idempotency_users WHERE tenant = old.tenant AND key = old.key; END"
    ),
)


class IdempotencyConflict(MemrouteError):
    """409: the key belongs to a different request, or its first request is still running."""

    status = 409
    code = "idempotency_conflict"


@dataclass(frozen=True)
class Started:
    """The caller owns the key now: route the request, then complete() or forget()."""

    tenant: str
    key: str
    owner: str


@dataclass(frozen=True)
class Existing:
    response: str  # the first answer, as given to complete()


@dataclass(frozen=True)
class Conflict:
    pass


@dataclass(frozen=True)
class InProgress:
    pass


Outcome = Started | Existing | Conflict | InProgress


def check_key(key: object) -> str:
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_CHARS:
        raise ValueError(f"an idempotency key has 1-{MAX_KEY_CHARS} characters")
    if not all(32 <= ord(ch) < 127 for ch in key):
        raise ValueError("an idempotency key is printable ASCII")
    return key


class IdempotencyStore:
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        ttl_s: float = 86400.0,
        lease_s: float = 600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path).expanduser().resolve()
        self.ttl_s, self.lease_s = float(ttl_s), float(lease_s)
        self._clock = clock
        self._host, self._pid = socket.gethostname(), os.getpid()
        self._lock = threading.RLock()  # the connection
        self._changed = threading.Condition()  # wakes local waiters on complete/forget
        self._generation = 0
        self._claims: set[tuple[str, str, str]] = set()  # this store's open claims
        self._sweep_every_s = max(1.0, min(self.ttl_s / 10.0, 300.0))
        self._last_sweep = float("-inf")
        self._conn: sqlite3.Connection | None = open_journal_db(self.path)
        try:
            with self._write() as conn:
                for stmt in filter(str.strip, TABLE.split(";")):
                    conn.execute(stmt)
                for stmt in USERS_TABLE:
                    conn.execute(stmt)
                self._drop_dead_claims(conn)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ flow
    def begin(
        self, tenant: str, key: str, body_hash: str, *, wait_s: float = 0.0,
        user_id: str | None = None,
    ) -> Outcome:
        """Claim ``(tenant, key)`` or find what it holds; waits up to ``wait_s`` while another
        request with the same key and body is in progress (then :class:`InProgress`).
        ``user_id``: the request's memory namespace, recorded so an erasure of that user
        finds the row (see the module doc)."""
        check_key(key)
        if user_id is not None:
            validate_user_id(user_id)
        deadline = time.monotonic() + max(0.0, wait_s)
        while True:
            with self._changed:
                generation = self._generation
            outcome = self._try_begin(tenant, key, body_hash, user_id)
            left = deadline - time.monotonic()
            if not isinstance(outcome, InProgress) or left <= 0:
                return outcome
            with self._changed:
                if self._generation == generation:
                    self._changed.wait(min(left, POLL_S))

    def complete(self, claim: Started, response: str) -> bool:
        """Record the answer of a claimed key; False when another request completed it first."""
        now = self._clock()
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE idempotency SET state = ?, response = ?, updated_at = ? "
                "WHERE tenant = ? AND key = ? AND state = ?",
                (COMPLETED, response, now, claim.tenant, claim.key, IN_PROGRESS),
            )
            done = cur.rowcount > 0
        self._release(claim)
        return done

    def forget(self, claim: Started) -> None:
        """Drop a claim whose request failed, so a retry runs it again (completed rows stay)."""
        with self._write() as conn:
            conn.execute(
                "DELETE FROM idempotency WHERE tenant = ? AND key = ? AND state = ? AND owner = ?",
                (claim.tenant, claim.key, IN_PROGRESS, claim.owner),
            )
        self._release(claim)

    def _try_begin(self, tenant: str, key: str, body_hash: str, user_id: str | None) -> Outcome:
        now = self._clock()
        with self._write() as conn:
            self._maybe_sweep(conn, now)
            row = conn.execute(
                "SELECT body_hash, state, response, created_at, updated_at FROM idempotency "
                "WHERE tenant = ? AND key = ?",
                (tenant, key),
            ).fetchone()
            if row is not None and row[3] <= now - self.ttl_s:
                conn.execute("DELETE FROM idempotency WHERE tenant = ? AND key = ?", (tenant, key))
                row = None
            claim = Started(tenant, key, f"{self._host}:{self._pid}:{uuid.uuid4().hex}")
            if row is None:
                conn.execute(
                    "INSERT INTO idempotency (tenant, key, body_hash, state, owner, created_at, "
                    "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (tenant, key, body_hash, IN_PROGRESS, claim.owner, now, now),
                )
                self._record_user(conn, tenant, key, user_id)
            elif row[0] != body_hash:
                return Conflict()
            elif row[1] == COMPLETED:
                return Existing(row[2])
            elif row[4] <= now - self.lease_s:  # abandoned: its process died or hung
                log.warning("idempotency key of tenant %s: taking over a claim of %.0f s", tenant,
                            now - row[4])
                conn.execute(
                    "UPDATE idempotency SET owner = ?, updated_at = ? WHERE tenant = ? AND key = ?",
                    (claim.owner, now, tenant, key),
                )
                self._record_user(conn, tenant, key, user_id)
            else:
                return InProgress()
        with self._lock:
            self._claims.add((claim.tenant, claim.key, claim.owner))
        return claim

    @staticmethod
    def _record_user(conn: sqlite3.Connection, tenant: str, key: str, user_id: str | None) -> None:
        if user_id is not None:
            conn.execute(
                "INSERT OR REPLACE INTO idempotency_users (tenant, key, user_id) VALUES (?, ?, ?)",
                (tenant, key, user_id),
            )

    # --------------------------------------------------------------- erasure
    def erase_user(self, user_id: str, *, include_unattributed: bool = True) -> int:
        """Delete the keys of ``user_id`` (``tenant:user``) and, with ``include_unattributed``,
        the tenant's keys that name no user (older rows); returns how many. Idempotent."""
        uid = validate_user_id(user_id)
        tenant, sep, _ = uid.partition(SEPARATOR)
        sql = (
            "DELETE FROM idempotency WHERE (tenant, key) IN "
            "(SELECT tenant, key FROM idempotency_users WHERE user_id = ?)"
        )
        args = [uid]
        if include_unattributed and sep:
            sql += (
                " OR (tenant = ? AND NOT EXISTS (SELECT 1 FROM idempotency_users u "
                "WHERE u.tenant = idempotency.tenant AND u.key = idempotency.key))"
            )
            args.append(tenant)
        return self._erase(sql, args)

    def erase_tenant(self, tenant: str) -> int:
        """Delete every row of ``tenant``; returns how many. Idempotent."""
        validate_tenant(tenant)
        return self._erase("DELETE FROM idempotency WHERE tenant = ?", [tenant])

    def _erase(self, sql: str, args: list[str]) -> int:
        with self._write() as conn:
            deleted = conn.execute(sql, args).rowcount
        with self._changed:  # waiting duplicates look again (and may claim the key anew)
            self._generation += 1
            self._changed.notify_all()
        return int(deleted)

    # --------------------------------------------------------------- upkeep
    def sweep(self) -> int:
        """Delete rows older than ``ttl_s``; returns how many."""
        with self._write() as conn:
            return self._sweep(conn, self._clock())

    def _maybe_sweep(self, conn: sqlite3.Connection, now: float) -> None:
        if now - self._last_sweep >= self._sweep_every_s:
            self._sweep(conn, now)

    def _sweep(self, conn: sqlite3.Connection, now: float) -> int:
        self._last_sweep = now
        cur = conn.execute("DELETE FROM idempotency WHERE created_at <= ?", (now - self.ttl_s,))
        return cur.rowcount

    def _drop_dead_claims(self, conn: sqlite3.Connection) -> None:
        """Claims of processes on this host that no longer run (a restart): a retry need not
        wait for their lease."""
        rows = conn.execute(
            "SELECT tenant, key, owner FROM idempotency WHERE state = ?", (IN_PROGRESS,)
        ).fetchall()
        for tenant, key, owner in rows:
            host, _, rest = owner.partition(":")
            pid = rest.partition(":")[0]
            if host == self._host and pid.isdigit() and not _alive(int(pid)):
                conn.execute(
                    "DELETE FROM idempotency WHERE tenant = ? AND key = ? AND owner = ?",
                    (tenant, key, owner),
                )

    def counts(self) -> dict[str, int]:
        """Rows by state (health, tests)."""
        with self._lock:
            rows = self._connection().execute(
                "SELECT state, count(*) FROM idempotency GROUP BY state"
            ).fetchall()
        return {IN_PROGRESS: 0, COMPLETED: 0, **{s: int(n) for s, n in rows}}

    # ------------------------------------------------------------- internals
    def _release(self, claim: Started) -> None:
        with self._lock:
            self._claims.discard((claim.tenant, claim.key, claim.owner))
        with self._changed:
            self._generation += 1
            self._changed.notify_all()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock, write_transaction(self._connection(), self.path) as conn:
            yield conn

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise JournalError(f"idempotency table in {self.path} is closed")
        return self._conn

    def close(self) -> None:
        """Drop this store's open claims (their requests will not complete), then close."""
        with self._lock:
            if self._conn is None:
                return
            for tenant, key, owner in list(self._claims):
                try:
                    self.forget(Started(tenant, key, owner))
                except JournalError:
                    log.exception("idempotency: could not drop an open claim")
            self._conn.close()
            self._conn = None

    def __enter__(self) -> IdempotencyStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, owned by someone else
        return True
    return True
