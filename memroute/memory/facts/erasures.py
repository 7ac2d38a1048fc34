"""Erasure marks: an extraction that was running while its user was erased writes nothing.

An extraction reads a user's turns, then spends seconds to minutes in the model before it
writes facts. If the user (or their tenant) is erased in between, those writes would bring
facts back after the erasure said they were gone. So every erasure leaves a row in
``erasures`` (a sha256 digest of the user id or tenant, never the id itself), the extraction
notes the newest row's id before it reads its turns (:func:`mark`), and each of its writes
checks, inside the write's transaction, that no row for its user or tenant came after
(:func:`erased_since`).

On PostgreSQL the check and the erasure's deletes are ordered by a per-user and a per-tenant
advisory transaction lock (shared by writes, exclusive for an erasure), so a write that passed
the check commits before the erasure deletes, or sees its row. SQLite has one writer at a time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memroute.memory.facts.schema import (
    erasures,
    extraction_queue,
    fact_keys,
    fact_locks,
    fact_versions,
    facts,
    recent_turns,
)
from memroute.memory.facts.types import UserErased
from memroute.namespace import SEPARATOR

_e = erasures.c
_LOCK_DOMAIN = b"memroute-erasure\x1f"


def user_scope(user_id: str) -> str:
    return f"user\x1f{user_id}"


def tenant_scope(tenant: str) -> str:
    return f"tenant\x1f{tenant}"


def of_tenant(tenant: str) -> Callable[[sa.ColumnElement[str]], sa.ColumnElement[bool]]:
    """The :func:`erase` selector of every user ``tenant:*`` (``tenant`` validated first)."""
    prefix = f"{tenant}{SEPARATOR}"
    upper = f"{tenant}{chr(ord(SEPARATOR) + 1)}"  # 'acme;': the first id after 'acme:*'

    def of(col: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
        # the range is an index scan; the substr test keeps it exact under any collation
        return sa.and_(col >= prefix, col < upper, sa.func.substr(col, 1, len(prefix)) == prefix)

    return of


def _names(user_id: str) -> list[str]:
    """The scopes whose erasure removes ``user_id``: the user and, if any, its tenant."""
    tenant, sep, _ = user_id.partition(SEPARATOR)
    return [user_scope(user_id)] + ([tenant_scope(tenant)] if sep else [])


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8")).hexdigest()


def record(conn: Connection, scope: str, at: float) -> None:
    """Note an erasure of ``scope`` (:func:`user_scope` / :func:`tenant_scope`)."""
    conn.execute(sa.insert(erasures).values(digest=_digest(scope), erased_at=float(at)))


def mark(conn: Connection) -> int:
    """The newest erasure's id (0 if none): what a later :func:`erased_since` compares to."""
    return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(_e.id), 0))).scalar_one())


def erased_since(conn: Connection, user_id: str, since: int) -> bool:
    """Whether ``user_id`` or its tenant was erased after the erasure numbered ``since``."""
    digests = [_digest(n) for n in _names(user_id)]
    row = conn.execute(sa.select(_e.id).where(_e.digest.in_(digests), _e.id > since)
                       .limit(1)).first()
    return row is not None


def erase(
    conn: Connection, of: Callable[[sa.ColumnElement[str]], sa.ColumnElement[bool]], scope: str,
    *, backend: str, now: float,
) -> int:
    """Delete the facts, key descriptions, version rows, recent turns and queued turns of the
    users ``of`` selects and note the erasure of ``scope``; the number of fact and turn rows removed."""
    if backend == "postgresql":
        lock_for_erasure(conn, [scope])
    record(conn, scope, now)
    removed = conn.execute(sa.delete(facts).where(of(facts.c.user_id))).rowcount
    for table in (recent_turns, extraction_queue):
        removed += conn.execute(sa.delete(table).where(of(table.c.user_id))).rowcount
    conn.execute(sa.delete(fact_versions).where(of(fact_versions.c.user_id)))
    conn.execute(sa.delete(fact_keys).where(of(fact_keys.c.user_id)))
    if backend == "sqlite":  # expired leases name the user too; held ones stay
        conn.execute(sa.delete(fact_locks).where(of(fact_locks.c.user_id),
                                                 fact_locks.c.expires_at <= float(now)))
    return int(removed)


def refuse_if_erased(conn: Connection, user_id: str, since: int, backend: str) -> None:
    """:class:`UserErased` if ``user_id`` was erased after ``since``; on PostgreSQL the check
    holds its shared locks to commit, so an erasure waits for this write."""
    if backend == "postgresql":
        lock_for_write(conn, user_id)
    if erased_since(conn, user_id, since):
        raise UserErased(f"user {user_id[:40]!r} was erased while this extraction ran; "
                         "its facts are not written", field="user_id")


def lock_for_write(conn: Connection, user_id: str) -> None:
    """PostgreSQL: a write checked against erasures holds these until it commits."""
    for key in _lock_keys(_names(user_id)):
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock_shared(key)))


def lock_for_erasure(conn: Connection, scopes: Sequence[str]) -> None:
    """PostgreSQL: an erasure waits for the checked writes in flight, and holds them off."""
    for key in _lock_keys(scopes):
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(key)))


def _lock_keys(scopes: Sequence[str]) -> list[int]:
    """64-bit advisory lock keys, sorted: every holder takes them in one order."""
    return sorted(int.from_bytes(hashlib.sha256(_LOCK_DOMAIN + s.encode("utf-8")).digest()[:8],
                                 "big", signed=True) for s in scopes)
