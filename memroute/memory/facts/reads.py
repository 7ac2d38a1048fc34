"""The fact store's read queries: session start's active facts (compiled once and run on the
driver's own cursor), a key's timeline, and a key as of a world and a transaction time."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from memroute.memory.facts.schema import FACT_COLUMNS, IS_ACTIVE, facts
from memroute.memory.facts.types import ACTIVE, Fact

_c = facts.c

# What session start reads: the columns an active row can hold anything in. Its status is
# 'active', its user the one asked for and its ends NULL by the facts_lifecycle CHECK, so they
# are filled in here: fewer columns is most of the cost of a thousand-row read in Python.
_ACTIVE_COLUMNS = (_c.id, _c.key, _c.value, _c.category, _c.source, _c.valid_from,
                   _c.recorded_at, _c.expires_at, _c.turn_id)


def active_query(user_id: Any, now: Any) -> sa.Select:
    """Session start: the user's active, unexpired facts by key. One range scan of the partial
    index ``facts_active`` (the literal ``status = 'active'`` lets both planners match it, and
    the index order is the key order, so there is no sort)."""
    return (
        sa.select(*_ACTIVE_COLUMNS)
        .where(_c.user_id == user_id, IS_ACTIVE,
               sa.or_(_c.expires_at.is_(None), _c.expires_at > now))
        .order_by(_c.key)
    )


def active_facts(user_id: str, rows: list[Any]) -> list[Fact]:
    """Facts from :func:`active_query`'s rows, the columns it leaves out filled in."""
    make = Fact._make
    return [make((i, user_id, k, v, c, s, ACTIVE, vf, None, rec, None, exp, None, None, t))
            for i, k, v, c, s, vf, rec, exp, t in rows]


def timeline_query(user_id: str, key: str) -> sa.Select:
    """Every row of ``key`` (all statuses, expired ones too) by ``recorded_at``."""
    return (sa.select(*FACT_COLUMNS).where(_c.user_id == user_id, _c.key == key)
            .order_by(_c.recorded_at, _c.id))


def as_of_query(user_id: str, key: str, *, world: float, known: float) -> sa.Select:
    """The row of ``key`` true in the world at ``world`` as known at ``known``: recorded by
    then, not yet retracted then, whose world interval (its end only if that end was recorded
    by then, and an ephemeral fact's expiry) holds ``world``; the newest recorded one first."""
    return (
        sa.select(*FACT_COLUMNS)
        .where(
            _c.user_id == user_id, _c.key == key,
            _c.recorded_at <= known,
            sa.or_(_c.retracted_at.is_(None), _c.retracted_at > known),
            _c.valid_from <= world,
            sa.or_(_c.ended_at.is_(None), _c.ended_at > known, _c.valid_until > world),
            sa.or_(_c.expires_at.is_(None), _c.expires_at > world),
        )
        .order_by(_c.recorded_at.desc(), _c.id.desc())
        .limit(1)
    )


Compiled = tuple[str, Any, Any]  # (SQL, positional parameter names or None, defaults)


def compiled(query: sa.Select, dialect: Any) -> Compiled:
    """``query`` compiled once for ``dialect``, for :func:`run` on a raw cursor."""
    c = query.compile(dialect=dialect)
    return c.string, c.positiontup, c.params  # params: the defaults


def run(cur: Any, query: Compiled, params: dict[str, Any]) -> list[Any]:
    """Run a :func:`compiled` query on the driver's cursor: SQLAlchemy's Row objects are a
    third of the time of a thousand-row read."""
    sql, names, defaults = query
    params = {**defaults, **params}
    if names is not None:  # a positional paramstyle (SQLite's qmark)
        params = tuple(params[n] for n in names)  # type: ignore[assignment]
    cur.execute(sql, params)
    return cur.fetchall()
