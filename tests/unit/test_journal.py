"""Durable journal + flusher + read-your-writes, with an in-memory store keyed by id like Milvus.
The journal cases shared with the PostgreSQL journal are in tests/journal_cases.py."""

from __future__ import annotations

import dataclasses
import gc
import sqlite3
import threading
import time

import pytest

from memroute.errors import ConfigError, InvalidRequest
from memroute.config.journal import JournalConfig, check_journal_config
from memroute.namespace import namespaced_user_id, split_namespace
from memroute.journal import (
    Flusher,
    Journal,
    JournaledRetriever,
    merge_pending,
)
from memroute.journal import JournalEntry
from memroute.types import Memory, RetrievalHit, TurnPair
from tests import journal_cases as cases
from tests.journal_cases import pair

from .fakes import FakeRetriever


class FakeStore:
    """Upsert by id (what Milvus does with deterministic ids); records every write call."""

    def __init__(self, fail_times: int = 0, crash_after_write: bool = False) -> None:
        self.rows: dict[int, TurnPair] = {}
        self.calls: list[list[int]] = []
        self.fail_times = fail_times
        self.crash_after_write = crash_after_write
        self.lock = threading.Lock()

    def write(self, pairs: list[TurnPair]) -> int:
        with self.lock:
            if self.fail_times > 0:
                self.fail_times -= 1
                raise RuntimeError("store unavailable")
            for p in pairs:
                if p.user_text == "poison":
                    raise InvalidRequest("text is too long for the store", field="text")
            self.calls.append([p.id for p in pairs])
            for p in pairs:
                self.rows[p.id] = p
            if self.crash_after_write:
                raise RuntimeError("process died after the write, before mark_flushed")
            return len(pairs)

    def written_ids(self) -> list[int]:
        return [i for call in self.calls for i in call]


@pytest.fixture
def jpath(tmp_path):
    return tmp_path / "nested" / "journal.sqlite3"


@pytest.fixture
def make_journal(jpath):
    """``make_journal(**kwargs)``: another Journal (a connection of its own) on ``jpath``."""
    with cases.opened_journals(lambda **kwargs: Journal(jpath, **kwargs)) as make:
        yield make


# ---------------------------------------------------------------------------------- journal


@pytest.mark.parametrize("case", cases.CASES, ids=lambda case: case.__name__)
def test_shared_case(make_journal, case):
    case(make_journal)


def test_append_is_committed_and_survives_reopen(make_journal, jpath):
    reopened = cases.append_is_committed_and_survives_a_restart(make_journal)
    raw = sqlite3.connect(jpath)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent setting
    raw.close()
    with reopened._engine.connect() as conn:  # every pooled connection is set up alike
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL: fsync on commit


# The schema of the SQLite journal before it shared one schema with PostgreSQL (no lease
# columns, none of the indexes added since): files written then must open and replay.
EARLIER_SCHEMA = """
CREATE TABLE entries (seq INTEGER PRIMARY KEY AUTOINCREMENT, pair_id INTEGER NOT NULL UNIQUE,
    user_id TEXT NOT NULL, payload TEXT NOT NULL, appended_at REAL NOT NULL, flushed_at REAL,
    failed_at REAL, error TEXT);
CREATE INDEX entries_pending ON entries(seq) WHERE flushed_at IS NULL AND failed_at IS NULL;
CREATE TABLE idempotency (tenant TEXT NOT NULL, key TEXT NOT NULL, body_hash TEXT NOT NULL,
    state TEXT NOT NULL, owner TEXT NOT NULL, response TEXT, created_at REAL NOT NULL,
    updated_at REAL NOT NULL, PRIMARY KEY (tenant, key)) WITHOUT ROWID;
PRAGMA user_version = 1;
"""


