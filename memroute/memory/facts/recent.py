"""The newest turn-pairs of each user, kept beside the facts for session start.

The vector store can list a user's memories but not the newest few: Milvus has no ORDER BY,
so "the last five turns" would mean reading every row of the user. The background lane writes
each stored turn-pair here too and trims the user's rows to the newest ``keep``; session start
reads them with one ``ORDER BY ... LIMIT`` range scan of ``recent_turns_order``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memroute.memory.facts.schema import recent_turns
from memroute.types import TurnPair, memory_of

_r = recent_turns.c
_NEWEST_FIRST = (_r.session_time.desc(), _r.created_at.desc(), _r.turn_id.desc())
_COLUMNS = (_r.turn_id, _r.user_id, _r.text, _r.session_time, _r.source_model, _r.created_at,
            _r.session_id, _r.turn_index)  # Memory's field order


def record(conn: Connection, pairs: Sequence[TurnPair], keep: int) -> int:
    """Upsert ``pairs`` (a retried write replaces its row) and trim each of their users to the
    newest ``keep``; the number of rows written."""
    by_user: dict[str, dict[int, TurnPair]] = defaultdict(dict)
    for p in pairs:
        by_user[p.user_id][p.id] = p  # the last copy of a repeated pair wins
    for uid, kept in by_user.items():
        conn.execute(sa.delete(recent_turns).where(_r.user_id == uid,
                                                   _r.turn_id.in_(list(kept))))
        conn.execute(sa.insert(recent_turns), [_row(p) for p in kept.values()])
        newest = (sa.select(_r.turn_id).where(_r.user_id == uid).order_by(*_NEWEST_FIRST)
                  .limit(keep).scalar_subquery())
        conn.execute(sa.delete(recent_turns).where(_r.user_id == uid, _r.turn_id.not_in(newest)))
    return sum(len(k) for k in by_user.values())


def newest_query(user_id: Any, n: Any) -> sa.Select:
    """The user's newest ``n`` turn-pairs, newest first, as :class:`Memory` fields."""
    return sa.select(*_COLUMNS).where(_r.user_id == user_id).order_by(*_NEWEST_FIRST).limit(n)


def _row(p: TurnPair) -> dict[str, object]:
    m = memory_of(p)
    return {"user_id": p.user_id, "turn_id": m.id, "session_id": p.session_id,
            "turn_index": p.turn_index, "session_time": int(p.session_time),
            "created_at": float(p.created_at), "source_model": p.source_model, "text": m.text}


__all__ = ["newest_query", "record"]
