"""Read-your-writes over a real HybridRetriever: pending pairs scored like stored ones.

The encoder is a small deterministic stand-in for MiniLM: words of one concept group share a
direction, so a paraphrase with no word in common is still close; every other word is hashed.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from memroute.config.schema import RetrievalConfig
from memroute.errors import InvalidRequest
from memroute.journal import Flusher, Journal, JournaledRetriever, merge_pending
from memroute.journal.pending_scoring import VectorCache, recency_slot
from memroute.retrieval.retriever import HybridRetriever
from memroute.text.tokenize import tokenize
from memroute.types import Memory, RetrievalHit, TurnPair, memory_of

T0 = 1683504000
CONCEPTS = [
    {"vegetarian", "vegan", "dietary", "diet", "meat", "food", "eat"},
    {"sister", "sibling", "brother"},
    {"lisbon", "live", "lives", "city", "moved"},
    {"locker", "code", "password"},
]
FILLER = ["I repaired the garden fence on Sunday.", "We watched a documentary about whales.",
          "My laptop battery drains quickly.", "The train to work was late again.",
          "I painted the kitchen walls yellow.", "Our neighbour plays the trumpet at night.",
          "I finished reading a history of Rome.", "The dentist said my teeth look fine."]


class ConceptEncoder:
    name, dim = "concept", 64

    def __init__(self) -> None:
        self.texts: list[str] = []

    def encode(self, texts):
        self.texts.extend(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().replace("?", " ").replace(".", " ").split():
                dim = next((c for c, g in enumerate(CONCEPTS) if w in g), None)
                if dim is None:
                    dim = len(CONCEPTS) + zlib.crc32(w.encode()) % (self.dim - len(CONCEPTS))
                    out[i, dim] += 0.5  # unrelated words count less than shared concepts
                else:
                    out[i, dim] += 2.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


class DictStore:
    dim = 64

    def __init__(self) -> None:
        self.rows: dict[int, tuple[Memory, np.ndarray]] = {}

    def upsert(self, pairs, vectors):
        for p, v in zip(pairs, vectors):
            self.rows[p.id] = (memory_of(p), v)
        return len(pairs)

    def search(self, user_id, vector, limit):
        hits = [(m, float(v @ vector)) for m, v in self.rows.values() if m.user_id == user_id]
        return sorted(hits, key=lambda h: -h[1])[:limit]

    def list_user(self, user_id):
        return [m for m, _ in self.rows.values() if m.user_id == user_id]


def pair(text: str, turn: int, user: str = "alice", answer: str = "Noted.") -> TurnPair:
    return TurnPair(user, "s1", turn, text, answer, T0 + turn)


@pytest.fixture
def setup(tmp_path):
    encoder = ConceptEncoder()
    inner = HybridRetriever(encoder, DictStore(), RetrievalConfig(top_k=3, context_weight=0.0))
    inner.remember([pair(t, 100 + i, user="alice") for i, t in enumerate(FILLER)])
    journal = Journal(tmp_path / "j.sqlite3")
    return inner, journal, JournaledRetriever(inner, journal), encoder


def ids(hits):
    return [h.memory.id for h in hits]


def test_a_paraphrase_with_no_shared_word_sees_the_pending_pair(setup):
    _, journal, served, _ = setup
    fact = pair("I am vegetarian now.", 1)
    served.remember([fact])
    query = "What are my current dietary restrictions?"
    hits = served.retrieve("alice", query)
    assert hits[0].memory.id == fact.id and hits[0].dense_score > 0.3
    # The lexical rule (what the served path did before) cannot see it.
    assert fact.id not in ids(merge_pending(query, [], journal.pending_for_user("alice"), top_k=3))
    assert served.retrieve("bob", query) == []  # another user's pending pair


def test_a_pair_flushed_by_another_replica_is_read_from_the_journal_until_visible(setup):
    inner, journal, served, _ = setup
    fact = pair("I am vegetarian now.", 1)
    served.remember([fact])
    journal.mark_flushed([e.seq for e in journal.pending()])  # flushed: the store lags behind
    query = "What are my current dietary restrictions?"
    assert fact.id not in ids(served.retrieve("alice", query))  # the window this closes
    lagging = JournaledRetriever(inner, journal, visible_after_s=30.0)
    assert ids(lagging.retrieve("alice", query))[0] == fact.id


@pytest.mark.parametrize("strategy", ["bm25", "hybrid"])
def test_a_stemmed_only_overlap_is_seen(setup, tmp_path, strategy):
    inner, journal, _, encoder = setup
    cfg = RetrievalConfig(top_k=3, context_weight=0.0, strategy=strategy)
    served = JournaledRetriever(HybridRetriever(encoder, inner.store, cfg), journal)
    fact = pair("Sugar is restricted for me, doctor's orders.", 1)
    served.remember([fact])
    query = "Which restrictions did the doctors give?"  # restrict-, doctor-: stems only
    assert not set(tokenize(query, 1)) & set(tokenize(fact.text(), 1))
    hits = served.retrieve("alice", query)
    assert fact.id in ids(hits) and next(h for h in hits if h.memory.id == fact.id).bm25_score > 0
    if strategy == "bm25":
        assert ids(hits) == [fact.id]  # the only BM25 match, scored by BM25 like a stored pair
    lexical = merge_pending(query, [], journal.pending_for_user("alice"), top_k=3)
    assert ids(lexical) == [fact.id]  # the keyword-only fallback stems too


def test_an_irrelevant_pending_pair_does_not_push_relevant_stored_hits_out(setup):
    inner, journal, served, _ = setup
    relevant = [pair("My locker code is 4471.", 10), pair("The gym locker is number 12.", 11),
                pair("The office door code changed to 9090.", 12)]
    inner.remember(relevant)
    query = "what is my locker code?"
    before = ids(inner.retrieve("alice", query))
    assert set(before) == {p.id for p in relevant}
    noise = pair("I wrote some Python today, nothing else.", 13, answer="Nice code!")
    served.remember([noise])
    after = served.retrieve("alice", query)
    assert ids(after) == before  # shares "code" with the query, but ranks behind all three
    # The old rule put any lexically overlapping pending pair first.
    lexical = merge_pending(query, inner.retrieve("alice", query), journal.pending_for_user("alice"),
                            top_k=3)
    assert ids(lexical)[0] == noise.id


class FlushDuringRead:
    """The flusher runs while the store is being read: before or after the store answers."""

    def __init__(self, inner: HybridRetriever, journal: Journal, after: bool) -> None:
        self.inner, self.after = inner, after
        self.cfg, self.encoder, self.bm25 = inner.cfg, inner.encoder, inner.bm25
        self.flusher = Flusher(journal, inner.remember)

    def retrieve_many(self, user_ids, queries, *, top_k=None):
        if not self.after:
            self.flusher.flush_now()
        out = self.inner.retrieve_many(user_ids, queries, top_k=top_k)
        if self.after:
            self.flusher.flush_now()
        return out


@pytest.mark.parametrize("after", [False, True])
def test_a_pair_flushed_between_snapshot_and_store_read_is_seen_once(setup, after):
    inner, journal, _, _ = setup
    served = JournaledRetriever(FlushDuringRead(inner, journal, after), journal)
    fact = pair("My sister Ana moved to Lisbon.", 1)
    served.remember([fact])
    hits = served.retrieve("alice", "Where does my sibling live?")
    assert ids(hits).count(fact.id) == 1 and hits[0].memory.id == fact.id
    assert journal.pending_for_user("alice") == []  # it did move to the store meanwhile
    assert ids(served.retrieve("alice", "Where does my sibling live?")).count(fact.id) == 1


def test_a_pending_copy_of_a_stored_id_wins_and_appears_once(setup):
    inner, _, served, _ = setup
    old = pair("My locker code is 1234.", 5)
    inner.remember([old])
    new = pair("My locker code is 5678.", 5)  # same user, session, turn: same id, newer text
    assert new.id == old.id
    served.remember([new])
    hits = served.retrieve("alice", "what is my locker code?")
    assert ids(hits).count(new.id) == 1 and hits[0].memory.text == new.text()


def test_each_pending_pair_is_embedded_once_and_nothing_pending_changes_nothing(setup):
    inner, _, served, encoder = setup
    queries = ["What do I eat?", "Where does my brother live?", "my locker"]
    assert [ids(h) for h in served.retrieve_many(["alice"] * 3, queries)] == [
        ids(h) for h in inner.retrieve_many(["alice"] * 3, queries)
    ]
    facts = [pair("I am vegetarian now.", 1), pair("My sister Ana moved to Lisbon.", 2)]
    served.remember(facts)
    encoder.texts.clear()
    for _ in range(3):
        served.retrieve_many(["alice", "alice"], queries[:2])
    pair_texts = [t for t in encoder.texts if t.startswith("[")]
    assert sorted(pair_texts) == sorted(p.text() for p in facts)  # once each, not per query
    assert len(encoder.texts) - len(pair_texts) == 3 * 2  # each query once per call, not twice
    assert served.vectors.embedded == 2


def test_query_vectors_from_the_caller_are_not_embedded_again(setup):
    """The memory search embeds the query once and passes the rows on (``vectors=``)."""
    _, _, served, encoder = setup
    fact = pair("I am vegetarian now.", 1)
    served.remember([fact])
    query = "What are my current dietary restrictions?"
    expected = ids(served.retrieve("alice", query))
    vectors = encoder.encode(served.dense_queries(["alice"], [query]))
    encoder.texts.clear()
    hits = served.retrieve_many(["alice"], [query], vectors=vectors)[0]
    assert ids(hits) == expected and hits[0].memory.id == fact.id
    assert encoder.texts == []  # the pending pair's vector was cached by the first call
    with pytest.raises(InvalidRequest, match="2 vectors for 1 queries"):
        served.retrieve_many(["alice"], [query], vectors=np.vstack([vectors, vectors]))


def test_vector_cache_is_bounded_and_keyed_by_text():
    cache = VectorCache(max_size=2)
    a, b, c = (Memory(i, "u", f"t{i}", T0) for i in (1, 2, 3))
    cache.put([a, b, c], np.eye(3, dtype=np.float32))
    assert len(cache) == 2 and set(cache.get([a, b, c])) == {2, 3}
    assert cache.missing([Memory(2, "u", "changed", T0), b]) == [Memory(2, "u", "changed", T0)]


def test_recency_slot_needs_a_cosine_above_the_floor_and_the_weakest_shown():
    def hit(i: int, dense: float | None) -> RetrievalHit:
        return RetrievalHit(Memory(i, "u", f"t{i}", T0), 1.0 - i / 10, dense_score=dense)

    stored = [hit(1, 0.5), hit(2, 0.4), hit(3, 0.35)]
    assert ids(recency_slot(stored + [hit(9, 0.38)], {9}, top_k=3, floor=0.3)) == [1, 2, 9]
    assert ids(recency_slot(stored + [hit(9, 0.34)], {9}, top_k=3, floor=0.3)) == [1, 2, 3]
    assert ids(recency_slot(stored + [hit(9, 0.2)], {9}, top_k=2, floor=0.3)) == [1, 2]
    assert ids(recency_slot([hit(1, 0.5), hit(9, 0.1)], {9}, top_k=3, floor=0.3)) == [1, 9]
    lone = RetrievalHit(Memory(9, "u", "t9", T0), 0.0, dense_score=0.05, bm25_score=2.0)
    assert ids(recency_slot(stored + [lone], {9}, top_k=3, floor=0.3)) == [1, 2, 9]  # best BM25
    keyword = RetrievalHit(Memory(4, "u", "t4", T0), 0.5, dense_score=0.3, bm25_score=3.0)
    assert ids(recency_slot(stored + [keyword, lone], {9}, top_k=3, floor=0.3)) == [1, 2, 3]


class VectorDictStore(DictStore):
    def list_user_vectors(self, user_id):
        from memroute.memory.base import UserRows

        rows = [(m, v) for m, v in self.rows.values() if m.user_id == user_id]
        return UserRows([m for m, _ in rows], np.asarray([v for _, v in rows], dtype=np.float32))


class SharedJournal(Journal):
    shared = True  # what a PostgreSQL journal says; one SQLite file stands in for it here


def test_hot_vectors_on_two_replicas_see_each_others_writes_through_the_shared_journal(tmp_path):
    """Two replicas, each with its own cached copy of a user's memories (BM25 index and
    vectors: retrieval.hot_vectors), one store and one shared journal. A pair the other
    replica's flusher wrote is found here once it settled; this replica's own writes keep its
    cache without a rebuild."""
    encoder, store = ConceptEncoder(), VectorDictStore()
    cfg = RetrievalConfig(top_k=3, context_weight=0.0, hot_vectors=True, supersede=False)
    journal = SharedJournal(tmp_path / "j.sqlite3")
    replicas = {}
    for name in ("a", "b"):
        inner = HybridRetriever(encoder, store, cfg)
        flusher = Flusher(journal, inner.remember)
        flusher.owner = name  # the claims' owner: what settled_seq tells apart
        served = JournaledRetriever(inner, journal, writer=name)
        replicas[name] = (inner, flusher, served)

    def flush(name: str) -> None:
        _, flusher, _ = replicas[name]
        entries = journal.claim(100, owner=name, lease_s=30)
        flusher.write_fn([e.pair for e in entries])
        journal.mark_flushed([e.seq for e in entries])

    store.upsert(*zip(*[(p, encoder.encode([p.user_text])[0])
                        for p in (pair(t, 100 + i) for i, t in enumerate(FILLER))]))
    query = "What is my locker code?"
    for _, _, served in replicas.values():  # both caches warm, without the fact
        assert served.retrieve("alice", query)
    builds = {n: replicas[n][0].bm25.stats().misses for n in replicas}

    fact = pair("My locker code is 4417.", 1)
    replicas["a"][2].remember([fact])
    flush("a")  # replica a's flusher wrote it: a's cache was extended in the write
    assert ids(replicas["a"][2].retrieve("alice", query))[0] == fact.id
    assert replicas["a"][0].bm25.stats().misses == builds["a"]  # its own write: no rebuild
    # replica b: the journal row is flushed (not pending); its cache was built before it
    assert ids(replicas["b"][2].retrieve("alice", query))[0] == fact.id
    assert replicas["b"][0].bm25.stats().misses == builds["b"] + 1  # rebuilt once from the store
    replicas["b"][2].retrieve("alice", query)
    assert replicas["b"][0].bm25.stats().misses == builds["b"] + 1  # and not again