def test_a_file_of_the_earlier_schema_opens_and_replays(jpath):
    from memroute.journal.codec import encode_pair

    jpath.parent.mkdir(parents=True)
    raw = sqlite3.connect(jpath)
    raw.executescript(EARLIER_SCHEMA)
    acked = [pair(turn=i) for i in range(3)]
    raw.executemany("INSERT INTO entries (pair_id, user_id, payload, appended_at) "
                    "VALUES (?, ?, ?, 0)", [(p.id, p.user_id, encode_pair(p)) for p in acked])
    raw.commit()
    raw.close()
    j = Journal(jpath)
    assert [e.pair for e in j.pending()] == acked  # acknowledged before the upgrade: replayed
    [claimed] = j.claim(1, owner="f", lease_s=30)  # the lease columns were added in place
    assert claimed.pair == acked[0] and j.mark_flushed([claimed.seq]) == 1
    [s] = j.append([pair(turn=9)])
    assert s == 4 and j.erase_user(pair().user_id, actor="ops").boundary_seq == 4


def test_seqs_are_never_reused_after_a_replace(jpath):
    j = Journal(jpath)
    p = pair()
    [s1] = j.append([p])
    [s2] = j.append([dataclasses.replace(p, assistant_text="other")])
    assert s2 != s1 and j.last_seq() == s2


def test_bad_pair_rejects_the_whole_batch(jpath):
    j = Journal(jpath)
    with pytest.raises(InvalidRequest) as e:
        j.append([pair(), pair("bad id!")])
    assert e.value.field == "user_id"
    with pytest.raises(InvalidRequest) as e:
        j.append([pair(turn=1), dataclasses.replace(pair(turn=2), session_time=1.5)])
    assert e.value.field == "session_time"
    with pytest.raises(InvalidRequest):
        j.append([pair(created_at=float("nan"))])
    with pytest.raises(InvalidRequest):
        j.append(["not a pair"])
    assert j.stats().total == 0
    assert j.append([]) == []


def test_sixteen_threads_append_concurrently_each_pair_once(make_journal):
    cases.concurrent_appends_record_each_pair_once(make_journal, journals=1, clients=16,
                                                   per_client=12)


@pytest.mark.parametrize("case", ["directory", "garbage", "under_a_file", "foreign_sqlite"])
def test_unusable_path_is_a_config_error(tmp_path, case):
    path = tmp_path / "j.sqlite3"
    if case == "directory":
        path.mkdir()
    elif case == "garbage":
        path.write_bytes(b"this is not a database, just some text" * 100)
    elif case == "under_a_file":
        (tmp_path / "file").write_text("x")
        path = tmp_path / "file" / "j.sqlite3"
    else:
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE other (x)")
        con.commit()
        con.close()
    with pytest.raises(ConfigError) as e:
        Journal(path)
    assert e.value.field == "journal.path" and str(path) in str(e.value)


def test_closed_journal_raises_journal_error(make_journal):
    cases.closed_journal_raises_journal_error(make_journal)


# ---------------------------------------------------------------------------------- flusher


def test_flusher_drains_in_batches_each_entry_once(jpath):
    j, store = Journal(jpath), FakeStore()
    f = Flusher(j, store.write, batch_size=4, interval_s=0.01)
    f.start()
    pairs = [pair("alice", i) for i in range(10)]
    for p in pairs:
        j.append([p])
    assert f.wait_drained(10)
    f.stop()
    assert sorted(store.written_ids()) == sorted(p.id for p in pairs)  # each written once
    assert all(len(call) <= 4 for call in store.calls)
    assert f.stats().flushed == 10 and j.pending_count() == 0


def test_idle_flusher_does_not_poll(jpath):
    class CountingJournal(Journal):
        reads = 0

        def pending(self, *a, **kw):
            CountingJournal.reads += 1
            return super().pending(*a, **kw)

    j = CountingJournal(jpath)
    store = FakeStore()
    f = Flusher(j, store.write, batch_size=8, interval_s=0.01)
    f.start()
    time.sleep(0.1)  # the start-up replay pass has run
    before = CountingJournal.reads
    time.sleep(0.4)
    assert CountingJournal.reads == before  # asleep on the condition, not polling
    j.append([pair()])  # ... and an append wakes it
    assert f.wait_drained(5) and store.written_ids() == [pair().id]
    f.stop()


