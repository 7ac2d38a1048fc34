"""Erasure of a user / a tenant (memroute.serving.erasure) over the real SQLite journal, idempotency
table, flusher and BM25 cache, with an in-memory store in place of Milvus (the integration test
runs the same guarantees on Milvus Lite)."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from memroute.errors import InvalidRequest
from memroute.journal import Flusher, IdempotencyStore, Journal
from memroute.journal.idempotency import Existing, Started
from memroute.memory.milvus_rows import tenant_scan_filter
from memroute.retrieval.bm25_cache import BM25Cache
from memroute.serving.erasure import erase_tenant, erase_user, erasure_audit, store_remover
from memroute.types import TurnPair, memory_of

ALICE, BOB, CAROL = "acme:alice", "acme:bob", "globex:carol"
LOOKALIKES = ["acme_x:dan", "acmeXx:erin"]  # tenants whose names a sloppy prefix match would hit
SECRET = "my passport number is X9-SECRET-7731"


def pair(uid: str, i: int, text: str | None = None) -> TurnPair:
    return TurnPair(uid, "s", i, text or f"{uid} note {i} about gardens", "Noted.", 1_700_000_000 + i)


class MemStore:
    """Milvus stand-in: rows by id, upserts replace; the erasure methods of MilvusMemoryStore."""

    def __init__(self) -> None:
        self.rows: dict[int, TurnPair] = {}
        self.lock = threading.Lock()
        self.before_delete: threading.Event | None = None  # blocks delete_user when set
        self.delete_started = threading.Event()
        self.flushes = 0
        self.delay_s = 0.0  # each write and delete takes this long (widens race windows)

    def remember(self, pairs) -> int:  # the flusher's write_fn
        time.sleep(self.delay_s)
        with self.lock:
            for p in pairs:
                self.rows[p.id] = p
        return len(pairs)

    def list_user(self, uid):
        with self.lock:
            return [memory_of(p) for p in self.rows.values() if p.user_id == uid]

    def ids(self, uid) -> set[int]:
        with self.lock:
            return {i for i, p in self.rows.items() if p.user_id == uid}

    def delete_user(self, uid) -> int:
        self.delete_started.set()
        if self.before_delete is not None:
            assert self.before_delete.wait(10)
        time.sleep(self.delay_s)
        with self.lock:
            gone = [i for i, p in self.rows.items() if p.user_id == uid]
            for i in gone:
                del self.rows[i]
        return len(gone)

    def delete_tenant(self, tenant) -> int:
        users = {p.user_id for p in self.rows.values() if p.user_id.startswith(tenant + ":")}
        return sum(self.delete_user(u) for u in users)

    def delete_ids(self, uid, ids) -> int:
        with self.lock:
            gone = [i for i in ids if i in self.rows and self.rows[i].user_id == uid]
            for i in gone:
                del self.rows[i]
        return len(gone)

    def flush(self) -> None:
        self.flushes += 1


class Retriever:
    """The retriever's cache side: a real BM25Cache over the store."""

    def __init__(self, store: MemStore) -> None:
        self.bm25 = BM25Cache(store.list_user)

    def forget_user(self, uid):
        self.bm25.forget_user(uid)

    def forget_tenant(self, tenant):
        self.bm25.forget_tenant(tenant)


@pytest.fixture
def parts(tmp_path):
    journal = Journal(tmp_path / "journal.sqlite3")
    idem = IdempotencyStore(journal.path)
    store = MemStore()
    retriever = Retriever(store)
    yield journal, idem, store, retriever
    idem.close()
    journal.close()


def entries_of(journal: Journal, uid: str) -> int:
    conn = sqlite3.connect(journal.path)
    try:
        return conn.execute("SELECT count(*) FROM entries WHERE user_id = ?", (uid,)).fetchone()[0]
    finally:
        conn.close()


def keys_of(idem: IdempotencyStore) -> set[tuple[str, str]]:
    conn = sqlite3.connect(idem.path)
    try:
        return set(conn.execute("SELECT tenant, key FROM idempotency").fetchall())
    finally:
        conn.close()


