"""Fusion arithmetic on hand-computed cases, the registry, and fusion through the retriever."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from memroute.config.schema import RetrievalConfig
from memroute.errors import ConfigError, InvalidRequest
from memroute.retrieval.fusion import FUSIONS, FusedHit, fuse, get_fusion
from memroute.retrieval.retriever import HybridRetriever
from memroute.types import Memory, TurnPair

from .fakes import HashEncoder

CFG = RetrievalConfig(rrf_k=60, alpha=0.5, dominant_overlap=0.5, score_norm="minmax")
DENSE = [(1, 0.9), (2, 0.8), (3, 0.7)]
SPARSE = [(2, 5.0), (4, 3.0), (1, 1.0)]


def ids(hits: list[FusedHit]) -> list[int]:
    return [h.id for h in hits]


def by_id(hits: list[FusedHit]) -> dict[int, FusedHit]:
    return {h.id: h for h in hits}


def test_rrf_exact_scores():
    hits = fuse("rrf", DENSE, SPARSE, CFG)
    h = by_id(hits)
    assert h[1].score == pytest.approx(1 / 61 + 1 / 63)
    assert h[2].score == pytest.approx(1 / 62 + 1 / 61)
    assert h[3].score == pytest.approx(1 / 63)
    assert h[4].score == pytest.approx(1 / 62)
    assert ids(hits) == [2, 1, 4, 3]
    assert (h[2].dense_score, h[2].bm25_score) == (0.8, 5.0)
    assert (h[3].dense_score, h[3].bm25_score) == (0.7, None)
    assert (h[4].dense_score, h[4].bm25_score) == (None, 3.0)


def test_rrf_k_changes_scores_and_duplicates_keep_best_rank():
    hits = fuse("rrf", [(7, 1.0), (7, 0.5), (8, 0.4)], [], replace(CFG, rrf_k=0))
    assert [(h.id, h.score) for h in hits] == [(7, 1.0), (8, 0.5)]


def test_rrf_one_empty_leg_keeps_the_other_order():
    assert ids(fuse("rrf", DENSE, [], CFG)) == [1, 2, 3]
    assert ids(fuse("rrf", [], SPARSE, CFG)) == [2, 4, 1]
    assert fuse("rrf", [], [], CFG) == []


def test_weighted_min_max_arithmetic():
    # A missing id gets the leg's floor: the lowest cosine returned, BM25 0.
    # dense .9 .8 .7 (4: .7) -> 1 .5 0 0 ; bm25 5 3 1 (3: 0) -> 1 .6 .2 0
    h = by_id(fuse("weighted", DENSE, SPARSE, CFG))
    assert h[1].score == pytest.approx(0.5 * 1 + 0.5 * 0.2)
    assert h[2].score == pytest.approx(0.5 * 0.5 + 0.5 * 1)
    assert h[3].score == pytest.approx(0.0)
    assert h[4].score == pytest.approx(0.5 * 0.6)
    assert ids(fuse("weighted", DENSE, SPARSE, CFG)) == [2, 1, 4, 3]
    assert ids(fuse("weighted", DENSE, SPARSE, replace(CFG, alpha=0.8))) == [1, 2, 4, 3]
    h = by_id(fuse("weighted", DENSE, SPARSE, replace(CFG, alpha=0.8)))
    assert h[1].score == pytest.approx(0.8 + 0.2 * 0.2) and h[2].score == pytest.approx(0.6)
    assert h[4].score == pytest.approx(0.2 * 0.6)


def test_weighted_one_candidate_per_leg():
    # dense: 5 .3, 6 at the floor .3 -> tied, 1 each; bm25: 6 2.0 -> 1, 5 at 0 -> 0
    hits = fuse("weighted", [(5, 0.3)], [(6, 2.0)], replace(CFG, alpha=0.25))
    assert [(h.id, h.score) for h in hits] == [(6, 1.0), (5, 0.25)]


def _z(values: list[float]) -> list[float]:
    return list((np.array(values) - np.mean(values)) / np.std(values))


def test_weighted_z_score_arithmetic():
    # Over ids 1-4: dense .9 .8 .7 .7 (4 at the floor), bm25 1 5 0 3 (3 at 0).
    cfg = replace(CFG, score_norm="zscore")
    zd, zs = _z([0.9, 0.8, 0.7, 0.7]), _z([1.0, 5.0, 0.0, 3.0])
    h = by_id(fuse("weighted", DENSE, SPARSE, cfg))
    for i in (1, 2, 3, 4):
        assert h[i].score == pytest.approx(0.5 * zd[i - 1] + 0.5 * zs[i - 1])
    assert ids(fuse("weighted", DENSE, SPARSE, cfg)) == [2, 1, 4, 3]
    tied = fuse("weighted", [(5, 0.3), (6, 0.3)], [], cfg)
    assert all(h.score == 0.0 for h in tied)  # no spread: nothing stands out


@pytest.mark.parametrize("norm", ["minmax", "zscore"])
def test_an_id_a_leg_did_not_return_ranks_below_that_legs_weakest_hit(norm):
    # "where does my grandfather live?" (2,000-request trace): 12 is "My grandfather just moved
    # to Porto." (one shared word), 13 a landlord pair BM25 did not find. Under z-scores an
    # absent id used to count as the leg's mean, above 12's below-mean score, and 13 won.
    dense = [(10, 0.52), (11, 0.49), (12, 0.37), (13, 0.21), (14, 0.20)]
    sparse = [(10, 1.5), (11, 1.24), (15, 0.71), (12, 0.57)]
    order = ids(fuse("weighted", dense, sparse, replace(CFG, alpha=0.45, score_norm=norm)))
    assert order.index(12) < order.index(13) < order.index(14)


def test_unknown_score_norm_names_the_field():
    with pytest.raises(ConfigError) as err:
        fuse("weighted", DENSE, SPARSE, replace(CFG, score_norm="rank"))
    assert err.value.field == "retrieval.score_norm" and "minmax, zscore" in str(err.value)


def test_weighted_alpha_out_of_range():
    with pytest.raises(ConfigError) as err:
        fuse("weighted", DENSE, SPARSE, replace(CFG, alpha=1.5))
    assert err.value.field == "retrieval.alpha"


def test_bm25_dominant_promotes_high_overlap_sparse_hits():
    overlap = {2: 0.25, 4: 0.75, 1: 0.5}  # 4 and 1 reach 0.5
    hits = fuse("bm25_dominant", DENSE, SPARSE, CFG, overlap)
    assert ids(hits) == [1, 4, 2, 3]  # promoted in RRF order, then the rest in RRF order
    h = by_id(hits)
    assert h[1].score == pytest.approx(1 / 61 + 1 / 63 + 2 / 61)
    assert h[2].score == pytest.approx(1 / 62 + 1 / 61)
    assert min(h[1].score, h[4].score) > max(h[2].score, h[3].score)


def test_bm25_dominant_without_promotion_equals_rrf():
    plain = fuse("rrf", DENSE, SPARSE, CFG)
    assert fuse("bm25_dominant", DENSE, SPARSE, CFG, {2: 0.1}) == plain
    strict = replace(CFG, dominant_overlap=1.0)
    assert fuse("bm25_dominant", DENSE, SPARSE, strict, {4: 0.99}) == plain


def test_bm25_dominant_ignores_overlap_of_dense_only_hits():
    hits = fuse("bm25_dominant", DENSE, SPARSE, CFG, {3: 1.0})
    assert ids(hits) == ids(fuse("rrf", DENSE, SPARSE, CFG))


def test_registry_lists_names_on_unknown_fusion():
    assert FUSIONS.names() == ["bm25_dominant", "rrf", "weighted"]
    with pytest.raises(ConfigError) as err:
        get_fusion("x")
    assert str(err.value) == "Unknown fusion 'x'. Available: bm25_dominant, rrf, weighted"
    assert err.value.field == "retrieval.fusion"


# ------------------------------------------------------ the retriever with small fakes


class DictStore:
    dim = 256

    def __init__(self) -> None:
        self.rows: dict[int, tuple[Memory, np.ndarray]] = {}
        self.listed: list[str] = []

    def upsert(self, pairs, vectors):
        for p, v in zip(pairs, vectors):
            self.rows[p.id] = (Memory(p.id, p.user_id, p.text(), p.session_time), v)
        return len(pairs)

    def search(self, user_id, vector, limit):
        hits = [(m, float(v @ vector)) for m, v in self.rows.values() if m.user_id == user_id]
        return sorted(hits, key=lambda h: -h[1])[:limit]

    def list_user(self, user_id):
        self.listed.append(user_id)
        return [m for m, _ in self.rows.values() if m.user_id == user_id]


def pair(user: str, turn: int, text: str) -> TurnPair:
    return TurnPair(user, "s1", turn, text, "ok", 1683504000)


@pytest.fixture
def world():
    enc, store = HashEncoder(), DictStore()
    r = HybridRetriever(enc, store, RetrievalConfig(top_k=3, candidate_k=10))
    r.remember([pair("alice", i, t) for i, t in enumerate(
        ["my locker code is ZX-4471", "I like green tea", "the museum trip was fun"])])
    r.remember([pair("bob", 0, "my locker code is QQ-1234")])
    return r, enc, store


@pytest.mark.parametrize("strategy", ["dense", "bm25", "hybrid"])
def test_retriever_returns_only_the_users_memories(world, strategy):
    r, _, _ = world
    hits = r.retrieve("alice", "my locker code is QQ-1234", strategy=strategy)
    assert hits and all(h.memory.user_id == "alice" for h in hits)


def test_retriever_hybrid_carries_leg_scores(world):
    r, _, _ = world
    top = r.retrieve("alice", "locker code ZX-4471")[0]
    assert "ZX-4471" in top.memory.text
    assert top.dense_score is not None and top.bm25_score is not None
    assert r.retrieve("alice", "locker", strategy="bm25")[0].dense_score is None


def test_remember_extends_the_cached_bm25_index_without_rereading_the_store(world):
    r, _, store = world
    r.retrieve("alice", "tea", strategy="bm25")
    r.retrieve("bob", "tea", strategy="bm25")
    assert store.listed == ["alice", "bob"]
    r.remember([pair("alice", 9, "we bought a yellow submarine")])
    assert "submarine" in r.retrieve("alice", "submarine", strategy="bm25")[0].memory.text
    r.retrieve("bob", "tea", strategy="bm25")
    assert store.listed == ["alice", "bob"]  # alice's index took the new pair in; bob's was kept
    assert not r.retrieve("bob", "submarine", strategy="bm25")


def test_a_failed_write_drops_the_cached_index(world, monkeypatch):
    r, _, store = world
    r.retrieve("alice", "tea", strategy="bm25")

    def refuse(pairs, vectors):
        raise RuntimeError("store down")

    monkeypatch.setattr(store, "upsert", refuse)
    with pytest.raises(RuntimeError):
        r.remember([pair("alice", 10, "a half-written memory")])
    monkeypatch.undo()
    r.retrieve("alice", "tea", strategy="bm25")
    assert store.listed == ["alice", "alice"]  # rebuilt from the store, not trusted


def test_retrieve_many_embeds_all_queries_in_one_batch(world):
    r, enc, _ = world
    enc.batches.clear()
    out = r.retrieve_many(["alice", "bob"], ["green tea", "locker"], top_k=1)
    assert enc.batches == [2]
    assert [len(x) for x in out] == [1, 1] and out[1][0].memory.user_id == "bob"
    with pytest.raises(InvalidRequest):
        r.retrieve_many(["alice"], ["a", "b"])


def test_retriever_errors(world):
    r, enc, store = world
    with pytest.raises(ConfigError, match="Available: bm25, dense, hybrid"):
        r.retrieve("alice", "tea", strategy="sparse")
    with pytest.raises(ConfigError, match="Unknown fusion 'x'"):
        HybridRetriever(enc, store, RetrievalConfig(fusion="x"))
    with pytest.raises(InvalidRequest):
        r.retrieve('x" or user_id != "', "tea")
    with pytest.raises(InvalidRequest):
        r.retrieve("alice", "   ")
    with pytest.raises(InvalidRequest):
        r.retrieve("alice", "tea", top_k=0)
    with pytest.raises(InvalidRequest):
        r.remember([pair("bad id", 0, "x")])


# ------------------------------------------------------ the similarity floor


@pytest.mark.parametrize("strategy", ["dense", "hybrid"])
def test_a_question_no_memory_is_similar_to_gets_none(strategy):
    enc, store = HashEncoder(), DictStore()
    r = HybridRetriever(enc, store, RetrievalConfig(top_k=3, candidate_k=10, min_similarity=0.3))
    r.remember([pair("alice", i, t) for i, t in enumerate(
        ["my locker code is ZX-4471", "I like green tea", "the museum trip was fun"])])
    hits = r.retrieve("alice", "what is my locker code", strategy=strategy)
    assert "ZX-4471" in hits[0].memory.text
    # a question sharing no word with any memory is about nothing the user said
    assert r.retrieve("alice", "how many centimeters in 179 meters", strategy=strategy) == []
    off = HybridRetriever(enc, store, RetrievalConfig(top_k=3, candidate_k=10))
    assert len(off.retrieve("alice", "how many centimeters in 179 meters",
                            strategy=strategy)) == 3
    # a turn that only states keeps them: they show the small model how to acknowledge
    assert len(r.retrieve("alice", "for the record my warranty number is WB-2984",
                          strategy=strategy)) == 3


def test_hybrid_keeps_the_memories_of_a_question_sharing_a_word_with_one():
    enc, store = HashEncoder(), DictStore()
    r = HybridRetriever(enc, store, RetrievalConfig(top_k=3, candidate_k=10, min_similarity=0.3))
    r.remember([pair("alice", i, t) for i, t in enumerate(
        ["my locker code is ZX-4471", "I like green tea", "the museum trip was fun"])])
    q = "in which city did our guide from that museum grow up before moving abroad?"
    assert max(s for _, s in r._dense("alice", enc.encode([q])[0], 10, None)) < 0.3
    assert r.retrieve("alice", q, strategy="dense") == []  # the cosine alone says "about nothing"
    assert "museum" in r.retrieve("alice", q, strategy="hybrid")[0].memory.text


def test_a_similarity_floor_out_of_range_names_the_setting():
    from memroute.config.schema import ModelConfig, PartsConfig, check_parts

    parts = PartsConfig(retrieval=RetrievalConfig(min_similarity=1.5),
                        cascade={"0": ModelConfig(engine="mock")})
    with pytest.raises(ConfigError, match="retrieval.min_similarity"):
        check_parts(parts)
