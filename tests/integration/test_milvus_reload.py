"""A collection released under the store (what a restarted Milvus server leaves) is loaded
again: the next search retries once, and the readiness ping reloads it, instead of every search
failing until the app restarts. Milvus Lite, the same client calls as a server."""

from __future__ import annotations

import numpy as np

from memroute.config.schema import MemoryConfig
from memroute.memory.milvus_store import MilvusMemoryStore
from memroute.types import TurnPair


def test_a_released_collection_is_loaded_again(tmp_path):
    store = MilvusMemoryStore(MemoryConfig(uri=str(tmp_path / "m.db"), collection="c"), dim=4)
    try:
        pair = TurnPair("alice", "s", 1, "My code is 7.", "Noted.", 1_683_500_000)
        store.upsert([pair], np.array([[1.0, 0.0, 0.0, 0.0]], dtype=np.float32))
        store.flush()
        query = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
        for reload in ("search", "ping"):
            store._client.release_collection("c")  # noqa: SLF001 - the fault a restart causes
            if reload == "ping":
                store.ping()
                assert "NotLoad" not in str(store._client.get_load_state("c")["state"])  # noqa: SLF001
            [(memory, score)] = store.search("alice", query, 5)
            assert memory.id == pair.id and score > 0.99
    finally:
        store.close()
