"""Retrieval metrics on a hand-built case: known ranks -> known Recall@k, NDCG, MRR."""

import math

import pytest

from memroute.config import RetrievalConfig
from memroute.errors import ConfigError
from memroute.eval.retrieval_eval import RetrievalCase, evaluate, score_case, strategy_config, summarize
from memroute.types import Memory, RetrievalHit


def hit(i, session):
    return RetrievalHit(Memory(i, "u", f"t{i}", 0, session_id=session), 1.0)


# ranked: 10(s1) 11(s2) 12(s1) 13(s3); gold pairs {11, 13}, gold sessions {s2, s3}
HITS = [hit(10, "s1"), hit(11, "s2"), hit(12, "s1"), hit(13, "s3")]
CASE = RetrievalCase("u", "q", "single", gold_pairs=(11, 13), gold_sessions=("s2", "s3"))


def test_turn_level_metrics_from_known_ranks():
    m = score_case(HITS, CASE, ks=(1, 2, 4))
    assert m["turn_recall@1"] == 0.0 and m["turn_recall@2"] == 0.5 and m["turn_recall@4"] == 1.0
    assert m["turn_recall_any@2"] == 1.0 and m["turn_recall_all@2"] == 0.0 and m["turn_recall_all@4"] == 1.0
    assert m["turn_mrr"] == 0.5
    ideal = 1 + 1 / math.log2(3)
    assert m["turn_ndcg@4"] == pytest.approx((1 / math.log2(3) + 1 / math.log2(5)) / ideal)


def test_session_level_dedupes_sessions_in_rank_order():
    # session ranking: s1, s2, s3 -> gold s2 at rank 2, s3 at rank 3
    m = score_case(HITS, CASE, ks=(1, 2, 4))
    assert m["session_recall@2"] == 0.5 and m["session_recall@4"] == 1.0
    assert m["session_mrr"] == 0.5


class FixedRetriever:
    def __init__(self, hits):
        self.hits = hits

    def retrieve_many(self, user_ids, queries, *, top_k=None):
        return [self.hits[:top_k] for _ in user_ids]


def test_evaluate_and_summarize_per_strategy():
    rows = evaluate({"good": FixedRetriever(HITS[::-1]), "bad": FixedRetriever(HITS[:1])}, [CASE, CASE], ks=(1, 5))
    table = summarize(rows)
    good = table.filter(table["strategy"] == "good").row(0, named=True)
    bad = table.filter(table["strategy"] == "bad").row(0, named=True)
    assert good["n"] == 2 and good["turn_recall@1"] == 0.5 and good["turn_mrr"] == 1.0
    assert bad["turn_recall@5"] == 0.0 and bad["turn_mrr"] == 0.0


def test_strategy_names():
    assert strategy_config(RetrievalConfig(), "hybrid-weighted").fusion == "weighted"
    assert strategy_config(RetrievalConfig(), "bm25").strategy == "bm25"
    with pytest.raises(ConfigError, match="hybrid-rrf"):
        strategy_config(RetrievalConfig(), "splade")


def test_plain_strategies_turn_the_extras_off():
    tuned = RetrievalConfig(stem=True, query_focus=0.5, context_weight=0.3)
    full = strategy_config(tuned, "hybrid-weighted")
    assert (full.stem, full.query_focus, full.context_weight) == (True, 0.5, 0.3)
    plain = strategy_config(tuned, "hybrid-weighted-plain")
    assert plain.fusion == "weighted" and plain.strategy == "hybrid"
    assert (plain.stem, plain.query_focus, plain.context_weight) == (False, 1.0, 0.0)
    with pytest.raises(ConfigError, match="-plain"):
        strategy_config(tuned, "splade-plain")


def test_maxsim_strategies_turn_the_rerank_on_for_hybrid_only():
    cfg = strategy_config(RetrievalConfig(), "hybrid-weighted-maxsim")
    assert (cfg.strategy, cfg.fusion, cfg.rerank) == ("hybrid", "weighted", "maxsim")
    assert strategy_config(RetrievalConfig(rerank="maxsim"), "hybrid-rrf-plain").rerank == "none"
    with pytest.raises(ConfigError, match="-maxsim"):
        strategy_config(RetrievalConfig(), "dense-maxsim")  # a single leg has nothing fused to rerank
