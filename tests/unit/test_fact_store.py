"""The fact store on SQLite (a WAL file in the test's tmp dir): the shared behaviour suite of
tests/fact_store_cases.py, plus what only SQLite has (pragmas, the lease lock, the plan)."""

from __future__ import annotations

import sqlite3

import pytest
import sqlalchemy as sa

from memroute.config.facts import FactsConfig, check_facts_config, facts_backend
from memroute.errors import ConfigError
from memroute.memory.facts import FactInput, FactStore
from memroute.memory.facts.reads import active_query
from tests.fact_cache_cases import FactCacheCases
from tests.fact_store_cases import ALICE, BOB, Clock, FactStoreCases, race


@pytest.fixture
def db_url(tmp_path):
    return f"sqlite:///{tmp_path / 'facts' / 'facts.sqlite3'}"


@pytest.fixture
def make_store(db_url):
    opened: list[FactStore] = []

    def make(**kwargs) -> FactStore:
        store = FactStore(db_url, **kwargs)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


class TestSqliteFactStore(FactStoreCases):
    pass


class TestSqliteFactCache(FactCacheCases):
    pass


def test_every_connection_is_wal_with_full_sync(make_store, tmp_path):
    store = make_store()
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 10_000
    assert (tmp_path / "facts" / "facts.sqlite3").exists()  # its folder was created


def test_session_start_is_one_index_range_scan(make_store):
    store = make_store()
    store.assert_fact(ALICE, FactInput("user.budget", "50L"))
    sql = str(active_query(ALICE, 5.0).compile(store.engine,
                                               compile_kwargs={"literal_binds": True}))
    with store.engine.connect() as conn:
        plan = " | ".join(r[-1] for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))
    assert "USING INDEX facts_active" in plan, plan
    assert "TEMP B-TREE" not in plan, plan  # the index order is the key order: no sort


def test_the_database_keeps_one_active_row_per_key_whatever_writes(make_store):
    store = make_store()
    store.assert_fact(ALICE, FactInput("user.budget", "50L"), now=1.0)
    row = {"user_id": ALICE, "key": "user.budget", "value": "x", "category": "temporal",
           "source": "explicit", "status": "active", "valid_from": 1.0, "recorded_at": 1.0}
    from memroute.memory.facts.schema import facts

    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
        conn.execute(sa.insert(facts).values(**row))
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:  # CHECK: lifecycle
        conn.execute(sa.insert(facts).values(**{**row, "key": "k", "status": "superseded"}))


def test_a_stale_lease_is_taken_over(db_url):
    clock_a, clock_b = Clock(1_000.0), Clock(1_000.0)
    a = FactStore(db_url, lock_lease_s=60.0, clock=clock_a)
    b = FactStore(db_url, lock_lease_s=60.0, clock=clock_b)
    try:
        assert a.try_user_lock(ALICE, owner="a")
        clock_b.t = 1_059.0
        assert not b.try_user_lock(ALICE, owner="b")
        clock_b.t = 1_060.0  # a did not renew within its lease: it is presumed dead
        assert b.try_user_lock(ALICE, owner="b")
        assert not a.release_user_lock(ALICE, owner="a")  # a lost it; releasing frees nothing
        clock_a.t = 1_070.0
        assert not a.try_user_lock(ALICE, owner="a")
        clock_b.t = 1_110.0  # b renews by trying again: its lease now runs to 1170
        assert b.try_user_lock(ALICE, owner="b")
        clock_a.t = 1_150.0
        assert not a.try_user_lock(ALICE, owner="a")
    finally:
        a.close()
        b.close()


def test_lease_rows_come_and_go(make_store, db_url):
    store = make_store()
    path = sa.engine.make_url(db_url).database

    def owners():
        with sqlite3.connect(path) as conn:
            return conn.execute("SELECT user_id, owner FROM fact_locks").fetchall()

    with store.user_lock(ALICE, owner="worker-1") as got:
        assert got and owners() == [(ALICE, "worker-1")]
    assert owners() == []


