"""The fact bench's data: synthetic users' fact rows, their bulk load, and recent turn-pairs.

Split from ``bench/bench_facts.py`` (which documents the data set and runs the bench): building
and loading the rows is one job, timing the store is another (``fact_bench_timings.py``).
Imported by that script after it has put the repository root on ``sys.path``.
"""

from __future__ import annotations

import random
import time

import sqlalchemy as sa

from memroute.memory.facts import (
    ACTIVE,
    EPHEMERAL,
    EXPLICIT,
    INFERRED,
    PROFILE,
    SUPERSEDED,
    TEMPORAL,
    FactStore,
)
from memroute.memory.facts.schema import fact_versions, facts
from memroute.memory.facts.versions import new_token
from memroute.types import TurnPair

DAY = 86400.0
SMALL_FACTS = 10
USERS_PER_TX = 10


def key_of(j: int) -> str:
    return f"pref.item_{j:04d}"


def category_of(j: int) -> str:
    r = j % 20
    return EPHEMERAL if r == 19 else PROFILE if r >= 16 else TEMPORAL


def user_rows(uid: str, n_facts: int, superseded: float, next_id: int, now: float,
              rng: random.Random) -> tuple[list[dict], list[dict], int]:
    """(active rows, superseded rows, next free id) of one user."""
    t0 = now - 30 * DAY
    active, old = [], []
    n_old = round(n_facts * superseded)
    with_old = set(rng.sample(range(n_facts), n_old))
    for j in range(n_facts):
        cat = category_of(j)
        src = INFERRED if j % 7 == 0 else EXPLICIT
        turn = 1000 + j if j % 2 == 0 else None
        base = {"user_id": uid, "key": key_of(j), "category": cat, "source": src,
                "turn_id": turn, "retracted_at": None}
        born = t0 + j
        if j in with_old:
            old_id, new_id = next_id, next_id + 1
            next_id += 2
            changed = t0 + 10 * DAY + j
            old.append({**base, "id": old_id, "value": f"earlier value {j} of {uid}, since changed",
                        "status": SUPERSEDED, "valid_from": born, "valid_until": changed,
                        "recorded_at": born, "ended_at": changed, "superseded_by": new_id,
                        "expires_at": born + DAY if cat == EPHEMERAL else None})
            born = changed
        else:
            new_id = next_id
            next_id += 1
        active.append({**base, "id": new_id, "value": f"value {j} of {uid}: something they said",
                       "status": ACTIVE, "valid_from": born, "valid_until": None,
                       "recorded_at": born, "ended_at": None, "superseded_by": None,
                       "expires_at": now + DAY if cat == EPHEMERAL else None})
    return active, old, next_id


def load(store: FactStore, users: list[str], small: list[str], n_facts: int, superseded: float,
         rng: random.Random) -> tuple[float, int]:
    """Bulk insert; (seconds, rows)."""
    now = time.time()
    t0 = time.perf_counter()
    next_id, rows = 1, 0
    groups = [(users[i:i + USERS_PER_TX], n_facts) for i in range(0, len(users), USERS_PER_TX)]
    groups += [(small[i:i + 100], SMALL_FACTS) for i in range(0, len(small), 100)]
    for group, n in groups:
        active, old = [], []
        for uid in group:
            a, o, next_id = user_rows(uid, n, superseded, next_id, now, rng)
            active += a
            old += o
        with store.engine.begin() as conn:
            conn.execute(sa.insert(facts), active)
            if old:
                conn.execute(sa.insert(facts), old)
            conn.execute(sa.insert(fact_versions),
                         [{"user_id": uid, "token": new_token()} for uid in group])
        rows += len(active) + len(old)
    with store.engine.begin() as conn:
        if store.backend == "postgresql":
            conn.execute(sa.text("SELECT setval(pg_get_serial_sequence('facts', 'id'), "
                                 "(SELECT max(id) FROM facts))"))
    if store.backend == "postgresql":
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("VACUUM ANALYZE facts"))
    else:
        with store.engine.begin() as conn:
            conn.execute(sa.text("ANALYZE"))
    return time.perf_counter() - t0, rows


def recent_pairs(uid: str, n: int, now: float) -> list[TurnPair]:
    return [TurnPair(uid, f"s{i // 4}", i, f"what did we say about item {i}?",
                     f"we said item {i} is something {uid} cares about", int(now - DAY * (n - i)),
                     "bench", created_at=now - DAY * (n - i)) for i in range(n)]
