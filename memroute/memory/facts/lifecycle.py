"""A fact's lifecycle inside the caller's write transaction: assert (supersede or restate) and
retract (the rules of the MSOCA memory layer; the schema enforces the shape of each, see
:mod:`memroute.memory.facts.schema`).

- **Supersession** (:func:`assert_fact`) is one transaction: the key's active row is marked
  ``superseded`` (``valid_until`` = the new ``valid_from``, ``ended_at`` = now,
  ``superseded_by`` = the new id) and the new row is inserted ``active``. ``profile`` keys work
  the same way (last write wins, the old row kept), ``ephemeral`` rows carry ``expires_at =
  valid_from + ephemeral_ttl_s`` and active reads hide them from then on. Nothing is deleted
  by supersession, retraction or expiry; only erasure (:mod:`.erasures`) deletes.
- **Restatement** of the active value (same value and category) is a no-op returning the
  active fact, unless (a) the fact is an expired ephemeral one (it becomes visible again as a
  new row) or (b) the source ranks higher (``inferred`` -> ``confirmed``/``explicit``): then
  it is an ordinary supersession with the same value, so the timeline shows when the value
  stopped being a guess. ``explicit`` and ``confirmed`` rank alike; a lower rank never
  downgrades. A restatement's own ``valid_from`` is ignored (the value held already).
- **Concurrency.** SQLite: every write transaction is ``BEGIN IMMEDIATE`` (one writer at a
  time per file). PostgreSQL (READ COMMITTED): the writer first takes a transaction-level
  advisory lock on (user, key), then reads the active row ``FOR UPDATE``. The advisory lock is
  what makes the first insert of a key safe (no row to lock yet) and spares a waiter the
  READ COMMITTED re-check that would otherwise make the row it waited for vanish. The unique
  partial index ``facts_active`` is the last guard: whatever writes, one active row per key.
- **Time.** World time is ``valid_from``/``valid_until``; transaction time is ``recorded_at``,
  ``ended_at``, ``retracted_at``. Transaction time never runs backwards within a key (a
  replica whose clock lags writes the newest ``recorded_at`` again), and an interval never
  inverts (a backdated successor closes its predecessor at the predecessor's start).

Every function bumps the user's version token (:mod:`.versions`) when it changes a row, so
cached active facts are dropped by every replica.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memroute.errors import NotFound
from memroute.memory.facts import versions
from memroute.memory.facts.locks import fact_key_lock
from memroute.memory.facts.schema import FACT_COLUMNS, IS_ACTIVE, facts
from memroute.memory.facts.types import (
    ACTIVE,
    EPHEMERAL,
    RETRACTED,
    SOURCE_RANK,
    SUPERSEDED,
    Fact,
    FactInput,
)

_c = facts.c


def restates(current: Fact, new: FactInput, now: float) -> bool:
    """Whether asserting ``new`` over the active ``current`` changes nothing (module doc)."""
    if current.value != new.value or current.category != new.category:
        return False
    if current.expires_at is not None and current.expires_at <= now:
        return False
    return SOURCE_RANK[new.source] <= SOURCE_RANK[current.source]


def _lock_key(conn: Connection, backend: str, user_id: str, key: str) -> None:
    """PostgreSQL: serialize writers of (user, key) until this transaction ends."""
    if backend == "postgresql":
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(fact_key_lock(user_id, key))))


def _for_update(query: sa.Select, backend: str) -> sa.Select:
    return query.with_for_update() if backend == "postgresql" else query


def assert_fact(conn: Connection, uid: str, new: FactInput, *, at: float,
                ephemeral_ttl_s: float, backend: str) -> Fact:
    """Record the checked ``new`` for the validated ``uid`` at transaction time ``at``; the
    active fact of its key afterwards: the new row, or the existing one for a restatement."""
    valid_from = at if new.valid_from is None else float(new.valid_from)
    _lock_key(conn, backend, uid, new.key)
    row = conn.execute(_for_update(
        sa.select(*FACT_COLUMNS).where(_c.user_id == uid, _c.key == new.key, IS_ACTIVE), backend
    )).first()
    current = Fact(*row) if row is not None else None
    if current is not None and restates(current, new, at):
        return current
    recorded = at if current is None else max(at, current.recorded_at)
    if current is not None:  # first out of the unique active slot, then the new row in
        conn.execute(sa.update(facts).where(_c.id == current.id).values(
            status=SUPERSEDED, valid_until=max(valid_from, current.valid_from),
            ended_at=recorded,
        ))
    expires = valid_from + ephemeral_ttl_s if new.category == EPHEMERAL else None
    values = {
        "user_id": uid, "key": new.key, "value": new.value, "category": new.category,
        "source": new.source, "status": ACTIVE, "valid_from": valid_from,
        "recorded_at": recorded, "expires_at": expires, "turn_id": new.turn_id,
    }
    new_id = int(conn.execute(sa.insert(facts).values(**values)).inserted_primary_key[0])
    if current is not None:
        conn.execute(sa.update(facts).where(_c.id == current.id).values(superseded_by=new_id))
    versions.bump(conn, uid)
    return Fact(id=new_id, valid_until=None, ended_at=None, retracted_at=None,
                superseded_by=None, **values)


def retract(conn: Connection, uid: str, fid: int, *, at: float, backend: str) -> Fact:
    """Mark one of ``uid``'s facts ``retracted`` (kept for the audit). An active fact's world
    interval ends at ``at``; a superseded one keeps its end. Idempotent."""
    row = conn.execute(_for_update(
        sa.select(*FACT_COLUMNS).where(_c.id == fid, _c.user_id == uid), backend
    )).first()
    if row is None:  # unknown, or another user's: the same answer for both
        raise NotFound(f"no fact {fid} for this user", field="fact_id")
    fact = Fact(*row)
    if fact.status == RETRACTED:
        return fact
    changes: dict[str, object] = {"status": RETRACTED, "retracted_at": max(at, fact.recorded_at)}
    if fact.status == ACTIVE:
        changes["valid_until"] = max(at, fact.valid_from)
        changes["ended_at"] = changes["retracted_at"]
    conn.execute(sa.update(facts).where(_c.id == fid).values(**changes))
    versions.bump(conn, uid)
    return fact._replace(**changes)