def answered(idem: IdempotencyStore, tenant: str, key: str, user_id: str | None, text: str) -> None:
    claim = idem.begin(tenant, key, "h", user_id=user_id)
    assert isinstance(claim, Started)
    assert idem.complete(claim, f'{{"answer": "{text}"}}')


def populate(journal, idem, store, retriever):
    """alice, bob (acme), carol (globex) and two look-alike tenants: half flushed, half pending;
    answered keys; BM25 indexes cached."""
    users = [ALICE, BOB, CAROL, *LOOKALIKES]
    flusher = Flusher(journal, store.remember)
    journal.append([pair(u, i, SECRET if (u == ALICE and i == 0) else None) for u in users for i in range(3)])
    flusher.flush_now()
    journal.append([pair(u, i) for u in users for i in range(3, 5)])  # acknowledged, not flushed
    answered(idem, "acme", "k-alice", ALICE, SECRET)
    answered(idem, "acme", "k-bob", BOB, "bob's answer")
    answered(idem, "acme", "k-legacy", None, "an answer from before user ids were recorded")
    answered(idem, "globex", "k-carol", CAROL, "carol's answer")
    answered(idem, "acme_x", "k-dan", LOOKALIKES[0], "dan's answer")
    for u in users:
        retriever.bm25.get(u)
    return flusher


def test_erasing_a_user_removes_only_their_rows_everywhere(parts):
    journal, idem, store, retriever = parts
    flusher = populate(journal, idem, store, retriever)

    report = erase_user(store, journal, idem, retriever, ALICE, actor="admin:ops")

    assert (report.scope, report.target, report.actor) == ("user", ALICE, "admin:ops")
    assert (report.store_rows, report.journal_rows, report.idempotency_rows) == (3, 5, 2)
    assert store.ids(ALICE) == set() and entries_of(journal, ALICE) == 0
    assert journal.pending_for_user(ALICE) == []
    assert ALICE not in retriever.bm25
    assert ("acme", "k-alice") not in keys_of(idem)
    assert ("acme", "k-legacy") not in keys_of(idem)  # unattributed rows of the tenant go too
    assert store.flushes >= 1
    # Nobody else lost anything.
    for u in (BOB, CAROL, *LOOKALIKES):
        assert len(store.ids(u)) == 3 and entries_of(journal, u) == 5 and u in retriever.bm25
    assert keys_of(idem) == {("acme", "k-bob"), ("globex", "k-carol"), ("acme_x", "k-dan")}
    flusher.flush_now()
    assert store.ids(ALICE) == set() and all(len(store.ids(u)) == 5 for u in (BOB, CAROL))


def test_unattributed_keys_can_be_kept(parts):
    idem = parts[1]
    answered(idem, "acme", "k-alice", ALICE, "a")
    answered(idem, "acme", "k-legacy", None, "b")
    assert idem.erase_user(ALICE, include_unattributed=False) == 1
    assert keys_of(idem) == {("acme", "k-legacy")}


def test_the_audit_entry_says_who_when_and_how_many_but_no_content(parts):
    journal, idem, store, retriever = parts
    populate(journal, idem, store, retriever)
    before = time.time()
    report = erase_user(store, journal, idem, retriever, ALICE, actor="dpo@acme")

    (entry,) = erasure_audit(journal, 10)
    assert entry["actor"] == "dpo@acme" and entry["scope"] == "user" and entry["target"] == ALICE
    assert before <= entry["at"] <= entry["completed_at"] <= time.time() and entry["completed"]
    assert (entry["store_rows"], entry["journal_rows"], entry["idempotency_rows"]) == (3, 5, 2)
    assert entry["id"] == report.audit_id and entry["boundary_seq"] == report.boundary_seq
    conn = sqlite3.connect(journal.path)  # nothing of the content anywhere in the audit tables
    dump = "\n".join(conn.iterdump())
    conn.close()
    audit_lines = [ln for ln in dump.splitlines() if "erasure" in ln]
    assert audit_lines and not any("SECRET" in ln or "gardens" in ln for ln in audit_lines)
    assert "SECRET" not in dump  # nor in the journal or the idempotency table


