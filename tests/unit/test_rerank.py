"""Late-interaction rerank: MaxSim scores and the z-score blend that reorders the fused list."""

import numpy as np
import pytest

from memroute.config.schema import RetrievalConfig
from memroute.errors import ConfigError
from memroute.retrieval.rerank import blend_order, maxsim, maxsim_order
from memroute.retrieval.retriever import HybridRetriever


def unit(*rows):
    a = np.asarray(rows, dtype=np.float32)
    return a / np.linalg.norm(a, axis=1, keepdims=True)


def test_maxsim_is_the_mean_of_each_query_tokens_best_match():
    q = unit([1, 0], [0, 1])
    doc = unit([1, 0], [1, 1])  # query token 1: exact match; token 2: best is cos 45 deg
    assert maxsim(q, doc) == pytest.approx((1.0 + np.sqrt(0.5)) / 2)
    assert maxsim(q, unit([1, 0], [0, 1], [1, 1])) == pytest.approx(1.0)
    assert maxsim(q, np.zeros((0, 2), np.float32)) == 0.0
    assert maxsim(np.zeros((0, 2), np.float32), doc) == 0.0


def test_blend_lets_a_strong_late_score_overtake_the_fused_order():
    fused = [3.0, 2.0, 1.0]
    late = [0.1, 0.2, 0.9]
    assert blend_order(fused, late, weight=0.0) == [0, 1, 2]
    # z(fused) = [1.22, 0, -1.22], z(late) = [-0.84, -0.56, 1.40]
    assert blend_order(fused, late, weight=1.0) == [0, 2, 1]
    assert blend_order(fused, late, weight=2.0) == [2, 0, 1]
    assert blend_order(fused, late, weight=100.0) == [2, 1, 0]


def test_blend_keeps_the_fused_order_on_ties_and_flat_scores():
    assert blend_order([2.0, 2.0, 2.0], [0.5, 0.5, 0.5], weight=1.0) == [0, 1, 2]
    assert blend_order([3.0, 2.0, 1.0], [0.5, 0.5, 0.5], weight=5.0) == [0, 1, 2]
    assert blend_order([], [], weight=1.0) == []
    with pytest.raises(ValueError, match="2 fused scores but 1"):
        blend_order([1.0, 2.0], [1.0], weight=1.0)


class TokenFake:
    """Each word is a one-hot token over a tiny vocabulary."""

    vocab = ["paint", "horse", "camp", "beach", "sunset"]

    def encode_tokens(self, texts):
        out = []
        for t in texts:
            words = [w for w in t.lower().split() if w in self.vocab]
            out.append(np.eye(len(self.vocab), dtype=np.float32)[[self.vocab.index(w) for w in words]])
        return out


def test_maxsim_order_ranks_the_memory_holding_every_query_token_first():
    texts = ["camp beach", "paint sunset", "paint horse"]
    order = maxsim_order(TokenFake(), "paint horse", texts, fused=[1.0, 1.0, 1.0], weight=1.0)
    assert order == [2, 1, 0]
    assert maxsim_order(TokenFake(), "paint", [], fused=[], weight=1.0) == []


class PooledOnly:
    name, dim = "pooled", 2

    def encode(self, texts):
        return np.ones((len(texts), 2), np.float32) / np.sqrt(2)


class NoStore:
    dim = 2

    def list_user(self, user_id):
        return []


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (RetrievalConfig(rerank="cross"), "Unknown rerank 'cross'"),
        (RetrievalConfig(rerank="maxsim"), "needs an encoder with token vectors"),
        (RetrievalConfig(rerank="none", rerank_depth=0), "rerank_depth must be >= 1"),
    ],
)
def test_retriever_refuses_bad_rerank_settings_naming_the_field(cfg, message):
    with pytest.raises(ConfigError, match=message) as err:
        HybridRetriever(PooledOnly(), NoStore(), cfg)
    assert err.value.field.startswith("retrieval.rerank")
