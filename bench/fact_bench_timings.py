"""The fact bench's timed operations: percentiles, the timing loop, and each measured read,
write and acknowledgement of ``bench/bench_facts.py`` (whose docstring says what is measured).

Split from that script so the measuring stays apart from the data (``fact_bench_data.py``) and
from the run and the report (the script itself). Imported by that script after it has put the
repository root on ``sys.path``.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fact_bench_data import category_of, key_of, recent_pairs

from memroute.journal import Journal, PostgresJournal
from memroute.memory.facts import ACTIVE, Fact, FactInput, FactStore
from memroute.memory.facts.session import RenderCache, session_start
from memroute.serving.fact_requests import turn_pairs


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def timed(fn: Callable[[], Any], n: int, warmup: int) -> list[float]:
    """Milliseconds of each of ``n`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1e6)
    return out


# ---------------------------------------------------------------------------- measure
def plan(store: FactStore, uid: str) -> str:
    sql, names, _ = store._active_sql
    params: Any = {"user_id": uid, "now": time.time()}
    with store.engine.connect() as conn:
        cur = conn.connection.dbapi_connection.cursor()
        if store.backend == "sqlite":
            cur.execute("EXPLAIN QUERY PLAN " + sql, tuple(params[n] for n in names))
            return "; ".join(str(r[-1]) for r in cur.fetchall())
        cur.execute("EXPLAIN " + sql, params)
        return "; ".join(r[0].strip() for r in cur.fetchall())


def big_reads(store: FactStore, users: list[str], n: int, warmup: int,
              rng: random.Random) -> dict[str, list[float]]:
    """``store.active()`` of random 1,000-fact users, interleaved (rotating order, so drift in
    the machine's load hits all alike) with the same read split up on a held DBAPI connection:
    the driver's execute + fetchall of the store's compiled SQL, building the Fact tuples from
    those rows, and the query alone in the database (``count(*)`` over it: no rows to Python)."""
    sql, names, _ = store._active_sql
    count_sql = f"SELECT count(*) FROM ({sql}) AS a"
    make = Fact._make
    out: dict[str, list[float]] = {"active": [], "fetch": [], "build": [], "query": []}
    with store.engine.connect() as conn:
        dbapi = conn.connection.dbapi_connection

        def args_of(uid: str) -> Any:
            params: Any = {"user_id": uid, "now": time.time()}
            return params if names is None else tuple(params[k] for k in names)

        def active(uid: str) -> None:
            t0 = time.perf_counter_ns()
            store.active(uid)
            out["active"].append((time.perf_counter_ns() - t0) / 1e6)

        def split(uid: str) -> None:
            t0 = time.perf_counter_ns()
            cur = dbapi.cursor()
            cur.execute(sql, args_of(uid))
            rows = cur.fetchall()
            cur.close()
            t1 = time.perf_counter_ns()
            facts_ = [make((i, uid, k, v, c, s, ACTIVE, vf, None, rec, None, exp, None, None, t))
                      for i, k, v, c, s, vf, rec, exp, t in rows]
            t2 = time.perf_counter_ns()
            assert len(facts_) == len(rows)
            out["fetch"].append((t1 - t0) / 1e6)
            out["build"].append((t2 - t1) / 1e6)

        def query(uid: str) -> None:
            t0 = time.perf_counter_ns()
            cur = dbapi.cursor()
            cur.execute(count_sql, args_of(uid))
            got = cur.fetchall()[0][0]
            cur.close()
            out["query"].append((time.perf_counter_ns() - t0) / 1e6)
            assert got > 0

        steps = [active, split, query]
        for i in range(warmup + n):
            uid = rng.choice(users)
            for step in steps[i % 3:] + steps[:i % 3]:
                step(uid)
            if i < warmup:
                for xs in out.values():
                    xs.clear()
        if store.backend == "postgresql":
            dbapi.rollback()
    return out


def session_reads(store: FactStore, users: list[str], n: int, warmup: int, recent: int,
                  rng: random.Random) -> dict[str, list[float]]:
    """Session start as the endpoint builds it: cached, and right after a change (module doc)."""
    cache = RenderCache()
    out: dict[str, list[float]] = {"session": [], "session_changed": [], "json": []}
    counter = iter(range(10**9))

    def body(uid: str) -> bytes:  # what GET /v1/memory/session-start sends
        return session_start(store, uid, recent=recent, cache=cache).to_json_bytes()

    for uid in users:  # every user's session has started once: the cache is warm
        body(uid)
    for i in range(warmup + n):
        uid = rng.choice(users)
        t0 = time.perf_counter_ns()
        sent = body(uid)
        t1 = time.perf_counter_ns()
        got = json.loads(sent)
        t1b = time.perf_counter_ns()
        json.dumps(got)  # encoding the whole body each time, as without the cached fragment
        t2 = time.perf_counter_ns()
        j = rng.randrange(len(got["facts"]) + len(got["profile"]))
        store.assert_fact(uid, FactInput(key_of(j), f"changed {next(counter)}",
                                         category=category_of(j)))
        t3 = time.perf_counter_ns()
        sent_after = body(uid)
        t4 = time.perf_counter_ns()
        changed = json.loads(sent_after)
        assert len(got["recent_turns"]) == recent and len(changed["facts"]) == len(got["facts"])
        if i >= warmup:
            out["session"].append((t1 - t0) / 1e6)
            out["json"].append((t2 - t1b) / 1e6)
            out["session_changed"].append((t4 - t3) / 1e6)
    return out


def append_acks(n: int, warmup: int, journal_url: str = "") -> list[float]:
    """The turn-append acknowledgement: body parsing + the journal's durable append (SQLite, or
    the PostgreSQL journal at ``journal_url``: a commit waits for the WAL flush)."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-journal-"))
    try:
        opened = (PostgresJournal(journal_url) if journal_url
                  else Journal(tmp / "journal.sqlite3"))
        with opened as journal:
            now = time.time()
            for u in range(100):
                journal.append(recent_pairs(f"bench:j{u:03d}", 100, now))
            counter = iter(range(10**9))

            def ack() -> None:
                k = next(counter)
                body = {"turns": [{"user": f"my budget is now {k} euros",
                                   "assistant": "Noted, I will use that from now on.",
                                   "session_id": f"append-{k // 10}"}]}
                pairs = turn_pairs(body, f"bench:j{k % 100:03d}", max_chars=100_000)
                assert len(journal.append(pairs)) == 1

            return timed(ack, n, warmup)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