def test_a_second_erasure_succeeds_with_zero_counts(parts):
    journal, idem, store, retriever = parts
    populate(journal, idem, store, retriever)
    first = erase_user(store, journal, idem, retriever, ALICE, actor="ops")
    second = erase_user(store, journal, idem, retriever, ALICE, actor="ops")
    assert first.journal_rows > 0
    assert (second.store_rows, second.journal_rows, second.idempotency_rows) == (0, 0, 0)
    assert [a["id"] for a in erasure_audit(journal)] == [second.audit_id, first.audit_id]
    assert erasure_audit(journal, target=BOB) == []


def test_acknowledged_unflushed_pairs_are_never_written_after_the_erasure(parts):
    journal, idem, store, retriever = parts
    journal.append([pair(ALICE, i) for i in range(4)])  # no flusher running: all pending
    report = erase_user(store, journal, idem, retriever, ALICE, actor="ops")
    assert report.journal_rows == 4 and report.store_rows == 0

    flusher = Flusher(journal, store.remember)  # "resumed": replays whatever is pending
    assert flusher.flush_now() == 0
    assert store.ids(ALICE) == set()

    later = pair(ALICE, 9, "I moved to Porto")  # after the erasure: new data, stored normally
    (seq,) = journal.append([later])
    assert seq > report.boundary_seq
    assert flusher.flush_now() == 1 and store.ids(ALICE) == {later.id}


def test_an_erased_pair_re_sent_after_the_erasure_is_new_data(parts):
    journal, idem, store, retriever = parts
    p = pair(ALICE, 1)
    journal.append([p])
    erase_user(store, journal, idem, retriever, ALICE, actor="ops")
    journal.append([p])  # the same id and text again: a new entry, past the boundary
    Flusher(journal, store.remember).flush_now()
    assert store.ids(ALICE) == {p.id}


def test_the_journal_never_hands_out_an_entry_at_or_below_a_tombstone(parts):
    journal, idem, store, retriever = parts
    journal.append([pair(BOB, 0)])
    erase_user(store, journal, idem, retriever, ALICE, actor="ops")
    erase_tenant(store, journal, idem, retriever, "globex", actor="ops")
    # An entry that escaped the deletion (e.g. written by old code at an old seq) stays invisible.
    conn = sqlite3.connect(journal.path)
    for seq, uid in ((1000, ALICE), (1001, CAROL)):
        conn.execute("INSERT INTO entries (seq, pair_id, user_id, payload, appended_at) "
                     "VALUES (?, ?, ?, '{}', 0)", (seq, seq, uid))
    conn.execute("UPDATE erasures SET seq = 2000")
    conn.commit()
    conn.close()
    assert [e.pair.user_id for e in journal.pending()] == [BOB]
    assert journal.pending_for_user(ALICE) == [] and journal.pending_for_user(CAROL) == []
    assert journal.erasure_seq(ALICE) == 2000 and journal.erasure_seq("globex:zed") == 2000
    assert journal.erasure_seq(BOB) is None


def test_the_tombstone_is_durable(tmp_path):
    path = tmp_path / "journal.sqlite3"
    with Journal(path) as journal:
        journal.append([pair(ALICE, 0), pair(ALICE, 1)])
        done = journal.erase_user(ALICE, actor="ops")
    with Journal(path) as journal:  # a restart
        assert journal.erasure_seq(ALICE) == done.boundary_seq == 2
        assert journal.pending() == [] and journal.erasure_audit()[0].completed_at is None


