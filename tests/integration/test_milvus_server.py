"""The store, the retriever, the journal's flusher, erasure and a restart against a real Milvus
server (PyPI ``milvus`` 2.3 on 127.0.0.1, tests/integration/milvus_server.py), not Milvus Lite.

The 2.3 server has no sparse vectors or BM25 function, so the hybrid's BM25 leg runs in-process
(``retrieval.bm25_backend=memory``, the default) and ``memory.bm25_function`` is refused with a
clear error. Each test has collections of its own on the session's server. In the default
test run (`make test`) but the restart test, which is `slow` (`make test-slow` / `test-all`).
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np
import pytest

from memroute.config.schema import MemoryConfig, RetrievalConfig
from memroute.errors import ConfigError, InvalidRequest
from memroute.journal import Flusher, Journal, JournaledRetriever
from memroute.memory import MilvusMemoryStore
from memroute.namespace import namespaced_user_id
from memroute.retrieval.retriever import HybridRetriever
from memroute.types import TurnPair
from tests.integration.milvus_server import LoopbackMilvus, collection_name, milvus_server  # noqa: F401

T0 = 1683504000
ALICE, BOB = namespaced_user_id("acme", "alice"), namespaced_user_id("globex", "bob")
ACTIVITIES = ["baking sourdough bread", "repainting the kitchen", "training for a half marathon",
              "learning Spanish verbs", "fixing my bicycle brakes", "planting tomatoes",
              "reading a mystery novel", "practising the violin", "building a bookshelf"]


def pair(user: str, i: int, text: str | None = None, answer: str = "Noted.") -> TurnPair:
    text = text or f"I spent the afternoon {ACTIVITIES[i % len(ACTIVITIES)]} (day {i})."
    return TurnPair(user, f"s{i // 10}", i, text, answer, T0 + 86400 * (i // 10),
                    created_at=float(T0 + i))


ALICE_PAIRS = [pair(ALICE, i) for i in range(30)] + [
    pair(ALICE, 100, "Please note the serial on the replacement valve: ZX-4471.", "Noted, ZX-4471."),
    pair(ALICE, 101, "I adopted a golden retriever puppy and named him Biscuit.", "Lovely name!"),
    pair(ALICE, 102, "My parcel tracking code is ZX-4417.", "Got it, ZX-4417."),
]
BOB_PAIRS = [pair(BOB, i) for i in range(10)] + [
    pair(BOB, 100, "My sister Veronica moved to Lisbon to teach mathematics.", "Lisbon, nice!")]


def open_store(uri: str, dim: int, **fields) -> MilvusMemoryStore:
    return MilvusMemoryStore(MemoryConfig(uri=uri, collection=collection_name(),
                                          index_type="HNSW", **fields), dim)


@pytest.fixture(scope="module")
def memory(milvus_server, encoder):
    store = open_store(milvus_server.uri, encoder.dim)
    retriever = HybridRetriever(encoder, store, RetrievalConfig(top_k=5, candidate_k=100))
    assert retriever.remember(ALICE_PAIRS + BOB_PAIRS) == len(ALICE_PAIRS) + len(BOB_PAIRS)
    store.flush()
    yield store, retriever
    store.close()


def test_rows_are_stored_once_and_each_user_reads_only_their_own(memory):
    store, retriever = memory
    assert store.count(ALICE) == len(ALICE_PAIRS) and store.count(BOB) == len(BOB_PAIRS)
    retriever.remember(ALICE_PAIRS[:5])  # the same pairs again: rewritten, not duplicated
    store.flush()
    assert store.count(ALICE) == len(ALICE_PAIRS) and store.count() == len(ALICE_PAIRS + BOB_PAIRS)
    listed = store.list_user(ALICE)
    assert sorted(m.id for m in listed) == sorted(p.id for p in ALICE_PAIRS)
    for user, secret in ((ALICE, "Veronica Lisbon"), (BOB, "golden retriever Biscuit")):
        hits = retriever.retrieve(user, f"what about {secret}?")
        assert hits and all(h.memory.user_id == user for h in hits)


@pytest.mark.parametrize("strategy", ["dense", "hybrid"])
def test_a_paraphrase_finds_the_planted_pair(memory, strategy):
    _, retriever = memory
    hits = retriever.retrieve(ALICE, "What did I call my new dog?", strategy=strategy)
    assert "Biscuit" in hits[0].memory.text


def test_the_in_process_bm25_leg_separates_near_miss_codes(memory):
    _, retriever = memory
    hits = retriever.retrieve(ALICE, "ZX-4471", strategy="hybrid")
    assert "ZX-4471" in hits[0].memory.text  # not the near miss ZX-4417


def test_index_progress_reports_the_rows_the_server_has_seen(memory):
    store, _ = memory
    indexed, pending, finished = store.index_progress()
    # the server counts every row its index has seen, rewritten (deleted) ones included
    assert indexed >= 0 and pending >= 0 and indexed + pending > 0 and isinstance(finished, bool)


def test_session_reads_see_this_process_s_write_at_once(memory, encoder):
    store, _ = memory
    fresh = pair(ALICE, 300, "My new bike lock combination is 9-3-7-1.", "Noted, 9-3-7-1.")
    store.upsert([fresh], encoder.encode([fresh.text()]))  # no flush: the next read must see it
    assert store.search(ALICE, encoder.encode([fresh.text()])[0], 1)[0][0].id == fresh.id
    assert fresh.id in {m.id for m in store.list_user(ALICE)}
    store.delete_ids(ALICE, [fresh.id])


def test_an_unknown_read_consistency_is_refused_with_the_setting_named(milvus_server, encoder):
    with pytest.raises(ConfigError) as err:
        open_store(milvus_server.uri, encoder.dim, read_consistency="strong-ish")
    assert err.value.field == "memory.read_consistency"


def test_a_filter_injection_is_refused_and_nothing_changes(memory, encoder):
    store, _ = memory
    before = store.count()
    with pytest.raises(InvalidRequest):
        store.search('x" or user_id != "', encoder.encode(["anything"])[0], 5)
    assert store.count() == before


def test_milvus_bm25_function_is_refused_with_the_setting_named(milvus_server, encoder):
    with pytest.raises(ConfigError) as err:
        open_store(milvus_server.uri, encoder.dim, bm25_function=True)
    assert err.value.field.startswith("memory.")
    assert "BM25" in str(err.value) or "sparse" in str(err.value).lower()


def test_a_collection_of_another_dimension_is_refused(milvus_server, encoder):
    store = open_store(milvus_server.uri, encoder.dim)
    name = store.collection
    store.close()
    with pytest.raises(ConfigError) as err:
        MilvusMemoryStore(MemoryConfig(uri=milvus_server.uri, collection=name), 128)
    assert "384" in str(err.value)


def test_known_new_rows_are_inserted_where_each_user_reads_them(milvus_server, encoder):
    # The bulk-ingest form: no delete first. Rows must still land in their user's partition
    # (the 2.3 upsert does not put them there), and a later upsert of the same ids replaces them.
    store = open_store(milvus_server.uri, encoder.dim)
    try:
        pairs = ALICE_PAIRS + BOB_PAIRS
        vecs = np.asarray(encoder.encode([p.user_text for p in pairs]))
        assert store.upsert(pairs, vecs, known_new=True) == len(pairs)
        store.flush()
        assert store.count(ALICE) == len(ALICE_PAIRS) and store.count(BOB) == len(BOB_PAIRS)
        assert store.search(BOB, vecs[-1], 1)[0][0].id == BOB_PAIRS[-1].id
        store.upsert(pairs[:5], vecs[:5])  # not known new: rewritten, not stored twice
        store.flush()
        assert store.count() == len(pairs)
    finally:
        store.close()


def test_erasing_a_user_removes_every_row_of_that_user_only(milvus_server, encoder):
    store = open_store(milvus_server.uri, encoder.dim)
    try:
        vecs = np.asarray(encoder.encode([p.user_text for p in ALICE_PAIRS + BOB_PAIRS]))
        store.upsert(ALICE_PAIRS + BOB_PAIRS, vecs)
        store.flush()
        assert store.delete_user(ALICE) == len(ALICE_PAIRS)
        assert store.count(ALICE) == 0 and store.count(BOB) == len(BOB_PAIRS)
        assert store.list_user(ALICE) == []
    finally:
        store.close()


def test_sixteen_clients_through_the_journal_every_ack_in_milvus_once(milvus_server, encoder,
                                                                      tmp_path):
    store = open_store(milvus_server.uri, encoder.dim)
    retriever = HybridRetriever(encoder, store, RetrievalConfig(top_k=5, candidate_k=50))
    journal = Journal(tmp_path / "journal.sqlite3")
    written: list[int] = []

    def write(pairs: list[TurnPair]) -> int:
        written.extend(p.id for p in pairs)
        return retriever.remember(pairs)

    flusher = Flusher(journal, write, batch_size=16, interval_s=0.05)
    served = JournaledRetriever(retriever, journal)
    flusher.start()
    acked: dict[str, list[int]] = {}
    errors: list[BaseException] = []

    def client(k: int) -> None:
        uid = namespaced_user_id(f"tenant{k % 4}", f"user{k}")
        try:
            pairs = [pair(uid, i, f"Note {i} for client {k}: my locker is L-{k}{i}.") for i in range(4)]
            for p in pairs:
                served.remember([p])  # acknowledged when it returns (the journal write)
            hits = served.retrieve(uid, f"my locker L-{k}3")
            assert pairs[-1].id in {h.memory.id for h in hits}  # read-your-writes
            assert all(h.memory.user_id == uid for h in hits)
            acked[uid] = [p.id for p in pairs]
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, errors[0]
        assert flusher.stop() == 0
        store.flush()
        for uid, ids in acked.items():
            assert store.existing_ids(uid, ids) == set(ids) and store.count(uid) == 4
        assert Counter(written) == Counter(i for ids in acked.values() for i in ids)
    finally:
        flusher.stop()
        journal.close()
        store.close()


@pytest.mark.slow  # ~65 s: a second server, started twice, and a 20-25 s first read
def test_rows_survive_a_server_restart(tmp_path, encoder):
    """A server of its own (the session's keeps running): stop it, start it on the same data."""
    server = LoopbackMilvus(tmp_path / "milvus")
    server.start()
    try:
        store = open_store(server.uri, encoder.dim)
        name = store.collection
        vecs = np.asarray(encoder.encode([p.user_text for p in BOB_PAIRS]))
        store.upsert(BOB_PAIRS, vecs)
        store.flush()
        store.close()
        server.stop()
        server.start()
        # the first read after a restart waits for the query node to load the segments
        # (seconds), longer than the default 3 s read timeout of the serving path
        store = MilvusMemoryStore(MemoryConfig(uri=server.uri, collection=name, timeout_s=60.0),
                                  encoder.dim)
        try:
            t0 = time.perf_counter()
            assert store.count(BOB) == len(BOB_PAIRS)
            print(f"first read after the restart: {time.perf_counter() - t0:.1f} s")
            memory, score = store.search(BOB, vecs[-1], 1)[0]
            assert "Veronica" in memory.text and score > 0.99
        finally:
            store.close()
    finally:
        server.stop()


def test_a_fresh_read_sees_another_clients_write_at_once(memory, encoder):
    """A replica rebuilding its cached copy after another replica's write (settled seq) reads
    fresh: Strong, so the write is in it whatever the query node's lag (a Session read of a
    client that did not write waits for nothing)."""
    store, _ = memory
    other = MilvusMemoryStore(MemoryConfig(uri=store.cfg.uri, collection=store.collection),
                              encoder.dim)  # another client: another replica's flusher
    asked = []
    query = store._client.query
    store._client.query = lambda *a, **kw: asked.append(kw.get("consistency_level")) or query(*a, **kw)
    try:
        new = pair(ALICE, 301, "My gym locker is number 88.", "Noted, 88.")
        other.upsert([new], encoder.encode([new.text()]))  # no flush
        assert new.id in {m.id for m in store.list_user(ALICE, fresh=True)}
        assert new.id in {m.id for m in store.list_user_vectors(ALICE, fresh=True).memories}
        store.list_user(ALICE)
        assert asked == ["Strong", "Strong", "Session"]
        other.delete_ids(ALICE, [new.id])
    finally:
        store._client.query = query
        other.close()
