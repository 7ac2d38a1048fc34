import importlib.util
import math

import pytest

from memroute.errors import ConfigError
from memroute.eval.metrics import (
    bleu1,
    exact_match,
    f1,
    f1_score,
    mrr,
    ndcg_at_k,
    normalize_answer,
    recall_all_at_k,
    recall_any_at_k,
    recall_at_k,
)

# ------------------------------------------------------------------ normalization


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The Cat, and a Dog!", "cat dog"),
        ("An apple; the BEST.", "apple best"),
        ("  Theater   and   Anthem ", "theater anthem"),  # articles only as whole words
        ("$18,500", "18500"),  # commas dropped before splitting into tokens
        ("ZX-4471", "zx4471"),
        (2022, "2022"),
    ],
)
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


# ------------------------------------------------------------------ F1


def test_f1_partial_overlap_exact_fractions():
    # pred {red, cat, sat} vs ref {red, cat}: P 2/3, R 1 -> 0.8
    assert f1_score("a red cat sat", "the red cat") == pytest.approx(0.8)
    # 1 shared of 2 predicted and 3 reference tokens: P 1/2, R 1/3 -> 0.4
    assert f1_score("Paris France", "Paris Texas USA") == pytest.approx(0.4)
    # repeated tokens are matched at most as often as they occur in the reference
    assert f1_score("dog dog", "dog") == pytest.approx(2 / 3)


def test_f1_edge_cases():
    assert f1_score("nothing shared", "entirely different") == 0.0
    assert f1_score("", "something") == 0.0
    assert f1_score("The answer.", "answer") == 1.0
    assert f1("2022", 2022) == 1.0  # LoCoMo stores some answers as ints


def test_category_1_splits_on_commas_and_averages_best_matches():
    pred, ref = "pottery, camping", "pottery, camping, painting, swimming"
    # each reference part: pottery 1, camping 1, painting 0, swimming 0
    assert f1(pred, ref, category=1) == pytest.approx(0.5)
    # without the category it is one bag of tokens: P 1, R 1/2
    assert f1(pred, ref) == pytest.approx(2 / 3)
    # partial match inside a part: "beach trip" vs "beach" is 2/3
    assert f1("beach trip, mountains", "beach, mountains, forest", category=1) == pytest.approx(
        (2 / 3 + 1 + 0) / 3
    )


def test_category_3_uses_first_semicolon_part_of_reference():
    ref = "Likely no; though she likes reading, she wants to be a counselor"
    assert f1("likely no", ref, category=3) == 1.0
    assert f1("likely no", ref, category=4) < 0.5


def test_category_5_adversarial_rewards_abstention_only():
    assert f1("No information available.", "Yes", category=5) == 1.0
    assert f1("That is not mentioned in the conversation", "Yes", category=5) == 1.0
    assert f1("Yes", "Yes", category=5) == 0.0


def test_stemming_is_off_by_default_and_needs_nltk():
    assert f1("running dogs", "the dog runs") == 0.0
    if importlib.util.find_spec("nltk") is None:
        with pytest.raises(ConfigError, match="nltk"):
            f1("running dogs", "the dog runs", stem=True)
    else:
        assert f1("running dogs", "the dog runs", stem=True) == 1.0


# ------------------------------------------------------------------ BLEU-1 and EM


def test_bleu1_brevity_penalty_for_short_prediction():
    # 2 of 2 predicted tokens match, c=2 < r=4: BP = exp(1 - 4/2)
    assert bleu1("red cat", "red cat sat down") == pytest.approx(math.exp(-1))


def test_bleu1_long_prediction_has_no_penalty_and_clips_counts():
    assert bleu1("red cat sat down today now", "red cat") == pytest.approx(2 / 6)
    # "cat" counts once: the reference holds a single "cat"; c=3 > r=2
    assert bleu1("cat cat cat", "cat dog") == pytest.approx(1 / 3)
    # equal lengths: BP = 1
    assert bleu1("cat dog", "dog bird") == pytest.approx(0.5)


def test_bleu1_normalizes_and_handles_empty_and_disjoint():
    assert bleu1("The Cat!", "a cat") == 1.0
    assert bleu1("", "cat") == 0.0
    assert bleu1("dog", "cat") == 0.0


def test_exact_match_follows_locomo_token_sets():
    assert exact_match("The Paris.", "paris")
    assert exact_match("france paris", "Paris, France")  # order-insensitive, as in LoCoMo
    assert not exact_match("paris france", "paris")


# ------------------------------------------------------------------ retrieval

RANKED = ["a", "b", "c", "d", "e"]


def test_recall_variants_at_known_ranks():
    gold = {"b", "e", "z"}  # z is never retrieved
    assert recall_at_k(RANKED, gold, 1) == 0.0
    assert recall_at_k(RANKED, gold, 2) == pytest.approx(1 / 3)
    assert recall_at_k(RANKED, gold, 5) == pytest.approx(2 / 3)
    assert recall_any_at_k(RANKED, gold, 1) == 0.0
    assert recall_any_at_k(RANKED, gold, 2) == 1.0
    assert recall_all_at_k(RANKED, gold, 5) == 0.0
    assert recall_all_at_k(RANKED, {"b", "e"}, 5) == 1.0
    assert recall_all_at_k(RANKED, {"b", "e"}, 4) == 0.0


def test_ndcg_at_known_ranks():
    gold = {"b", "e"}
    expected = (1 / math.log2(3) + 1 / math.log2(6)) / (1 + 1 / math.log2(3))
    assert ndcg_at_k(RANKED, gold, 5) == pytest.approx(expected)
    assert ndcg_at_k(["b", "e", "a"], gold, 3) == pytest.approx(1.0)
    assert ndcg_at_k(RANKED, gold, 1) == 0.0
    # one gold hit at rank 1 with k=1 is already ideal
    assert ndcg_at_k(["e", "a"], gold, 1) == pytest.approx(1.0)


def test_mrr_at_known_ranks():
    assert mrr(RANKED, {"b", "e"}) == 0.5
    assert mrr(RANKED, {"d"}) == 0.25
    assert mrr(RANKED, {"b"}, k=1) == 0.0
    assert mrr(RANKED, {"z"}) == 0.0


def test_repeated_ranked_ids_count_once():
    ranked = ["b", "b", "e", "a"]
    assert recall_at_k(ranked, {"b", "e"}, 2) == 1.0
    assert ndcg_at_k(ranked, {"b", "e"}, 2) == pytest.approx(1.0)


def test_retrieval_metrics_reject_bad_input():
    with pytest.raises(ValueError, match="gold_ids"):
        recall_at_k(RANKED, [], 5)
    with pytest.raises(ValueError, match="k must be"):
        ndcg_at_k(RANKED, {"a"}, 0)
    with pytest.raises(ValueError, match="Available: fraction, any, all"):
        recall_at_k(RANKED, {"a"}, 5, mode="most")  # type: ignore[arg-type]
