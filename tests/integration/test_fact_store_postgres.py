"""The fact store on a real PostgreSQL server (a throwaway one on 127.0.0.1, see postgres.py):
the shared behaviour suite of tests/fact_store_cases.py, plus what only PostgreSQL has (the
session advisory lock dies with its connection, the plan, the C collation)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from memroute.memory.facts import FactInput, FactStore
from memroute.memory.facts.locks import user_lock_key
from memroute.memory.facts.reads import active_query
from tests.fact_cache_cases import FactCacheCases
from tests.fact_store_cases import ALICE, FactStoreCases, bulk_load, race
from tests.integration.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)


@pytest.fixture
def make_store(postgres_url):  # noqa: F811 (the imported fixture)
    opened: list[FactStore] = []

    def make(**kwargs) -> FactStore:
        store = FactStore(postgres_url, **kwargs)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


class TestPostgresFactStore(FactStoreCases):
    pass


class TestPostgresFactCache(FactCacheCases):
    pass


def _advisory_holders(store, user_id) -> list[int]:
    key = user_lock_key(user_id)
    query = sa.text(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
        "AND ((classid::bigint << 32) | objid::bigint) = :key AND objsubid = 1"
    )
    with store.engine.connect() as conn:
        return [r[0] for r in conn.execute(query, {"key": key & 0xFFFF_FFFF_FFFF_FFFF})]


def test_the_lock_is_a_session_advisory_lock_on_a_dedicated_connection(make_store):
    a = make_store()
    assert a.try_user_lock(ALICE, owner="a")
    pid = a._locks.holder_pid(ALICE)
    assert _advisory_holders(a, ALICE) == [pid]
    assert a.release_user_lock(ALICE, owner="a")
    assert _advisory_holders(a, ALICE) == []


def test_the_lock_dies_with_its_holders_connection(make_store):
    a, b = make_store(), make_store()
    assert a.try_user_lock(ALICE, owner="a")
    assert not b.try_user_lock(ALICE, owner="b")
    with b.engine.connect() as conn:  # the holder's process dies: the server closes its session
        conn.execute(sa.select(sa.func.pg_terminate_backend(a._locks.holder_pid(ALICE))))
    assert b.try_user_lock(ALICE, owner="b")
    a.close()  # releasing a lock whose session is gone is harmless
    assert _advisory_holders(b, ALICE) == [b._locks.holder_pid(ALICE)]


def test_a_lock_race_across_stores_and_threads_has_one_winner(make_store):
    stores = [make_store() for _ in range(3)]
    wins = race(6, lambda i: stores[i % 3].try_user_lock("acme:carol", owner=f"o{i}"))
    assert sum(wins) == 1


def test_session_start_plan_uses_the_partial_index(make_store):
    store = make_store()
    bulk_load(store, users=20, per_user=200, now=1.0)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE facts")
        sql = active_query("bench:u3", 5.0).compile(
            store.engine, compile_kwargs={"literal_binds": True})
        plan = "\n".join(r[0] for r in conn.exec_driver_sql(f"EXPLAIN {sql}"))
    # one scan of the partial index (a plain or bitmap index scan: the planner's choice by
    # cost; a sort of one user's rows, if it picks one, is in memory)
    assert "facts_active" in plan and "Seq Scan" not in plan, plan


def test_keys_and_user_ids_compare_bytewise(make_store):
    store = make_store()
    with store.engine.connect() as conn:
        collations = dict(conn.execute(sa.text(
            "SELECT column_name, collation_name FROM information_schema.columns "
            "WHERE table_name = 'facts' AND column_name IN ('user_id', 'key')")).all())
    assert collations == {"user_id": "C", "key": "C"}
    for key in ("user.b_c", "user.B", "user.b"):  # 'B' is refused anyway: keys are lowercase
        if key != "user.B":
            store.assert_fact(ALICE, FactInput(key, "v"))
    assert [f.key for f in store.active(ALICE)] == ["user.b", "user.b_c"]
