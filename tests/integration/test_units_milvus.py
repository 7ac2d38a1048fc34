"""Atomic context units on real Milvus Lite + MiniLM (build.unit_index: their own collection
beside the turn-pairs): two rewordings of one sentence are stored once, a distinct sentence is
stored, the units are found by hybrid search, memory search ranks them with the turn-pairs, and
erasure removes them."""

from __future__ import annotations

import pytest

from memroute import build
from memroute.config.schema import MemoryConfig, RetrievalConfig
from memroute.config.search import SearchConfig
from memroute.config.units import UnitsConfig
from memroute.memory.facts import FactStore
from memroute.memory.facts.extraction_schema import ExtractedUnit
from memroute.types import TurnPair

ALICE, BOB = "acme:alice", "acme:bob"
T0 = 1683504000  # 8 May 2023
DOG = "On 8 May 2023 Alice adopted a golden retriever puppy named Biscuit."
DOG_AGAIN = "On 8 May 2023, Alice adopted a golden retriever puppy named Biscuit."
CAT = "On 8 May 2023 Alice adopted a cat named Biscuit."
LYON = "On 9 May 2023 Alice said her budget for the Lyon trip is 80 euros a day."


def unit(text: str, user: str = ALICE, turn: int = 0) -> ExtractedUnit:
    return ExtractedUnit(text, user, "s1", turn, T0 + 60 * turn)


@pytest.fixture
def parts(tmp_path, encoder):
    mem_cfg = MemoryConfig(uri=str(tmp_path / "milvus.db"), collection="memroute_test")
    mem = build.memory(None, mem_cfg, RetrievalConfig(), None, enc=encoder, units=UnitsConfig())
    yield mem
    mem.close()


def test_rewordings_are_stored_once_and_a_distinct_unit_is_stored(parts, encoder):
    index = parts.units
    assert index.store.collection == "memroute_test_units"
    sims = encoder.encode([DOG, DOG_AGAIN, CAT])
    assert float(sims[0] @ sims[1]) >= 0.95 > float(sims[0] @ sims[2])  # what the test rests on
    assert index.add(ALICE, [unit(DOG)]).written == 1
    # across writes: Milvus' own search sees the stored unit
    assert index.add(ALICE, [unit(DOG_AGAIN, turn=1)]).suppressed == 1
    w = index.add(ALICE, [unit(CAT, turn=2), unit(LYON, turn=3), unit(LYON, turn=3)])
    assert (w.written, w.suppressed) == (2, 1)
    assert sorted(m.text for m in index.store.list_user(ALICE)) == sorted([CAT, DOG, LYON])
    assert index.add(BOB, [unit(DOG, BOB)]).written == 1  # dedup is per user
    assert parts.store.count() == 0  # the turn-pairs' collection holds no unit

    [hit] = index.search(ALICE, "the golden retriever puppy", 1)
    assert hit.memory.text == DOG and hit.memory.session_time == T0
    assert index.search(ALICE, "Lyon budget", 1)[0].memory.text == LYON  # the BM25 cache was told

    assert index.erase_user(ALICE) == 3 and index.store.list_user(ALICE) == []
    assert [m.text for m in index.store.list_user(BOB)] == [DOG]
    assert index.search(ALICE, "dog", 3) == []


def test_memory_search_ranks_units_and_turns_with_real_vectors(parts, tmp_path):
    parts.units.add(ALICE, [unit(DOG)])
    parts.retriever.remember([
        TurnPair(ALICE, "s1", i, f"I spent the afternoon {act}.", "Sounds nice.", T0 + i)
        for i, act in enumerate(["baking bread", "repainting the kitchen", "planting tomatoes"])])
    parts.store.flush()
    facts = FactStore(f"sqlite:///{tmp_path / 'facts.sqlite3'}")
    try:
        corpus = build.turn_corpus(parts.retriever, parts.store)  # the BM25 cache's rows
        stored = parts.store.list_user(ALICE)
        assert sorted(m.id for m in corpus(ALICE)) == sorted(m.id for m in stored)
        search = build.memory_search(SearchConfig(), facts, parts.retriever, RetrievalConfig(),
                                     enc=parts.encoder, units=parts.units, raw_turns=corpus)
        r = search.search(ALICE, "what did I name my new puppy", top_k=3)
        assert r.hits[0].kind == "unit" and r.hits[0].text == DOG
        assert r.confidence in ("medium", "high") and not r.fallback
        weak = search.search(ALICE, "kitch", top_k=2)  # part of a word: no token, a substring
        assert weak.fallback and weak.confidence == "low"
        assert weak.hits[-1].fallback and "kitchen" in weak.hits[-1].text
        assert weak.hits[-1].score < min(h.score for h in weak.hits if not h.fallback)
    finally:
        facts.close()