def test_a_batch_in_flight_finishes_before_the_tombstone_and_is_then_deleted(parts):
    journal, idem, store, retriever = parts
    writing, release = threading.Event(), threading.Event()

    def slow_write(pairs):
        writing.set()
        assert release.wait(10)
        return store.remember(pairs)

    journal.append([pair(ALICE, i) for i in range(3)])
    flusher = Flusher(journal, slow_write)
    t = threading.Thread(target=flusher.flush_now)
    t.start()
    assert writing.wait(10)  # the flusher has read the batch and is writing it
    done: list = []
    e = threading.Thread(target=lambda: done.append(
        erase_user(store, journal, idem, retriever, ALICE, actor="ops")))
    e.start()
    time.sleep(0.3)
    assert not done and not store.delete_started.is_set()  # the erasure waits for the batch
    release.set()
    t.join(10)
    e.join(10)
    assert done[0].store_rows == 3 and store.ids(ALICE) == set()
    assert flusher.flush_now() == 0 and store.ids(ALICE) == set()


def test_pairs_appended_during_the_erasure_survive_it(parts):
    """Appended after the tombstone but before the store delete: the flusher may not write them
    until the delete is done, or the delete would erase acknowledged new data."""
    journal, idem, store, retriever = parts
    journal.append([pair(ALICE, i) for i in range(3)])
    flusher = Flusher(journal, store.remember, interval_s=0.0)
    flusher.start()
    try:
        assert flusher.wait_drained(10) and len(store.ids(ALICE)) == 3
        store.before_delete = threading.Event()
        result: list = []
        e = threading.Thread(target=lambda: result.append(
            erase_user(store, journal, idem, retriever, ALICE, actor="ops")))
        e.start()
        assert store.delete_started.wait(10)  # tombstone written, Milvus delete pending
        new = pair(ALICE, 7, "new after the tombstone")
        (seq,) = journal.append([new])
        time.sleep(0.3)  # the running flusher is woken by the append
        store.before_delete.set()
        e.join(10)
        assert seq > result[0].boundary_seq
        assert flusher.wait_drained(10)
        assert store.ids(ALICE) == {new.id}
    finally:
        flusher.stop()


def test_erasure_under_concurrent_writes_keeps_exactly_the_pairs_after_the_tombstone(parts):
    journal, idem, store, retriever = parts
    store.delay_s = 0.05  # a slow store: batches in flight during the erasure
    flusher = Flusher(journal, store.remember, batch_size=4, interval_s=0.0)
    flusher.start()
    seqs: dict[int, int] = {}
    lock, stop = threading.Lock(), threading.Event()

    def writer(w: int) -> None:
        i = 0
        while not stop.is_set() or i < 20:
            p = pair(ALICE, w * 100_000 + i)
            (s,) = journal.append([p])
            with lock:
                seqs[p.id] = s
            i += 1
            time.sleep(0.005)  # a few hundred pairs: the slow store drains them in seconds

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    report = erase_user(store, journal, idem, retriever, ALICE, actor="ops")
    time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(10)
    assert flusher.wait_drained(60)
    flusher.stop()
    before = {i for i, s in seqs.items() if s <= report.boundary_seq}
    after = {i for i, s in seqs.items() if s > report.boundary_seq}
    assert before and after and report.journal_rows > 0
    assert store.ids(ALICE) == after


def test_a_flusher_of_another_process_removes_what_it_wrote_during_an_erasure(tmp_path):
    """Two Journal objects on one file: two processes, two store gates. The writer's check after
    its write finds the tombstone and deletes the rows again."""
    path = tmp_path / "journal.sqlite3"
    mine, theirs = Journal(path), Journal(path)
    store = MemStore()
    writing, release = threading.Event(), threading.Event()

    def slow_write(pairs):
        writing.set()
        assert release.wait(10)
        return store.remember(pairs)

    mine.append([pair(ALICE, i) for i in range(3)] + [pair(BOB, 0)])
    flusher = Flusher(mine, slow_write, on_erased=store_remover(store))
    t = threading.Thread(target=flusher.flush_now)
    t.start()
    assert writing.wait(10)
    report = erase_user(store, theirs, None, None, ALICE, actor="ops")  # the other process
    assert report.store_rows == 0  # nothing written yet
    release.set()
    t.join(10)
    assert store.ids(ALICE) == set() and len(store.ids(BOB)) == 1
    assert flusher.flush_now() == 0
    mine.close()
    theirs.close()


