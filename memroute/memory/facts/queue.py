"""The extraction queue: turn-pairs stored but not yet extracted, durable and shared.

The background lane enqueues every stored turn-pair with its token count (the extraction
model's tokenizer) and learns each user's unextracted total in the same transaction. Past the
threshold it runs one extraction under the user's lock in the fact store: it reads the user's
queued turns, extracts, and removes exactly the turns it read (turns enqueued meanwhile stay
for the next run). Because the queue is in the fact database, every ingress replica feeds the
same totals, a second trigger on any replica finds the lock held and leaves the turns queued,
and a restart loses nothing: :meth:`ExtractionQueue.users_over` lists who is due.

Removing a queue row deletes no memory: the turn-pair itself is in the journal and the vector
store; the row is only the note that it still has to be read for facts.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memroute.memory.facts import erasures, recent
from memroute.memory.facts.schema import extraction_queue
from memroute.types import TurnPair, validate_user_id

_q = extraction_queue.c
Transaction = Callable[..., AbstractContextManager[Connection]]


class ExtractionQueue:
    """The queue on one fact store's database (``FactStore.queue``)."""

    def __init__(self, transaction: Transaction) -> None:
        self._tx = transaction  # FactStore.transaction(what, write=...)

    def enqueue(
        self, pairs: Sequence[TurnPair], tokens: Sequence[int], *, recent_keep: int = 0
    ) -> dict[str, int]:
        """Queue ``pairs`` (``tokens[i]`` tokens each; a pair queued already keeps its row) and
        return each of their users' queued token total. ``recent_keep`` > 0: in the same
        transaction, record them as their users' newest turns too (``FactStore.record_turns``),
        so the flusher's batch costs the fact database one transaction."""
        if len(pairs) != len(tokens):
            raise ValueError("one token count per pair")
        rows: dict[tuple[str, int], dict[str, Any]] = {}
        for p, n in zip(pairs, tokens, strict=True):
            uid = validate_user_id(p.user_id)
            rows[(uid, p.id)] = {"user_id": uid, "turn_id": p.id, "tokens": int(n),
                                 "session_time": int(p.session_time),
                                 "created_at": float(p.created_at),
                                 "pair": json.dumps(asdict(p), ensure_ascii=False)}
        if not rows:
            return {}
        users = sorted({uid for uid, _ in rows})
        with self._tx("queue turns for extraction", write=True) as conn:
            by_user: dict[str, list[int]] = defaultdict(list)
            for uid, tid in rows:
                by_user[uid].append(tid)
            known = {(r.user_id, r.turn_id) for uid, ids in by_user.items()
                     for r in conn.execute(sa.select(_q.user_id, _q.turn_id).where(
                         _q.user_id == uid, _q.turn_id.in_(ids)))}
            new = [r for k, r in rows.items() if k not in known]
            if new:
                conn.execute(sa.insert(extraction_queue), new)
            if recent_keep > 0:
                recent.record(conn, pairs, recent_keep)
            return self._totals(conn, users)

    def pending_tokens(self, user_id: str) -> int:
        uid = validate_user_id(user_id)
        with self._tx("read the extraction queue", write=False) as conn:
            return self._totals(conn, [uid]).get(uid, 0)

    def queued(self, user_id: str) -> list[TurnPair]:
        """The user's queued turns in conversation order."""
        return self.snapshot(user_id)[1]

    def snapshot(self, user_id: str) -> tuple[int, list[TurnPair]]:
        """The erasure mark (:mod:`.erasures`) and the user's queued turns, read together:
        what an extraction run starts from."""
        uid = validate_user_id(user_id)
        with self._tx("read the extraction queue", write=False) as conn:
            mark = erasures.mark(conn)
            rows = conn.execute(sa.select(_q.pair).where(_q.user_id == uid)
                                .order_by(_q.session_time, _q.created_at, _q.turn_id)).all()
        return mark, [TurnPair(**json.loads(r.pair)) for r in rows]

    def remove(self, user_id: str, turn_ids: Iterable[int]) -> int:
        """Take the turns an extraction run read off the queue; the number removed."""
        uid = validate_user_id(user_id)
        ids = list(turn_ids)
        if not ids:
            return 0
        with self._tx("update the extraction queue", write=True) as conn:
            return int(conn.execute(sa.delete(extraction_queue).where(
                _q.user_id == uid, _q.turn_id.in_(ids))).rowcount)

    def users_over(self, threshold: int, limit: int = 1000) -> list[str]:
        """Users whose queued tokens reach ``threshold`` (restart recovery), largest first."""
        total = sa.func.sum(_q.tokens)
        with self._tx("read the extraction queue", write=False) as conn:
            return [r[0] for r in conn.execute(
                sa.select(_q.user_id).group_by(_q.user_id).having(total >= threshold)
                .order_by(total.desc(), _q.user_id).limit(limit))]

    def stats(self) -> dict[str, int]:
        with self._tx("read the extraction queue", write=False) as conn:
            users, turns = conn.execute(sa.select(sa.func.count(sa.distinct(_q.user_id)),
                                                  sa.func.count())).one()
        return {"users_queued": int(users), "turns_queued": int(turns)}

    @staticmethod
    def _totals(conn: Connection, users: Sequence[str]) -> dict[str, int]:
        return {r[0]: int(r[1]) for r in conn.execute(
            sa.select(_q.user_id, sa.func.sum(_q.tokens)).where(_q.user_id.in_(list(users)))
            .group_by(_q.user_id))}


__all__ = ["ExtractionQueue"]
