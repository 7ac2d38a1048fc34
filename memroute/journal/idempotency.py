"""Idempotency keys: a retried request (same tenant, same ``Idempotency-Key``) gets the first answer.

Why in the journal's database (the SQLite file, or the PostgreSQL database every replica
shares; the tables are :mod:`memroute.journal.schema`'s): the answer must be as durable as the
turn-pair it produced, a replay that resumes after a server restart must still find it, and a
client's retry that lands on another replica must get the first answer, not run again.

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
``idempotency_users`` (tenant, key) -> user_id, deleted with the key's row (a foreign key
``ON DELETE CASCADE``; SQLite files of earlier versions: their trigger), so every path that
drops a key (forget, TTL sweep, dead claims) keeps it in step. A side table rather than a
column: the ``idempotency`` table keeps its shape for older code. Rows written
before (or without a user) are unattributed. :meth:`IdempotencyStore.erase_user` deletes the
user's rows and, by default, the tenant's unattributed rows as well, since they may be the user's: the cost for the tenant's other users is only that a retry of such a key
runs again instead of replaying (its turn-pair id comes from the key, so it replaces its pair).
:meth:`IdempotencyStore.erase_tenant` deletes every row of the tenant. A request whose claim is
deleted while it runs cannot record its answer afterwards (:meth:`complete` returns False).

A duplicate that finds the key in progress waits up to ``wait_s`` (woken at once by this
store's completions, polling for other processes' and replicas' ones), then gets
:class:`InProgress`. Two replicas claiming one new key at once: ``ON CONFLICT DO NOTHING``
lets one insert, the other then reads its row (in progress: it waits).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memroute.errors import MemrouteError
from memroute.journal.dialects import open_database
from memroute.journal.records import JournalError
from memroute.journal.schema import COMPLETED, IN_PROGRESS
from memroute.namespace import SEPARATOR, validate_tenant
from memroute.types import validate_user_id

log = logging.getLogger(__name__)

POLL_S = 0.1  # how often a waiting duplicate re-reads the row (other processes' completions)
MAX_KEY_CHARS = 255


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
    """The keys in the journal's database: ``target`` is the SQLite journal's file or the
    PostgreSQL journal's ``postgresql://`` URL (what :func:`memroute.build.idempotency` passes)."""

    def __init__(
        self,
        target: str | os.PathLike[str],
        *,
        ttl_s: float = 86400.0,
        lease_s: float = 600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ttl_s, self.lease_s = float(ttl_s), float(lease_s)
        self._clock = clock
        self._host, self._pid = socket.gethostname(), os.getpid()
        self._lock = threading.Lock()  # the open claims
        self._changed = threading.Condition()  # wakes local waiters on complete/forget
        self._generation = 0
        self._claims: set[tuple[str, str, str]] = set()  # this store's open claims
        self._sweep_every_s = max(1.0, min(self.ttl_s / 10.0, 300.0))
        self._last_sweep = float("-inf")
        self._db = open_database(os.fspath(target))
        self.path = self._db.path
        self._i, self._u = self._db.tables.idempotency, self._db.tables.idempotency_users
        try:
            self._db.transact("drop dead claims", self._drop_dead_claims)
        except BaseException:
            self._db.close()
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
            outcome = self._db.transact("claim an idempotency key", lambda conn: self._try_begin(
                conn, tenant, key, body_hash, user_id))
            if isinstance(outcome, Started):
                with self._lock:
                    self._claims.add((outcome.tenant, outcome.key, outcome.owner))
            left = deadline - time.monotonic()
            if not isinstance(outcome, InProgress) or left <= 0:
                return outcome
            with self._changed:
                if self._generation == generation:
                    self._changed.wait(min(left, POLL_S))

    def complete(self, claim: Started, response: str) -> bool:
        """Record the answer of a claimed key; False when another request completed it first."""
        i = self._i.c
        stmt = (sa.update(self._i)
                .where(i.tenant == claim.tenant, i.key == claim.key, i.state == IN_PROGRESS)
                .values(state=COMPLETED, response=response, updated_at=self._clock()))
        done = self._db.transact("record an answer",
                                 lambda conn: conn.execute(stmt).rowcount > 0)
        self._release(claim)
        return bool(done)

    def forget(self, claim: Started) -> None:
        """Drop a claim whose request failed, so a retry runs it again (completed rows stay)."""
        i = self._i.c
        stmt = sa.delete(self._i).where(i.tenant == claim.tenant, i.key == claim.key,
                                        i.state == IN_PROGRESS, i.owner == claim.owner)
        self._db.transact("drop a claim", lambda conn: conn.execute(stmt))
        self._release(claim)

    def _try_begin(self, conn: Connection, tenant: str, key: str, body_hash: str,
                   user_id: str | None) -> Outcome:
        now, i = self._clock(), self._i.c
        this = sa.and_(i.tenant == tenant, i.key == key)
        self._maybe_sweep(conn, now)
        claim = Started(tenant, key, f"{self._host}:{self._pid}:{uuid.uuid4().hex}")
        while True:  # twice at most: a row another replica inserted meanwhile is read next
            row = conn.execute(sa.select(i.body_hash, i.state, i.response, i.created_at,
                                         i.updated_at).where(this).with_for_update()).first()
            if row is not None and row[3] <= now - self.ttl_s:
                conn.execute(sa.delete(self._i).where(this))
                row = None
            if row is not None:
                break
            inserted = conn.execute(self._db.insert(self._i).values(
                tenant=tenant, key=key, body_hash=body_hash, state=IN_PROGRESS,
                owner=claim.owner, created_at=now, updated_at=now,
            ).on_conflict_do_nothing(index_elements=["tenant", "key"]).returning(i.key)).first()
            if inserted is not None:
                self._record_user(conn, tenant, key, user_id)
                return claim
        if row[0] != body_hash:
            return Conflict()
        if row[1] == COMPLETED:
            return Existing(row[2])
        if row[4] > now - self.lease_s:
            return InProgress()
        # abandoned: its process died or hung
        log.warning("idempotency key of tenant %s: taking over a claim of %.0f s", tenant,
                    now - row[4])
        conn.execute(sa.update(self._i).where(this).values(owner=claim.owner, updated_at=now))
        self._record_user(conn, tenant, key, user_id)
        return claim

    def _record_user(self, conn: Connection, tenant: str, key: str, user_id: str | None) -> None:
        if user_id is not None:
            stmt = self._db.insert(self._u).values(tenant=tenant, key=key, user_id=user_id)
            conn.execute(stmt.on_conflict_do_update(index_elements=["tenant", "key"],
                                                    set_={"user_id": stmt.excluded.user_id}))

    # --------------------------------------------------------------- erasure
    def erase_user(self, user_id: str, *, include_unattributed: bool = True) -> int:
        """Delete the keys of ``user_id`` (``tenant:user``) and, with ``include_unattributed``,
        the tenant's keys that name no user (older rows); returns how many. Idempotent."""
        uid = validate_user_id(user_id)
        tenant, sep, _ = uid.partition(SEPARATOR)
        i, u = self._i.c, self._u.c
        which: Any = sa.tuple_(i.tenant, i.key).in_(
            sa.select(u.tenant, u.key).where(u.user_id == uid))
        if include_unattributed and sep:
            which = sa.or_(which, sa.and_(i.tenant == tenant, ~sa.exists().where(
                u.tenant == i.tenant, u.key == i.key)))
        return self._erase(which)

    def erase_tenant(self, tenant: str) -> int:
        """Delete every row of ``tenant``; returns how many. Idempotent."""
        validate_tenant(tenant)
        return self._erase(self._i.c.tenant == tenant)

    def _erase(self, which: Any) -> int:
        deleted = self._db.transact("erase idempotency keys", lambda conn: conn.execute(
            sa.delete(self._i).where(which)).rowcount)
        with self._changed:  # waiting duplicates look again (and may claim the key anew)
            self._generation += 1
            self._changed.notify_all()
        return int(deleted)

    # --------------------------------------------------------------- upkeep
    def sweep(self) -> int:
        """Delete rows older than ``ttl_s``; returns how many."""
        return self._db.transact("sweep idempotency keys",
                                 lambda conn: self._sweep(conn, self._clock()))

    def _maybe_sweep(self, conn: Connection, now: float) -> None:
        if now - self._last_sweep >= self._sweep_every_s:
            self._sweep(conn, now)

    def _sweep(self, conn: Connection, now: float) -> int:
        self._last_sweep = now
        return int(conn.execute(sa.delete(self._i).where(
            self._i.c.created_at <= now - self.ttl_s)).rowcount)

    def _drop_dead_claims(self, conn: Connection) -> None:
        """Claims of processes on this host that no longer run (a restart): a retry need not
        wait for their lease."""
        i = self._i.c
        rows = conn.execute(sa.select(i.tenant, i.key, i.owner).where(
            i.state == IN_PROGRESS, i.owner.startswith(f"{self._host}:", autoescape=True)))
        for tenant, key, owner in rows.all():
            pid = owner[len(self._host) + 1:].partition(":")[0]
            if pid.isdigit() and not _alive(int(pid)):
                conn.execute(sa.delete(self._i).where(i.tenant == tenant, i.key == key,
                                                      i.owner == owner))

    def counts(self) -> dict[str, int]:
        """Rows by state (health, tests)."""
        i = self._i.c
        rows = self._db.read(sa.select(i.state, sa.func.count()).group_by(i.state))
        return {IN_PROGRESS: 0, COMPLETED: 0, **{s: int(n) for s, n in rows}}

    # ------------------------------------------------------------- internals
    def _release(self, claim: Started) -> None:
        with self._lock:
            self._claims.discard((claim.tenant, claim.key, claim.owner))
        with self._changed:
            self._generation += 1
            self._changed.notify_all()

    def close(self) -> None:
        """Drop this store's open claims (their requests will not complete), then close."""
        if self._db.closed:
            return
        with self._lock:
            open_claims = list(self._claims)
        for tenant, key, owner in open_claims:
            try:
                self.forget(Started(tenant, key, owner))
            except JournalError:
                log.exception("idempotency: could not drop an open claim")
        self._db.close()

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