def test_flusher_retries_a_failing_store_and_loses_nothing(jpath):
    j, store = Journal(jpath), FakeStore(fail_times=3)
    f = Flusher(j, store.write, batch_size=64, interval_s=0.01, backoff_s=0.01)
    f.start()
    pairs = [pair("alice", i) for i in range(5)]
    j.append(pairs)
    assert f.wait_drained(10)
    f.stop()
    assert f.stats().write_errors == 3 and "store unavailable" in f.stats().last_error
    assert sorted(store.written_ids()) == sorted(p.id for p in pairs)


def test_flush_now_raises_and_keeps_entries_when_the_store_fails(jpath):
    j, store = Journal(jpath), FakeStore(fail_times=1)
    f = Flusher(j, store.write)
    j.append([pair(turn=1), pair(turn=2)])
    with pytest.raises(RuntimeError):
        f.flush_now()
    assert j.pending_count() == 2
    assert f.flush_now() == 2 and j.pending_count() == 0


def test_a_pair_the_store_refuses_is_parked_not_blocking(jpath):
    j, store = Journal(jpath), FakeStore()
    f = Flusher(j, store.write, batch_size=10)
    good = [pair(turn=i) for i in range(3)]
    bad = pair(turn=9, text="poison")
    j.append([good[0], bad, *good[1:]])
    assert f.flush_now() == 3
    assert sorted(store.rows) == sorted(p.id for p in good)
    [parked] = j.failed()
    assert parked.pair == bad and "too long" in parked.error
    assert j.pending_count() == 0 and f.stats().parked == 1
    assert j.requeue_failed() == 1 and [e.pair for e in j.pending()] == [bad]


def test_stop_drains_what_is_pending(jpath):
    j, store = Journal(jpath), FakeStore()
    f = Flusher(j, store.write, batch_size=1000, interval_s=60)  # would linger a minute
    f.start()
    j.append([pair(turn=i) for i in range(3)])
    assert f.stop() == 0
    assert not f.running and len(store.rows) == 3


def test_stop_with_the_store_down_keeps_entries_for_replay(jpath):
    j, store = Journal(jpath), FakeStore(fail_times=10**6)
    f = Flusher(j, store.write, interval_s=0.01, backoff_s=0.01)
    f.start()
    j.append([pair(turn=1)])
    assert f.stop() == 1  # logged, not raised
    assert j.pending_count() == 1


def test_restart_replays_unflushed_entries_exactly_once(jpath):
    # Process 1: some entries flushed, one batch written but not marked (crash), some never tried.
    store = FakeStore()
    j1 = Journal(jpath)
    done = [pair(turn=i) for i in range(3)]
    j1.append(done)
    Flusher(j1, store.write).flush_now()
    in_flight = [pair(turn=10 + i) for i in range(2)]
    j1.append(in_flight)
    store.crash_after_write = True
    with pytest.raises(RuntimeError):
        Flusher(j1, store.write).flush_now()
    store.crash_after_write = False
    never = [pair(turn=20 + i) for i in range(3)]
    j1.append(never)
    del j1  # the process dies: no stop(), no close()
    gc.collect()

    # Process 2: a new journal and flusher on the same file replay on start.
    calls_before = len(store.calls)
    j2 = Journal(jpath)
    assert {e.pair for e in j2.pending()} == set(in_flight + never)
    f2 = Flusher(j2, store.write, batch_size=64, interval_s=0.01)
    f2.start()
    assert f2.wait_drained(10)
    f2.stop()
    replayed = store.calls[calls_before:]
    assert replayed[0] == [p.id for p in in_flight + never]  # oldest first, in one batch
    everything = done + in_flight + never
    assert sorted(store.rows) == sorted(p.id for p in everything)  # once each in the store
    assert sorted(i for call in replayed for i in call) == sorted(p.id for p in in_flight + never)
    assert j2.stats().flushed == len(everything)