def test_erasure_drops_only_expired_leases(db_url):
    clock = Clock(1_000.0)
    store = FactStore(db_url, lock_lease_s=60.0, clock=clock)
    try:
        assert store.try_user_lock(ALICE, owner="a") and store.try_user_lock(BOB, owner="b")
        assert store.erase_user(ALICE) == 0
        with FactStore(db_url, clock=clock) as other:
            assert not other.try_user_lock(ALICE, owner="c")  # still held
        clock.t = 2_000.0
        store.erase_tenant("acme")
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM fact_locks").scalar() == 0
    finally:
        store.close()


def test_threads_hammering_two_files_do_not_see_locked_errors(tmp_path):
    """BEGIN IMMEDIATE + busy timeout: writers queue on the file instead of failing."""
    url = f"sqlite:///{tmp_path / 'f.sqlite3'}"
    stores = [FactStore(url), FactStore(url)]
    try:
        race(8, lambda i: [stores[i % 2].assert_fact(ALICE, FactInput(f"k.t{i}", f"v{j}"))
                           for j in range(10)])
        assert len(stores[0].active(ALICE)) == 8
    finally:
        for s in stores:
            s.close()


def test_an_unusable_path_is_a_config_error(tmp_path):
    (tmp_path / "dir.sqlite3").mkdir()
    with pytest.raises(ConfigError) as err:
        FactStore(f"sqlite:///{tmp_path / 'dir.sqlite3'}")
    assert err.value.field == "facts.url"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError) as err:
        FactStore(f"sqlite:///{tmp_path / 'file' / 'facts.sqlite3'}")
    assert err.value.field == "facts.url"


def test_a_file_that_is_not_sqlite_is_a_config_error(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"not a database" * 100)
    with pytest.raises(ConfigError) as err:
        FactStore(f"sqlite:///{path}")
    assert err.value.field == "facts.url"


def test_a_foreign_facts_table_is_refused(tmp_path):
    path = tmp_path / "other.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE facts (id INTEGER PRIMARY KEY, text TEXT)")
    with pytest.raises(ConfigError) as err:
        FactStore(f"sqlite:///{path}")
    assert err.value.field == "facts.url" and "missing columns" in str(err.value)


def test_from_config(tmp_path):
    cfg = FactsConfig(url=f"sqlite:///{tmp_path / 'c.sqlite3'}", ephemeral_ttl_s=5.0)
    with FactStore.from_config(cfg, clock=Clock(0.0)) as store:
        fact = store.assert_fact(ALICE, FactInput("user.mood", "ok", category="ephemeral"))
        assert fact.expires_at == 5.0


# -- config --------------------------------------------------------------------------------


def test_the_default_config_is_valid():
    assert check_facts_config(FactsConfig()).url == "sqlite:///.memroute/facts.sqlite3"
    assert facts_backend("postgresql://memroute:secret@db:5432/memroute") == "postgresql"
    assert facts_backend("postgresql+psycopg://u@db/m") == "postgresql"


@pytest.mark.parametrize(("changes", "field"), [
    ({"url": "mysql://u:secret@db/m"}, "facts.url"),
    ({"url": "sqlite:///:memory:"}, "facts.url"),
    ({"url": "sqlite:///"}, "facts.url"),
    ({"url": "postgresql:///m"}, "facts.url"),
    ({"url": ""}, "facts.url"),
    ({"url": None}, "facts.url"),
    ({"ephemeral_ttl_s": 0}, "facts.ephemeral_ttl_s"),
    ({"ephemeral_ttl_s": float("nan")}, "facts.ephemeral_ttl_s"),
    ({"lock_lease_s": True}, "facts.lock_lease_s"),
    ({"busy_timeout_s": -1}, "facts.busy_timeout_s"),
    ({"pool_size": 0}, "facts.pool_size"),
])
def test_bad_config_names_the_field(changes, field):
    with pytest.raises(ConfigError) as err:
        check_facts_config(FactsConfig(**changes))
    assert err.value.field == field
    assert "secret" not in str(err.value)  # a URL's password is never echoed
