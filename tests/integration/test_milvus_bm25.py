"""Milvus' own BM25 (memory.bm25_function, retrieval.bm25_backend=milvus) on real Milvus Lite + MiniLM."""

from __future__ import annotations

from dataclasses import replace

import pytest

from memroute.config.schema import MemoryConfig, RetrievalConfig
from memroute.errors import ConfigError, InvalidRequest
from memroute.memory import MilvusMemoryStore, milvus_fulltext
from memroute.retrieval.retriever import HybridRetriever
from memroute.types import TurnPair

from .test_memory_retrieval import (
    ALICE,
    ALICE_PAIRS,
    BOB,
    BOB_PAIRS,
    BOB_SECRET,
    PAYLOAD,
    T0,
    filler,
)

MILVUS_BM25 = RetrievalConfig(top_k=5, candidate_k=100, bm25_backend="milvus")
BOB_QUERY = "Veronica moved to Lisbon to teach mathematics"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    db = tmp_path_factory.mktemp("milvus_bm25") / "memories.db"
    s = MilvusMemoryStore(MemoryConfig(uri=str(db), bm25_function=True), 384)
    yield s
    s.close()


@pytest.fixture(scope="module")
def retriever(encoder, store):
    r = HybridRetriever(encoder, store, MILVUS_BM25)
    assert r.remember(ALICE_PAIRS + BOB_PAIRS) == len(ALICE_PAIRS) + len(BOB_PAIRS)
    store.flush()
    return r


def test_search_bm25_ranks_the_exact_keyword_memory_first(retriever, store):
    hits = store.search_bm25(ALICE, "ZX-4471", 10)
    assert "ZX-4471" in hits[0][0].text
    scores = [s for _, s in hits]
    assert all(s > 0 for s in scores) and scores == sorted(scores, reverse=True)
    # decoys share only "zx" with the query; the planted pair has both terms (twice)
    assert scores[0] > 1.5 * scores[1]


def test_search_bm25_never_returns_another_users_memory(retriever, store):
    assert BOB_SECRET[0] in store.search_bm25(BOB, BOB_QUERY, 5)[0][0].text
    alice = store.search_bm25(ALICE, BOB_QUERY, 100)
    assert all(m.user_id == ALICE for m, _ in alice)
    assert not any("Veronica" in m.text for m, _ in alice)
    assert store.search_bm25("nobody-here", BOB_QUERY, 5) == []


def test_search_bm25_refuses_bad_input(retriever, store):
    with pytest.raises(InvalidRequest) as err:
        store.search_bm25(PAYLOAD, "Veronica", 5)
    assert err.value.field == "user_id"
    for query, limit, field in (("   ", 5, "query"), ("x", 0, "limit")):
        with pytest.raises(InvalidRequest) as err:
            store.search_bm25(ALICE, query, limit)
        assert err.value.field == field


@pytest.mark.parametrize("strategy", ["bm25", "hybrid"])
def test_retriever_with_milvus_bm25_keeps_users_apart(retriever, strategy):
    bob_text = BOB_PAIRS[-1].text()
    assert retriever.retrieve(BOB, BOB_QUERY, strategy=strategy)[0].memory.text == bob_text
    hits = retriever.retrieve(ALICE, bob_text, top_k=100, strategy=strategy)
    assert hits and all(h.memory.user_id == ALICE for h in hits)
    assert not any("Veronica" in h.memory.text for h in hits)


@pytest.mark.parametrize("fusion", ["rrf", "weighted", "bm25_dominant"])
def test_milvus_backend_finds_keyword_fact_and_paraphrase(retriever, encoder, store, fusion):
    r = HybridRetriever(encoder, store, replace(MILVUS_BM25, top_k=3, fusion=fusion))
    hit = r.retrieve(ALICE, "which serial number was ZX-4471")[0]
    assert "ZX-4471" in hit.memory.text and hit.bm25_score is not None and hit.bm25_score > 0
    assert "Biscuit" in r.retrieve(ALICE, "What did I call my new dog?")[0].memory.text


def test_both_backends_agree_on_top_hits(retriever, encoder, store):
    inproc = HybridRetriever(encoder, store, replace(MILVUS_BM25, bm25_backend="inprocess"))
    for user, query in ((ALICE, "ZX-4471 valve"), (ALICE, "golden retriever Biscuit"),
                        (BOB, BOB_QUERY)):
        for strategy in ("bm25", "hybrid"):
            a = retriever.retrieve(user, query, strategy=strategy)[0].memory.id
            b = inproc.retrieve(user, query, strategy=strategy)[0].memory.id
            assert a == b, (user, query, strategy)


def test_a_new_memory_is_searchable_at_once_without_a_cache(retriever, store):
    user = "carol-bm25"
    assert retriever.retrieve(user, "kumquat", strategy="bm25") == []
    retriever.remember([TurnPair(user, "s9", 0, "We grew a kumquat tree on the balcony.", "Nice!", T0)])
    hits = retriever.retrieve(user, "kumquat", strategy="bm25")
    assert len(hits) == 1 and "kumquat" in hits[0].memory.text


def test_builtin_hybrid_search(retriever, store, encoder):
    vec = encoder.encode(["which serial number was ZX-4471"])[0]
    hits = store.hybrid_search_builtin(ALICE, vec, "which serial number was ZX-4471", 5, 100, 60)
    assert 0 < len(hits) <= 5 and "ZX-4471" in hits[0][0].text
    assert all(m.user_id == ALICE for m, _ in hits)
    scores = [s for _, s in hits]
    assert scores == sorted(scores, reverse=True) and scores[0] <= 2 / 61 + 1e-6
    bob = store.hybrid_search_builtin(BOB, encoder.encode([BOB_QUERY])[0], BOB_QUERY, 50, 100, 60)
    assert bob[0][0].text == BOB_PAIRS[-1].text() and {m.user_id for m, _ in bob} == {BOB}


def test_schema_must_match_the_config(tmp_path, encoder):
    pairs = filler("schema-user", 3)
    vecs = encoder.encode([p.text() for p in pairs])
    for created_with in (False, True):
        cfg = MemoryConfig(uri=str(tmp_path / f"s{created_with}.db"), bm25_function=created_with)
        with MilvusMemoryStore(cfg, 384) as s:
            s.upsert(pairs, vecs)
            s.flush()
        with pytest.raises(ConfigError) as err:
            MilvusMemoryStore(replace(cfg, bm25_function=not created_with), 384)
        assert err.value.field == "memory.bm25_function"
        assert cfg.collection in str(err.value)
        with MilvusMemoryStore(cfg, 384) as again:  # the matching config still opens it
            assert again.count("schema-user") == 3
            if not created_with:
                with pytest.raises(ConfigError) as err:
                    again.search_bm25("schema-user", "afternoon", 5)
                assert err.value.field == "memory.bm25_function"
                with pytest.raises(ConfigError) as err:
                    HybridRetriever(encoder, again, MILVUS_BM25)
                assert err.value.field == "retrieval.bm25_backend"


def test_unknown_backend_and_old_servers_are_refused(store, encoder):
    with pytest.raises(ConfigError) as err:
        HybridRetriever(encoder, store, replace(MILVUS_BM25, bm25_backend="elastic"))
    assert err.value.field == "retrieval.bm25_backend"
    for version in ("v2.3.5", "2.4.15"):
        with pytest.raises(ConfigError) as err:
            milvus_fulltext.check_server_version(version)
        assert err.value.field == "memory.bm25_function" and version in str(err.value)
    for version in ("milvus_lite-3.2.2", "v2.5.4", "v2.6.0", ""):
        milvus_fulltext.check_server_version(version)
