"""The fact store: facts with a lifecycle (the MSOCA memory layer), on SQLite or PostgreSQL.

:class:`FactStore` owns the database (engine, transactions, driver errors) and is the one API
over it; each responsibility lives in a module of its own, run inside the store's transactions:
the lifecycle rules (supersession, restatement, retraction; :mod:`.lifecycle`), the read
queries (:mod:`.reads`), session start's newest turns (:mod:`.recent`) and version tokens
(:mod:`.versions`), erasure, the only deletes (:mod:`.erasures`), the per-user extraction lock
(:mod:`.locks`) and the extraction queue (:mod:`.queue`).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Self

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from memroute.config.facts import FactsConfig, check_facts_config, facts_backend
from memroute.errors import ConfigError
from memroute.memory.facts import erasures, lifecycle, reads, recent, versions
from memroute.memory.facts.locks import AdvisoryLocks, LeaseLocks, check_owner
from memroute.memory.facts.queue import ExtractionQueue
from memroute.memory.facts.schema import WRITE_OPTION, create_schema, engine_url, open_engine
from memroute.memory.facts.types import (
    Fact,
    FactInput,
    FactStoreError,
    check_fact_id,
    check_fact_input,
    check_key,
    check_time,
)
from memroute.namespace import SEPARATOR, validate_tenant
from memroute.types import Memory, TurnPair, validate_user_id


class FactStore:
    """Per-user facts on one database; thread-safe (a pooled engine per store)."""

    def __init__(
        self,
        url: str,
        *,
        ephemeral_ttl_s: float = FactsConfig.ephemeral_ttl_s,
        lock_lease_s: float = FactsConfig.lock_lease_s,
        busy_timeout_s: float = FactsConfig.busy_timeout_s,
        pool_size: int = FactsConfig.pool_size,
        cache_users: int = FactsConfig.cache_users,
        clock: Callable[[], float] = time.time,
    ) -> None:
        check_facts_config(FactsConfig(url=url, ephemeral_ttl_s=ephemeral_ttl_s,
                                       lock_lease_s=lock_lease_s, busy_timeout_s=busy_timeout_s,
                                       pool_size=pool_size, cache_users=cache_users))
        self.backend = facts_backend(url)
        self.ephemeral_ttl_s = float(ephemeral_ttl_s)
        self._clock = clock
        self._closed = False
        self._engine = open_engine(url, self.backend, busy_timeout_s=busy_timeout_s,
                                   pool_size=pool_size)
        sqlite = self.backend == "sqlite"
        dialect = self._engine.dialect
        self._active_sql = reads.compiled(
            reads.active_query(sa.bindparam("user_id"), sa.bindparam("now")), dialect)
        self._token_sql = reads.compiled(versions.TOKEN_QUERY, dialect)
        self._recent_sql = reads.compiled(
            recent.newest_query(sa.bindparam("user_id"), sa.bindparam("n")), dialect)
        self.cache = versions.ActiveCache(cache_users)
        self.queue = ExtractionQueue(self.transaction)
        self._write = (self._engine.execution_options(**{WRITE_OPTION: True}) if sqlite
                       else self._engine)
        # PostgreSQL reads run in autocommit: no BEGIN / COMMIT round trips. Each read is one
        # statement or, for session start, token-first statements (safe: see .versions).
        self._read = (self._engine if sqlite
                      else self._engine.execution_options(isolation_level="AUTOCOMMIT"))
        try:
            try:
                create_schema(self._write, self.backend)
            except sa.exc.DBAPIError as exc:
                why = f"{type(exc.orig).__name__}: {exc.orig}"
                if sqlite:  # a file that cannot be opened, read or locked: the path is wrong
                    raise ConfigError(f"cannot use {url} for facts: {why}",
                                      field="facts.url") from exc
                raise FactStoreError(f"fact store (postgresql) could not open: {why}") from exc
            self._locks: AdvisoryLocks | LeaseLocks = (
                LeaseLocks(self._write, lease_s=lock_lease_s, clock=clock) if sqlite
                else AdvisoryLocks(engine_url(url, self.backend))
            )
        except BaseException:
            self._engine.dispose()
            raise

    @classmethod
    def from_config(cls, cfg: FactsConfig, *, clock: Callable[[], float] = time.time) -> FactStore:
        check_facts_config(cfg)
        return cls(cfg.url, ephemeral_ttl_s=cfg.ephemeral_ttl_s, lock_lease_s=cfg.lock_lease_s,
                   busy_timeout_s=cfg.busy_timeout_s, pool_size=cfg.pool_size,
                   cache_users=cfg.cache_users, clock=clock)

    @property
    def engine(self) -> Engine:
        """The store's engine (benchmarks, maintenance); writes should go through the API."""
        return self._engine

    # -- plumbing ----------------------------------------------------------------------------

    def _now(self, now: float | None, field: str = "now") -> float:
        return check_time(self._clock() if now is None else now, field)

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except sa.exc.DBAPIError as exc:
            cause = exc.orig if exc.orig is not None else exc
            raise FactStoreError(
                f"fact store ({self.backend}) could not {what}: {type(cause).__name__}: {cause}"
            ) from exc

    @contextlib.contextmanager
    def transaction(self, what: str, *, write: bool) -> Iterator[Connection]:
        """One transaction on the store's database (``write``: SQLite's BEGIN IMMEDIATE);
        driver errors become :class:`FactStoreError` saying what could not be done."""
        if self._closed:
            raise FactStoreError("the fact store is closed")
        with self._errors(what), (self._write if write else self._read).begin() as conn:
            yield conn

    _tx = transaction

    # -- facts ------------------------------------------------------------------------------

    def assert_fact(
        self, user_id: str, fact: FactInput, *, now: float | None = None,
        unless_erased_after: int | None = None,
    ) -> Fact:
        """Record ``fact`` for ``user_id`` at ``now`` (transaction time) and return the active
        fact of its key afterwards: the new row, or the existing one for a restatement.
        ``unless_erased_after``: an :meth:`erasure_mark`; :class:`UserErased` (nothing
        written) if the user or its tenant was erased since (an extraction's writes)."""
        uid = validate_user_id(user_id)
        new = check_fact_input(fact)
        at = self._now(now)
        with self._tx("assert a fact", write=True) as conn:
            if unless_erased_after is not None:
                erasures.refuse_if_erased(conn, uid, unless_erased_after, self.backend)
            return lifecycle.assert_fact(conn, uid, new, at=at,
                                         ephemeral_ttl_s=self.ephemeral_ttl_s,
                                         backend=self.backend)

    def active(self, user_id: str, *, now: float | None = None) -> list[Fact]:
        """The user's active facts not expired at ``now``, ordered by key (session start)."""
        return list(self.active_snapshot(user_id, now=now))

    def active_snapshot(self, user_id: str, *, now: float | None = None) -> tuple[Fact, ...]:
        """:meth:`active` as a shared tuple: the same object while the user's facts are
        unchanged (one token lookup per call; see :mod:`.versions`), so a caller can cache
        what it builds from it by identity."""
        return self.session_read(user_id, recent=0, now=now)[0]

    def session_read(self, user_id: str, *, recent: int, now: float | None = None
                     ) -> tuple[tuple[Fact, ...], list[Memory]]:
        """Session start's reads in one transaction: :meth:`active_snapshot` and the user's
        newest ``recent`` turns (:meth:`recent_turns`)."""
        uid = validate_user_id(user_id)
        at = self._now(now)
        with self._tx("read active facts", write=False) as conn:
            # The hot path: SQL compiled once, run on the driver's own cursor (SQLAlchemy's
            # Row objects are a third of the time of a thousand-row read).
            cur = conn.connection.dbapi_connection.cursor()
            try:
                token_rows = reads.run(cur, self._token_sql, {"user_id": uid})
                token = token_rows[0][0] if token_rows else None
                turns = ([Memory(*r) for r in reversed(reads.run(
                    cur, self._recent_sql, {"user_id": uid, "n": recent}))] if recent > 0 else [])
                cached = self.cache.get(uid, token, at)
                if cached is not None:
                    return cached, turns
                rows = reads.run(cur, self._active_sql, {"user_id": uid, "now": at})
            except self._engine.dialect.loaded_dbapi.Error as exc:
                raise FactStoreError(f"fact store ({self.backend}) could not read active "
                                     f"facts: {type(exc).__name__}: {exc}") from exc
            finally:
                cur.close()
        return self.cache.put(uid, token, at, reads.active_facts(uid, rows)), turns

    # -- recent turns (session start's, kept here: see :mod:`.recent`) -----------------------

    def record_turns(self, pairs: list[TurnPair] | tuple[TurnPair, ...], *, keep: int) -> int:
        """Remember ``pairs`` as their users' newest turns, keeping ``keep`` per user."""
        for p in pairs:
            validate_user_id(p.user_id)
        if not pairs or keep <= 0:
            return 0
        with self._tx("record recent turns", write=True) as conn:
            return recent.record(conn, pairs, keep)

    def recent_turns(self, user_id: str, n: int) -> list[Memory]:
        """The user's newest ``n`` recorded turn-pairs, oldest first."""
        return self.session_read(user_id, recent=n)[1] if n > 0 else []

    def timeline(self, user_id: str, key: str) -> list[Fact]:
        """Every row of ``key`` (all statuses, expired ones too) by ``recorded_at``: the audit."""
        uid = validate_user_id(user_id)
        check_key(key)
        query = reads.timeline_query(uid, key)
        with self._tx("read a timeline", write=False) as conn:
            return [Fact(*r) for r in conn.execute(query)]

    def as_of(
        self, user_id: str, key: str, *, valid_at: float, known_at: float | None = None
    ) -> Fact | None:
        """The fact of ``key`` that was true in the world at ``valid_at``, as the store knew it
        at ``known_at`` (default now): rows recorded by then, not yet retracted then, whose
        world interval (its end only if that end was recorded by then, and an ephemeral
        fact's expiry) holds ``valid_at``. The newest recorded one wins an overlap."""
        uid = validate_user_id(user_id)
        check_key(key)
        world = check_time(valid_at, "valid_at")
        known = self._now(known_at, "known_at")
        query = reads.as_of_query(uid, key, world=world, known=known)
        with self._tx("read a fact as of a time", write=False) as conn:
            row = conn.execute(query).first()
        return Fact(*row) if row is not None else None

    def retract(self, user_id: str, fact_id: int, *, now: float | None = None) -> Fact:
        """Mark one of the user's facts ``retracted`` (kept for the audit). An active fact's
        world interval ends at ``now``; a superseded one keeps its end. Idempotent."""
        uid = validate_user_id(user_id)
        fid = check_fact_id(fact_id)
        at = self._now(now)
        with self._tx("retract a fact", write=True) as conn:
            return lifecycle.retract(conn, uid, fid, at=at, backend=self.backend)

    # -- erasure (the only deletes) ---------------------------------------------------------

    def erase_user(self, user_id: str) -> int:
        """Delete every fact of ``user_id`` (GDPR erasure); the number of rows removed."""
        uid = validate_user_id(user_id)
        self.cache.drop(uid)
        return self._erase(lambda col: col == uid, erasures.user_scope(uid))

    def erase_tenant(self, tenant: str) -> int:
        """Delete every fact of every user ``tenant:*``; the number of rows removed."""
        validate_tenant(tenant)
        self.cache.drop_prefix(f"{tenant}{SEPARATOR}")
        return self._erase(erasures.of_tenant(tenant), erasures.tenant_scope(tenant))

    def _erase(
        self, of: Callable[[sa.ColumnElement[str]], sa.ColumnElement[bool]], scope: str
    ) -> int:
        """Delete the facts, version rows and recent turns whose user ``of`` selects, and note
        the erasure of ``scope`` (:mod:`.erasures`); the number of fact and turn rows removed."""
        with self._tx("erase facts", write=True) as conn:
            return erasures.erase(conn, of, scope, backend=self.backend, now=self._clock())

    def erasure_mark(self) -> int:
        """The newest erasure's number: an extraction takes it before reading its turns and
        passes it to its writes (``unless_erased_after``)."""
        with self._tx("read the erasure mark", write=False) as conn:
            return erasures.mark(conn)

    def erased_since(self, user_id: str, mark: int) -> bool:
        """Whether ``user_id`` or its tenant was erased after ``mark``."""
        uid = validate_user_id(user_id)
        with self._tx("read erasures", write=False) as conn:
            return erasures.erased_since(conn, uid, mark)

    # memroute.serving.erasure's UserCache protocol: the store can be one of its `caches`.
    forget_user = erase_user
    forget_tenant = erase_tenant

    # -- the per-user extraction lock -------------------------------------------------------

    def try_user_lock(self, user_id: str, *, owner: str) -> bool:
        """Take ``user_id``'s extraction lock for ``owner`` if no other owner holds it (in any
        process on this database); True if ``owner`` holds it now (see :mod:`.locks`)."""
        uid = validate_user_id(user_id)
        owner = check_owner(owner)
        with self._errors("take a user lock"):
            if self._closed:
                raise FactStoreError("the fact store is closed")
            return self._locks.try_acquire(uid, owner)

    def release_user_lock(self, user_id: str, *, owner: str) -> bool:
        """Release the lock if ``owner`` holds it; False if it did not (or the store was closed,
        which released its locks)."""
        uid = validate_user_id(user_id)
        owner = check_owner(owner)
        if self._closed:
            return False
        with self._errors("release a user lock"):
            return self._locks.release(uid, owner)

    @contextlib.contextmanager
    def user_lock(self, user_id: str, *, owner: str | None = None) -> Iterator[bool]:
        """``with store.user_lock(uid) as got:`` -- ``got`` says whether this holder has it;
        released on exit if it was taken here."""
        owner = owner if owner is not None else f"lock-{uuid.uuid4().hex}"
        got = self.try_user_lock(user_id, owner=owner)
        try:
            yield got
        finally:
            if got:
                self.release_user_lock(user_id, owner=owner)

    # -- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Release the locks this store holds and close its connections (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._locks.close()
        finally:
            self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["FactStore"]