def test_erasing_a_tenant_spares_look_alike_tenants(parts):
    journal, idem, store, retriever = parts
    populate(journal, idem, store, retriever)
    report = erase_tenant(store, journal, idem, retriever, "acme", actor="root")
    assert (report.scope, report.target) == ("tenant", "acme")
    assert (report.store_rows, report.journal_rows, report.idempotency_rows) == (6, 10, 3)
    for u in (ALICE, BOB):
        assert store.ids(u) == set() and entries_of(journal, u) == 0 and u not in retriever.bm25
    for u in (CAROL, *LOOKALIKES):
        assert len(store.ids(u)) == 3 and entries_of(journal, u) == 5 and u in retriever.bm25
    assert keys_of(idem) == {("globex", "k-carol"), ("acme_x", "k-dan")}
    journal.append([pair("acme:newcomer", 0)])  # a user created afterwards: new data
    Flusher(journal, store.remember).flush_now()
    assert len(store.ids("acme:newcomer")) == 1 and store.ids(ALICE) == set()
    again = erase_tenant(store, journal, idem, retriever, "acme", actor="root")
    assert (again.store_rows, again.journal_rows, again.idempotency_rows) == (1, 1, 0)


def test_a_claim_deleted_by_an_erasure_cannot_record_its_answer(parts):
    journal, idem, store, retriever = parts
    claim = idem.begin("acme", "k", "h", user_id=ALICE)  # the request is in flight
    erase_user(store, journal, idem, retriever, ALICE, actor="ops")
    assert idem.complete(claim, '{"answer": "from before the erasure"}') is False
    again = idem.begin("acme", "k", "h", user_id=ALICE)  # a retry runs again: no replay
    assert isinstance(again, Started) and not isinstance(again, Existing)


def test_bm25_index_built_during_forget_is_not_cached():
    started, release = threading.Event(), threading.Event()

    def slow_loader(uid):
        started.set()
        assert release.wait(10)
        return [memory_of(pair(uid, 0))]

    for forget in (lambda c: c.forget_user(ALICE), lambda c: c.forget_tenant("acme")):
        cache = BM25Cache(slow_loader)
        started.clear(), release.clear()
        t = threading.Thread(target=cache.get, args=(ALICE,))
        t.start()
        assert started.wait(10)
        forget(cache)  # the erasure's Milvus delete happened; the build read the old rows
        release.set()
        t.join(10)
        assert ALICE not in cache


def test_forget_tenant_drops_only_that_tenants_indexes():
    cache = BM25Cache(lambda uid: [memory_of(pair(uid, 0))])
    for u in (ALICE, BOB, *LOOKALIKES, CAROL):
        cache.get(u)
    assert cache.forget_tenant("acme") == 2
    assert [u in cache for u in (ALICE, BOB, *LOOKALIKES, CAROL)] == [False, False, True, True, True]


def test_bad_arguments_fail_before_anything_is_erased(parts):
    journal, idem, store, retriever = parts
    journal.append([pair(ALICE, 0)])
    with pytest.raises(TypeError, match="forget_user"):
        erase_user(store, journal, idem, retriever, ALICE, actor="ops", caches=[object()])
    with pytest.raises(InvalidRequest):
        erase_user(store, journal, idem, retriever, ALICE, actor="")
    with pytest.raises(InvalidRequest):
        erase_user(store, journal, idem, retriever, "no-tenant", actor="ops")
    with pytest.raises(InvalidRequest):
        erase_tenant(store, journal, idem, retriever, "acme:alice", actor="ops")
    assert entries_of(journal, ALICE) == 1 and journal.erasure_audit() == []


def test_the_tenant_scan_filter_over_matches_and_names_the_exact_prefix():
    assert tenant_scan_filter("acme_x") == ('user_id like "acme_x:%"', "acme_x:")
    for bad in ('a" or 1==1', "acme:x", "", "a%"):
        with pytest.raises(InvalidRequest):
            tenant_scan_filter(bad)
