"""Journal -> flusher -> real Milvus Lite (tmp file), real MiniLM encoder and HybridRetriever.

Checks the serving guarantees: 16 concurrent clients all succeed and every acknowledged turn-pair
is in Milvus exactly once; a restart replays what was not flushed, exactly once; a pair is
retrievable by its user before it reaches Milvus (read-your-writes).
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from memroute.config.schema import MemoryConfig, RetrievalConfig
from memroute.journal import Flusher, Journal, JournaledRetriever
from memroute.namespace import namespaced_user_id
from memroute.memory import MilvusMemoryStore
from memroute.retrieval.retriever import HybridRetriever
from memroute.types import TurnPair

T0 = 1683504000
CLIENTS, TURNS = 16, 4
TOPICS = ["my sister's wedding in Porto", "the blue bicycle I bought", "my allergy to peanuts",
          "the violin lessons on Tuesdays", "our trip to Kyoto", "the tomato plants on my balcony"]


def turn(uid: str, i: int, text: str | None = None, answer: str = "Noted.") -> TurnPair:
    text = text or f"Let me tell you about {TOPICS[i % len(TOPICS)]} (note {i})."
    return TurnPair(uid, "live", i, text, answer, T0 + 60 * i, created_at=float(T0 + i))


class Recorder:
    """write_fn for the flusher: the real remember(), plus a log of every id it was given."""

    def __init__(self, retriever: HybridRetriever, crash_after_write: bool = False) -> None:
        self.retriever = retriever
        self.crash_after_write = crash_after_write
        self.ids: list[int] = []

    def __call__(self, pairs: list[TurnPair]) -> int:
        n = self.retriever.remember(pairs)
        self.ids.extend(p.id for p in pairs)
        if self.crash_after_write:
            raise RuntimeError("process died after the Milvus write, before mark_flushed")
        return n


def open_memory(path, encoder) -> tuple[MilvusMemoryStore, HybridRetriever]:
    store = MilvusMemoryStore(MemoryConfig(uri=str(path)), encoder.dim)
    return store, HybridRetriever(encoder, store, RetrievalConfig(top_k=5, candidate_k=50))


@pytest.fixture
def memory(tmp_path, encoder):
    store, retriever = open_memory(tmp_path / "milvus.db", encoder)
    yield store, retriever
    store.close()


def test_sixteen_concurrent_clients_every_ack_in_milvus_exactly_once(tmp_path, memory):
    store, retriever = memory
    journal = Journal(tmp_path / "journal.sqlite3")
    recorder = Recorder(retriever)
    flusher = Flusher(journal, recorder, batch_size=16, interval_s=0.05)
    served = JournaledRetriever(retriever, journal)
    flusher.start()
    acked: dict[str, list[int]] = {}
    seen_own_fact: dict[str, bool] = {}
    errors: list[BaseException] = []

    def client(k: int) -> None:
        uid = namespaced_user_id(f"tenant{k % 4}", f"user{k}")
        try:
            pairs = [turn(uid, i) for i in range(TURNS)]
            for p in pairs:
                served.remember([p])  # the Router's store_answers step: acked when it returns
            served.remember([pairs[0]])  # a retried request
            hits = served.retrieve(uid, f"what about {TOPICS[(TURNS - 1) % len(TOPICS)]}?")
            seen_own_fact[uid] = pairs[-1].id in {h.memory.id for h in hits}
            assert all(h.memory.user_id == uid for h in hits)
            acked[uid] = [p.id for p in pairs]
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(acked) == CLIENTS
    assert all(seen_own_fact.values())  # read-your-writes, whether pending or already flushed
    assert flusher.stop() == 0

    assert store.count() == CLIENTS * TURNS
    for uid, ids in acked.items():
        assert store.count(uid) == TURNS
        assert store.existing_ids(uid, ids) == set(ids)
    # No crash happened, so no id was even written twice.
    assert Counter(recorder.ids) == Counter(i for ids in acked.values() for i in ids)
    assert journal.stats().flushed == CLIENTS * TURNS


def test_restart_replays_unflushed_entries_exactly_once(tmp_path, encoder):
    uid = namespaced_user_id("acme", "alice")
    pairs = [turn(uid, i) for i in range(6)]
    db, jpath = tmp_path / "milvus.db", tmp_path / "journal.sqlite3"

    # Process 1: the first batch reaches Milvus but the process dies before marking it;
    # the second batch is acknowledged and never written.
    store, retriever = open_memory(db, encoder)
    journal = Journal(jpath)
    journal.append(pairs)
    with pytest.raises(RuntimeError):
        Flusher(journal, Recorder(retriever, crash_after_write=True), batch_size=3).flush_now()
    assert store.count(uid) == 3 and journal.pending_count() == 6
    store.close()
    del journal, retriever  # no stop(), no close()

    # Process 2: the same files; the flusher's start-up pass replays all six.
    store, retriever = open_memory(db, encoder)
    try:
        journal = Journal(jpath)
        recorder = Recorder(retriever)
        flusher = Flusher(journal, recorder, batch_size=64, interval_s=0.05)
        flusher.start()
        assert flusher.wait_drained(30)
        flusher.stop()
        assert sorted(recorder.ids) == sorted(p.id for p in pairs)
        assert store.count(uid) == 6  # three re-upserted, three new: no duplicates
        memories = store.list_user(uid)
        assert sorted(m.id for m in memories) == sorted(p.id for p in pairs)
        assert journal.pending_count() == 0
    finally:
        store.close()


def test_a_pending_pair_is_retrievable_before_it_reaches_milvus(tmp_path, memory):
    store, retriever = memory
    uid, other = namespaced_user_id("acme", "alice"), namespaced_user_id("acme", "bob")
    retriever.remember([turn(uid, i) for i in range(6)])
    store.flush()
    journal = Journal(tmp_path / "journal.sqlite3")
    served = JournaledRetriever(retriever, journal)  # no flusher yet: the pair stays pending
    fact = turn(uid, 50, "My new locker code is ZX-4471.", "Locker ZX-4471, noted.")
    served.remember([fact])
    assert store.existing_ids(uid, [fact.id]) == set()

    hits = served.retrieve(uid, "What is my locker code?")
    assert hits[0].memory.id == fact.id  # from the journal: not in Milvus yet (checked above)
    assert fact.id not in {h.memory.id for h in served.retrieve(other, "What is my locker code?")}

    Flusher(journal, retriever.remember).flush_now()
    hits = served.retrieve(uid, "What is my locker code?")
    ids = [h.memory.id for h in hits]
    assert ids.count(fact.id) == 1
    assert next(h for h in hits if h.memory.id == fact.id).dense_score is not None  # from Milvus
    assert store.existing_ids(uid, [fact.id]) == {fact.id}


PARAPHRASES = [  # (statement, follow-up): no word in common, stemmed or not
    ("I am vegetarian now.", "What are my current dietary restrictions?"),
    ("My sister Ana moved to Lisbon.", "Where does my sibling live?"),
    ("I started a new job at a bakery last week.", "Where am I employed these days?"),
    ("My flight to Tokyo leaves on March 3rd.", "When is my trip to Japan?"),
    ("I broke my left wrist skiing.", "What injury am I recovering from?"),
    ("My son was accepted to MIT.", "Which university will my boy attend?"),
]


def test_a_paraphrased_follow_up_sees_the_pending_pair(tmp_path, memory):
    store, retriever = memory
    uid = namespaced_user_id("acme", "carol")
    retriever.remember([turn(uid, i) for i in range(30)])
    store.flush()
    journal = Journal(tmp_path / "journal.sqlite3")
    served = JournaledRetriever(retriever, journal)
    flush = Flusher(journal, retriever.remember).flush_now
    for n, (statement, follow_up) in enumerate(PARAPHRASES):
        fact = turn(uid, 100 + n, statement, "Noted, thanks for telling me.")
        served.remember([fact])
        assert store.existing_ids(uid, [fact.id]) == set()  # only in the journal
        hits = served.retrieve(uid, follow_up)
        assert fact.id in [h.memory.id for h in hits], (statement, follow_up)
        flush()  # earlier statements are stored distractors for the next ones
    assert store.count(uid) == 30 + len(PARAPHRASES)
