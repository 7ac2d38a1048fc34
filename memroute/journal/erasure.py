"""Erasure in the journal: tombstones, the delete and its audit row (mixed into
:class:`memroute.journal.store.Journal`; the rule is in that module's doc).

The boundary seq B is the highest seq ever allocated when an erasure runs; the target's entries
with seq <= B are erased data, later ones new data. :meth:`ErasureMixin.store_gate` orders this
process's flusher against an erasure; a flusher elsewhere re-checks with
:meth:`ErasureMixin.erased_among`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memroute.journal.dialects import Database
from memroute.journal.records import (
    GATE_TIMEOUT_S,
    AuditEntry,
    JournalEntry,
    JournalErasure,
    JournalError,
    check_actor,
    check_limit,
    erased_entries,
)
from memroute.journal.schema import not_erased
from memroute.namespace import SEPARATOR, validate_tenant
from memroute.types import validate_user_id

SEQ_CHUNK = 500  # seqs per IN (...) (SQLite's bound-parameter limit is 32766 since 3.32)


class ErasureMixin:
    """``erase_user`` / ``erase_tenant`` and what the flusher and the audit read of them. The
    journal sets the attributes below in its ``_setup``."""

    path: str
    _db: Database
    _clock: Callable[[], float]
    _t: Any
    _e: sa.Table
    _store_gate: threading.RLock

    @contextlib.contextmanager
    def store_gate(self, timeout_s: float | None = None) -> Iterator[None]:
        """Held by this process's flusher while it writes a batch (read -> store write -> mark)
        and by an erasure run in this process from its tombstone through the store delete;
        reentrant. JournalError when not acquired within ``timeout_s`` (a store write hanging
        on a store that is down)."""
        if not self._store_gate.acquire(timeout=-1 if timeout_s is None else timeout_s):
            raise JournalError(
                f"journal {self.path}: a store write did not finish within {timeout_s} s; "
                "the erasure did not start (retry it)")
        try:
            yield
        finally:
            self._store_gate.release()

    def erase_user(self, user_id: str, *, actor: str) -> JournalErasure:
        """Tombstone ``user_id`` and delete all its entries, with an audit row, in one durable
        transaction (see the module doc for the rule). Idempotent: again, it deletes 0 rows."""
        uid = validate_user_id(user_id)
        return self._erase("user", uid, self._e.c.user_id == uid, actor)

    def erase_tenant(self, tenant: str, *, actor: str) -> JournalErasure:
        """:meth:`erase_user` for every user of ``tenant`` (ids ``tenant:...``) at once."""
        validate_tenant(tenant)
        lo, hi = f"{tenant}{SEPARATOR}", f"{tenant}{chr(ord(SEPARATOR) + 1)}"  # 'acme:'..'acme;'
        uid = self._e.c.user_id
        # the range is an index scan (bytewise order); the substr test keeps it exact regardless
        return self._erase("tenant", tenant, sa.and_(
            uid >= lo, uid < hi, sa.func.substr(uid, 1, len(lo)) == lo), actor)

    def _erase(self, scope: str, target: str, where: sa.ColumnElement[bool],
               actor: str) -> JournalErasure:
        actor, now = check_actor(actor), self._clock()
        x, audit = self._t.erasures, self._t.erasure_audit

        def erase(conn: Connection) -> tuple[int, int, int]:
            self._db.lock_erasure(conn, scope, target)
            boundary = self._db.last_allocated_seq(conn)
            tomb = self._db.insert(x).values(scope=scope, target=target, seq=boundary, at=now)
            conn.execute(tomb.on_conflict_do_update(index_elements=["scope", "target"], set_={
                "seq": sa.case((tomb.excluded.seq > x.c.seq, tomb.excluded.seq),
                               else_=x.c.seq),
                "at": tomb.excluded.at}))
            deleted = conn.execute(sa.delete(self._e).where(where)).rowcount
            audit_id = conn.execute(sa.insert(audit).values(
                at=now, actor=actor, scope=scope, target=target, boundary_seq=boundary,
                journal_rows=deleted).returning(audit.c.id)).scalar_one()
            return int(audit_id), boundary, int(deleted)

        with self.store_gate(GATE_TIMEOUT_S):
            audit_id, boundary, deleted = self._db.transact(f"erase {scope}", erase)
        return JournalErasure(audit_id, scope, target, boundary, deleted, now)

    def finish_erasure(self, audit_id: int, *, store_rows: int, idempotency_rows: int) -> None:
        """Complete an audit row once the other stores are erased too."""
        audit = self._t.erasure_audit
        stmt = sa.update(audit).where(audit.c.id == int(audit_id)).values(
            store_rows=int(store_rows), idempotency_rows=int(idempotency_rows),
            completed_at=self._clock())
        self._db.transact("finish the erasure", lambda conn: conn.execute(stmt))

    def erasure_seq(self, user_id: str) -> int | None:
        """The boundary seq that applies to ``user_id`` (its own or its tenant's tombstone,
        the higher one); None if it was never erased."""
        uid = validate_user_id(user_id)
        tenant = uid.partition(SEPARATOR)[0] if SEPARATOR in uid else None
        x = self._t.erasures.c
        [(seq,)] = self._db.read(sa.select(sa.func.max(x.seq)).where(sa.or_(
            sa.and_(x.scope == "user", x.target == uid),
            sa.and_(x.scope == "tenant", x.target == tenant))))
        return None if seq is None else int(seq)

    def erased_among(self, entries: Sequence[JournalEntry]) -> list[JournalEntry]:
        """The entries (as read or claimed earlier) that an erasure since then covers: seq <= a
        tombstone of their user or tenant (the flusher's check after a store write). One query
        per chunk when none is gone; entries gone for another reason (replaced, pruned) do not
        count."""
        e, seqs = self._e.c, [x.seq for x in entries]
        alive: set[int] = set()
        for i in range(0, len(seqs), SEQ_CHUNK):
            alive.update(int(r[0]) for r in self._db.read(sa.select(e.seq).where(
                e.seq.in_(seqs[i:i + SEQ_CHUNK]), not_erased(self._t, self._db.tenant_of))))
        return erased_entries(entries, alive, self.erasure_seq)

    def erasure_audit(self, limit: int = 100, *, target: str | None = None) -> list[AuditEntry]:
        """The newest ``limit`` audit rows (of one ``target``: a user id or a tenant), newest first."""
        a = self._t.erasure_audit.c
        stmt = sa.select(a.id, a.at, a.actor, a.scope, a.target, a.boundary_seq, a.store_rows,
                         a.journal_rows, a.idempotency_rows, a.completed_at)
        if target is not None:
            stmt = stmt.where(a.target == target)
        stmt = stmt.order_by(a.id.desc()).limit(check_limit(limit))
        return [AuditEntry(*row) for row in self._db.read(stmt)]
