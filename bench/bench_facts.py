"""Fact store latency: session start, the supersession write and the turn-append acknowledgement,
SQLite and PostgreSQL.

    python bench/bench_facts.py [--users 100] [--facts 1000] [--reads 500] [--writes 300]
                                [--small-users 100] [--superseded 0.2] [--seed 0]
                                [--backends sqlite postgresql]

Data per back end (a fresh database each): ``--users`` users with ``--facts`` active facts each
(keys ``pref.item_0000`` ..; 80% temporal, 15% profile, 5% ephemeral expiring a day from now;
values ~50 characters, every other fact with a turn id), plus one superseded older row for
``--superseded`` of the keys (history that the active read must skip), and ``--small-users``
users with 10 active facts each (the common case). Loaded in bulk, not through ``assert_fact``:
rows are built in Python with explicit ids (so each superseded row can name its successor) and
inserted through the store's engine with ``conn.execute(insert(facts), rows)`` (executemany),
one transaction per 10 users, active rows before the superseded ones that reference them (the
foreign key is checked per statement). PostgreSQL's identity sequence is then moved past the
largest id, and both databases are ANALYZEd.

SQLite is a WAL file in a fresh temp folder (the store's settings: synchronous=FULL, so every
commit fsyncs); PostgreSQL 15 is a throwaway local server (tests/integration/postgres.py:
initdb + pg_ctl on 127.0.0.1 over TCP, fsync on, default settings), client and server on the
same machine.

Every user also gets its ``fact_versions`` token (as a first write would give it) and
``--turns`` recent turn-pairs through ``record_turns`` (the background lane's write).

Measured, one client, sequential, after a warm-up (``--reads // 10`` calls of each, excluded):

- **session start** as the endpoint builds it (``session_start()`` with the store's recent
  turns and a ``RenderCache``, then ``to_json_bytes()``: the HTTP body) of a random 1,000-fact
  user: ``cached`` (the
  user's facts unchanged since the last session start: one token lookup, the recent-turns read,
  the rendered facts reused) and ``after a change`` (an untimed supersession of one of the
  user's facts right before each timed call: the full read, render and encoding), and, for
  comparison, a plain ``json.dumps`` of the whole body (what each call would cost without the
  facts' part encoded once per snapshot);
- **turn append** acknowledgement: parsing a one-turn ``POST /v1/memory/turns`` body
  (``fact_requests.turn_pairs``) and the journal's durable append (SQLite WAL, fsync per
  commit; and the PostgreSQL journal several replicas share, its commit waiting for the WAL
  flush) into a journal holding 10,000 entries. The journal does not depend on the fact store;
- ``active()`` on a store with the cache off (``cache_users=0``), of a random 1,000-fact
  user, and of a random 10-fact user;
- where one 1,000-row read's time goes (medians): the raw driver ``execute`` + ``fetchall`` of
  the store's compiled SQL on a held DBAPI connection, building the ``Fact`` tuples from those
  rows, and the rest (pool checkout with pre-ping, BEGIN / COMMIT, argument checks);
- ``assert_fact`` of a new value for an existing key of a random user (a supersession: the
  background lane's write), ``--writes`` writes;
- ``timeline()`` of a superseded key, and ``user_lock`` taken and released.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(1, str(ROOT))
from fact_bench_data import SMALL_FACTS, category_of, key_of, load, recent_pairs  # noqa: E402
from fact_bench_timings import (  # noqa: E402
    append_acks,
    big_reads,
    pct,
    plan,
    session_reads,
    timed,
)
from machine import machine_info  # noqa: E402  (bench/machine.py, beside this script)

from memroute.memory.facts import ACTIVE, FactInput, FactStore  # noqa: E402


def run_backend(backend: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    users = [f"bench:u{i:04d}" for i in range(args.users)]
    small = [f"bench:s{i:04d}" for i in range(args.small_users)]
    store = FactStore(url)
    uncached = FactStore(url, cache_users=0)
    try:
        load_s, rows = load(store, users, small, args.facts, args.superseded, rng)
        now = time.time()
        store.record_turns([p for u in users + small for p in recent_pairs(u, args.turns, now)],
                           keep=args.turns)
        print(f"[{backend}] loaded {rows:,} rows in {load_s:.1f} s "
              f"({rows / load_s:,.0f} rows/s)", file=sys.stderr)
        got = store.active(users[0])
        assert len(got) == args.facts, (len(got), args.facts)
        assert len(store.active(small[0])) == SMALL_FACTS
        warm = max(1, args.reads // 10)
        res: dict[str, Any] = {"rows": rows, "load_s": load_s, "plan": plan(store, users[0])}
        res.update(session_reads(store, users, args.reads, warm, min(5, args.turns), rng))
        res["big"] = big_reads(uncached, users, args.reads, warm, rng)
        res["active_10"] = timed(lambda: uncached.active(rng.choice(small)), args.reads, warm)
        n_sup = max(1, round(args.facts * args.superseded))
        history = [(u, f.key) for u in users[:5] for f in store.active(u)
                   if len(store.timeline(u, f.key)) > 1][:n_sup]
        res["timeline"] = timed(lambda: store.timeline(*rng.choice(history)), args.reads, warm)
        counter = iter(range(10**9))

        def supersede() -> None:
            uid, j = rng.choice(users), rng.randrange(args.facts)
            f = store.assert_fact(uid, FactInput(key_of(j), f"new value {next(counter)} of {uid}",
                                                 category=category_of(j), turn_id=next(counter)))
            assert f.status == ACTIVE

        res["assert"] = timed(supersede, args.writes, max(1, args.writes // 10))

        def lock() -> None:
            with store.user_lock(rng.choice(users)) as ok:
                assert ok

        res["lock"] = timed(lock, max(20, args.writes // 3), 5)
        after = store.active(users[0])
        assert len(after) == args.facts
        res["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
        print(f"[{backend}] done, load {res['load_avg_1m_after']}", file=sys.stderr)
        return res
    finally:
        uncached.close()
        store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", type=int, default=100)
    ap.add_argument("--facts", type=int, default=1000)
    ap.add_argument("--reads", type=int, default=500)
    ap.add_argument("--writes", type=int, default=300)
    ap.add_argument("--small-users", type=int, default=100)
    ap.add_argument("--turns", type=int, default=20, help="recent turns recorded per user")
    ap.add_argument("--superseded", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backends", nargs="+", default=["sqlite", "postgresql"],
                    choices=["sqlite", "postgresql"])
    ap.add_argument("--journal-only", action="store_true",
                    help="only the turn-append acknowledgement (SQLite and PostgreSQL journals)")
    args = ap.parse_args()

    info = machine_info(("sqlalchemy", "psycopg", "psycopg-binary"))
    import sqlite3

    info["sqlite"] = sqlite3.sqlite_version
    results: dict[str, dict[str, Any]] = {}
    for backend in args.backends:
        tmp = Path(tempfile.mkdtemp(prefix="bench-facts-"))
        server = None
        try:
            if backend == "sqlite":
                url = f"sqlite:///{tmp / 'facts.sqlite3'}"
            else:
                from tests.integration.postgres import PostgresServer

                server = PostgresServer().start()
                url = server.create_database("bench_facts")
                with sa.create_engine(url).connect() as conn:
                    info["postgresql"] = conn.scalar(sa.text("SHOW server_version"))
                print(f"[postgresql] throwaway server on 127.0.0.1:{server.port} "
                      f"started in {server.start_s:.1f} s", file=sys.stderr)
            if args.journal_only:
                results[backend] = {}
            else:
                results[backend] = run_backend(backend, url, args)
            if server is not None:  # the shared journal of several replicas (issue 16)
                results[backend]["acks"] = append_acks(
                    args.writes, max(1, args.writes // 10), server.create_database("bench_journal"))
        finally:
            if server is not None:
                server.stop()
            shutil.rmtree(tmp, ignore_errors=True)

    print("machine:", ", ".join(f"{k}={v}" for k, v in info.items()))
    print(f"users {args.users} x {args.facts} active facts + {args.superseded:.0%} superseded "
          f"once, {args.small_users} users x {SMALL_FACTS}; {args.reads} reads, "
          f"{args.writes} writes, one client, after a warm-up")
    for backend, r in results.items():
        if "rows" not in r:
            continue
        print(f"{backend}: {r['rows']:,} rows loaded in {r['load_s']:.1f} s; load average "
              f"after {r['load_avg_1m_after']}; plan: {r['plan']}")
    acks = append_acks(args.writes, max(1, args.writes // 10))
    print()
    print("| back end | operation | n | p50 | p95 | p99 | target |")
    print("|---|---|---|---|---|---|---|")
    print(f"| sqlite journal (all) | turn append ack (parse + fsync'd append) | {len(acks)} | "
          f"{pct(acks, .5):.2f} ms | {pct(acks, .95):.2f} ms | {pct(acks, .99):.2f} ms | "
          f"p95 <= 5 ms |")
    if "acks" in results.get("postgresql", {}):
        pg = results["postgresql"]["acks"]
        print(f"| postgresql journal | turn append ack (parse + committed append) | {len(pg)} | "
              f"{pct(pg, .5):.2f} ms | {pct(pg, .95):.2f} ms | {pct(pg, .99):.2f} ms | "
              f"p95 <= 5 ms |")
    if args.journal_only:
        return
    ops = [
        ("session", f"session start, {args.facts:,} facts, cached", "p95 <= 2 ms"),
        ("session_changed", f"session start, {args.facts:,} facts, after a change", ""),
        ("json", "`json.dumps` of the whole body (for comparison)", ""),
        ("active", f"`active()` uncached, {args.facts:,} facts", ""),
        ("active_10", f"`active()` uncached, {SMALL_FACTS} facts", ""),
        ("assert", "`assert_fact` supersession", "p95 <= 5 ms (the ack's)"),
        ("timeline", "`timeline()` of a changed key", ""),
        ("lock", "`user_lock` take + release", ""),
    ]
    for backend, r in results.items():
        for name, label, target in ops:
            xs = r["big"]["active"] if name == "active" else r[name]
            print(f"| {backend} | {label} | {len(xs)} | {pct(xs, .5):.2f} ms | "
                  f"{pct(xs, .95):.2f} ms | {pct(xs, .99):.2f} ms | {target} |")
    print()
    print(f"Where a {args.facts:,}-fact `active()` goes (medians):\n")
    print("| back end | `active()` | driver execute + fetchall | of which the query alone "
          "(`count(*)`) | build Fact tuples | rest (pool, pre-ping, BEGIN/COMMIT, checks) |")
    print("|---|---|---|---|---|---|")
    for backend, r in results.items():
        m = {k: pct(v, .5) for k, v in r["big"].items()}
        print(f"| {backend} | {m['active']:.2f} ms | {m['fetch']:.2f} ms | {m['query']:.2f} ms | "
              f"{m['build']:.2f} ms | {m['active'] - m['fetch'] - m['build']:.2f} ms |")


if __name__ == "__main__":
    main()