def test_flusher_and_config_validation(jpath):
    j = Journal(jpath)
    with pytest.raises(ConfigError) as e:
        Flusher(j, print, batch_size=0)
    assert e.value.field == "journal.batch_size"
    with pytest.raises(ConfigError) as e:
        Flusher(j, print, interval_s=-1)
    assert e.value.field == "journal.interval_s"
    with pytest.raises(ConfigError) as e:
        check_journal_config(JournalConfig(path=" "))
    assert e.value.field == "journal.path"
    f = Flusher.from_config(j, print, JournalConfig(batch_size=7, interval_s=0.1))
    assert (f.batch_size, f.interval_s) == (7, 0.1)


# -------------------------------------------------------------------------------- namespace
# (the inverse lives with the tenancy rules: memroute.api.tenancy.split_namespace)


def test_namespaced_user_id_is_valid_and_reversible():
    assert namespaced_user_id("acme", "alice") == "acme:alice"
    for tenant, user in [("acme", "alice"), ("t-1.x", "alice:work"), ("a@b", "user@example.com")]:
        assert split_namespace(namespaced_user_id(tenant, user)) == (tenant, user)
    # ("a", "b:c") and ("a:b", "c") would collide; a tenant may not contain ':'.
    with pytest.raises(InvalidRequest) as e:
        namespaced_user_id("a:b", "c")
    assert e.value.field == "tenant"
    for tenant, user, field in [("acme/x", "u", "tenant"), ("acme", "u/1", "user"),
                                ("", "u", "tenant"), ("acme", "", "user"),
                                ("t" * 64, "u" * 64, "user"), ("t" * 65, "u", "tenant")]:
        with pytest.raises(InvalidRequest) as e:
            namespaced_user_id(tenant, user)
        assert e.value.field == field
    for bad in ["alice", "acme:", "acme::x", ":x"]:
        with pytest.raises(InvalidRequest):
            split_namespace(bad)


# ------------------------------------------------------------------------- read-your-writes


def _hit(p: TurnPair, score: float = 0.5) -> RetrievalHit:
    return RetrievalHit(Memory(p.id, p.user_id, p.text(), p.session_time), score)


def test_merge_pending_puts_matching_fresh_pairs_first():
    fact = pair(turn=1, text="My locker code is ZX-4471.", answer="Noted.")
    unrelated = pair(turn=2, text="I baked bread today.", answer="Nice!")
    old = pair(turn=0, text="My old locker code was 12.", answer="Ok.")
    entries = [JournalEntry(1, fact, 0.0), JournalEntry(2, unrelated, 0.0)]
    out = merge_pending("what is my locker code?", [_hit(old), _hit(fact)], entries, top_k=5)
    # The fresh fact first; its stale store copy dropped; no bread.
    assert [h.memory.id for h in out] == [fact.id, old.id]
    assert out[0].dense_score is None and 0 < out[0].score <= 1
    assert merge_pending("zx4471", [], entries, top_k=5)[0].memory.id == fact.id  # variants
    assert merge_pending("locker code", [_hit(old)], entries, top_k=1)[0].memory.id == fact.id
    assert merge_pending("locker", [_hit(old)], entries, top_k=5, max_pending=0) == [_hit(old)]
    assert merge_pending("the", [_hit(old)], entries, top_k=5) == [_hit(old)]  # stopwords only


def test_journaled_retriever_reads_its_own_writes_per_user(jpath):
    inner, j = FakeRetriever(), Journal(jpath)
    r = JournaledRetriever(inner, j, default_top_k=3)
    fact = pair("alice", 1, text="my dog is called Rex", answer="Nice name!")
    assert r.remember([fact]) == 1
    assert inner.pairs == [] and j.pending_count() == 1  # journaled, not yet in the store
    [hit] = r.retrieve("alice", "what is my dog called?")
    assert hit.memory.text == fact.text()
    assert r.retrieve("bob", "what is my dog called?") == []  # another user's pending pair
    Flusher(j, inner.remember).flush_now()
    hits = r.retrieve("alice", "what is my dog called?")
    # Once, from the store.
    assert [h.memory.id for h in hits] == [fact.id] and inner.pairs == [fact]
    with pytest.raises(InvalidRequest):
        r.retrieve_many("alice", ["q"])
