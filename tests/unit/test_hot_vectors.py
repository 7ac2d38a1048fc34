"""``retrieval.hot_vectors``: the dense leg from each cached user's vectors in process ranks
exactly as the store's (Milvus Lite, FLAT cosine) does, follows the retriever's own writes
without reading the store again, honours time windows, and falls back to the store when a
write came without vectors; erasure drops the vectors with the index."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from memroute.config.schema import MemoryConfig, RetrievalConfig
from memroute.errors import ConfigError
from memroute.memory import MilvusMemoryStore
from memroute.retrieval.retriever import HybridRetriever
from memroute.types import TurnPair

DIM, T0, UID = 16, 1683504000, "acme:alice"


class HashEncoder:
    """Deterministic unit vectors from word hashes: texts sharing words are near."""

    name, dim = "hash", DIM

    def encode(self, texts):
        out = np.zeros((len(texts), DIM), np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                h = hashlib.sha256(w.strip(".,?!").encode()).digest()
                out[i, h[0] % DIM] += 1.0 + h[1] / 255
        out += 1e-3
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def pairs(user: str, n: int, offset: int = 0) -> list[TurnPair]:
    words = ["garden", "violin", "kitchen", "marathon", "spanish", "bicycle", "tomato", "novel"]
    return [TurnPair(user, f"s{(i + offset) // 5}", i + offset,
                     f"I spent time on the {words[i % 8]} and the {words[(i * 3) % 8]} {i}.",
                     "Nice.", T0 + 86400 * ((i + offset) // 5)) for i in range(n)]


@pytest.fixture
def store(tmp_path):
    s = MilvusMemoryStore(MemoryConfig(uri=str(tmp_path / "m.db")), DIM)
    yield s
    s.close()


def retrievers(store):
    enc = HashEncoder()
    hot = HybridRetriever(enc, store, RetrievalConfig(top_k=5, hot_vectors=True))
    cold = HybridRetriever(enc, store, RetrievalConfig(top_k=5))
    return enc, hot, cold


QUERIES = ["the violin and the garden", "tomato novel", "a bicycle in the kitchen", "spanish"]


def test_the_in_process_dense_leg_ranks_as_the_store_does(store):
    enc, hot, cold = retrievers(store)
    hot.remember(pairs(UID, 40) + pairs("acme:bob", 10))
    store.flush()
    for q in QUERIES:
        for window in (None, (T0 + 86400, T0 + 3 * 86400)):
            v = enc.encode([q])[0]
            got = hot._dense(UID, v, 8, window)
            want = cold._dense(UID, v, 8, window)
            assert [m.id for m, _ in got] == [m.id for m, _ in want]
            assert np.allclose([s for _, s in got], [s for _, s in want], atol=1e-5)
            assert all(m.user_id == UID for m, _ in got)
            if window:
                assert all(window[0] <= m.session_time <= window[1] for m, _ in got)
        assert [h.memory.id for h in hot.retrieve(UID, q)] == [h.memory.id for h in cold.retrieve(UID, q)]


def test_writes_reach_the_cached_vectors_without_a_store_read(store):
    enc, hot, _ = retrievers(store)
    hot.remember(pairs(UID, 20))
    hot.retrieve(UID, "violin")  # builds the user's entry: one store read
    builds = hot.bm25.builds
    extra = TurnPair(UID, "s9", 99, "My locker code is ZX-4471 at the velodrome.", "Noted.", T0)
    hot.remember([extra])
    v = enc.encode(["locker code velodrome"])[0]
    assert hot._dense(UID, v, 1, None)[0][0].id == extra.id
    assert hot.bm25.builds == builds  # extended in place, not re-read
    entry = hot.bm25.get(UID)
    assert entry.vectors is not None and len(entry.vectors.ids) == 21
    assert entry.nbytes > entry.vectors.nbytes > 21 * DIM * 4 - 1
    hot.remember([extra])  # the same id again: still one row
    assert len(hot.bm25.get(UID).vectors.ids) == 21


def test_a_write_without_vectors_falls_back_to_the_store(store):
    enc, hot, cold = retrievers(store)
    hot.remember(pairs(UID, 12))
    store.flush()
    hot.retrieve(UID, "garden")
    new = pairs(UID, 3, offset=50)
    store.upsert(new, enc.encode([p.text() for p in new]))  # written elsewhere...
    store.flush()
    hot.bm25.extend(cold.bm25.get(UID).memories.values())  # ...and told without vectors
    assert hot.bm25.get(UID).vectors is None
    v = enc.encode(["novel tomato"])[0]
    assert [m.id for m, _ in hot._dense(UID, v, 5, None)] == [m.id for m, _ in cold._dense(UID, v, 5, None)]


def test_erasure_drops_the_vectors(store):
    _, hot, _ = retrievers(store)
    hot.remember(pairs(UID, 5))
    hot.retrieve(UID, "garden")
    assert UID in hot.bm25
    hot.forget_user(UID)
    assert UID not in hot.bm25


def test_a_store_that_cannot_read_vectors_is_refused():
    class NoVectors:
        dim = DIM

        def list_user(self, uid):
            return []

        def search(self, *a, **k):
            return []

    with pytest.raises(ConfigError) as err:
        HybridRetriever(HashEncoder(), NoVectors(), RetrievalConfig(hot_vectors=True))
    assert err.value.field == "retrieval.hot_vectors"


def test_a_user_with_no_memories_yet_gets_none_and_then_their_first(store):
    """The cache entry of a user with no rows holds an empty (0, dim) matrix: their first
    request is answered without memory (it failed on the reshape before), their first write
    is found afterwards."""
    enc, hot, _ = retrievers(store)
    assert hot.retrieve("newcomer", "the violin") == []
    first = TurnPair("newcomer", "s1", 0, "I bought a violin.", "Nice.", T0)
    hot.remember([first])
    assert [h.memory.id for h in hot.retrieve("newcomer", "the violin")] == [first.id]
