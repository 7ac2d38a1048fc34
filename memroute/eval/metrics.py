"""Answer metrics (LoCoMo protocol) and retrieval metrics.

Answer scoring follows LoCoMo's ``task_eval/evaluation.py``: normalize (drop commas, lowercase,
strip punctuation, drop the words a/an/the/and, collapse spaces), then token-overlap F1. Per
category: 1 (multi-hop) splits prediction and reference on commas and averages, over the
reference parts, the best F1 against any prediction part; 3 (open-domain) scores against the
reference's first ';' part; 5 (adversarial) is correct iff the prediction says "no information
available" or "not mentioned". LoCoMo stems tokens with NLTK's Porter stemmer; the reference
numbers of this project were measured without stemming, so ``stem`` defaults to False (True needs
``nltk``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from typing import Literal

# Normalization and token F1 live in memroute.text (the serving path compares answers too).
from memroute.text.answers import (  # noqa: F401 - re-exported
    _ARTICLES,
    _porter_stem,
    answer_tokens,
    f1_score,
    normalize_answer,
)

ADVERSARIAL_MARKERS = ("no information available", "not mentioned")


def multi_answer_f1(prediction: object, reference: object, *, stem: bool = False) -> float:
    """Category 1: mean over comma-separated reference parts of the best F1 against any
    comma-separated prediction part."""
    preds = [p.strip() for p in str(prediction).split(",")]
    refs = [r.strip() for r in str(reference).split(",")]
    return sum(max(f1_score(p, r, stem=stem) for p in preds) for r in refs) / len(refs)


def is_abstention(prediction: object) -> bool:
    low = str(prediction).lower()
    return any(marker in low for marker in ADVERSARIAL_MARKERS)


def f1(
    prediction: object, reference: object, category: int | None = None, *, stem: bool = False
) -> float:
    """LoCoMo's per-category answer score (see the module docstring)."""
    if category == 1:
        return multi_answer_f1(prediction, reference, stem=stem)
    if category == 3:
        reference = str(reference).split(";")[0].strip()
    if category == 5:
        return 1.0 if is_abstention(prediction) else 0.0
    return f1_score(prediction, reference, stem=stem)


def bleu1(prediction: object, reference: object) -> float:
    """Sentence BLEU-1 on normalized tokens: clipped unigram precision times the brevity penalty,
    what ``nltk`` ``sentence_bleu([ref], pred, weights=(1, 0, 0, 0))`` gives."""
    pred = answer_tokens(prediction)
    ref = answer_tokens(reference)
    if not pred:
        return 0.0
    matches = sum((Counter(pred) & Counter(ref)).values())
    if matches == 0:
        return 0.0
    c, r = len(pred), len(ref)
    brevity = 1.0 if c > r else math.exp(1 - r / c)
    return brevity * matches / c


def exact_match(prediction: object, reference: object) -> bool:
    """LoCoMo's exact match: the normalized token *sets* are equal (order and repeats ignored)."""
    return set(answer_tokens(prediction)) == set(answer_tokens(reference))


# ----------------------------------------------------------------------------- retrieval
# Ranked ids and gold ids must name the same unit (dia_ids, or turn-pair ids via
# memroute.datasets.evidence_pair_ids). Repeated ids in a ranking count once, at their
# first position.

RecallMode = Literal["fraction", "any", "all"]


def _check(gold_ids: Iterable[Hashable], k: int | None) -> set[Hashable]:
    gold = set(gold_ids)
    if not gold:
        raise ValueError("gold_ids is empty: retrieval metrics are undefined without evidence")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return gold


def _first_k(ranked_ids: Sequence[Hashable], k: int | None) -> list[Hashable]:
    out: list[Hashable] = []
    for item in ranked_ids:
        if k is not None and len(out) == k:
            break
        if item not in out:
            out.append(item)
    return out


def recall_at_k(
    ranked_ids: Sequence[Hashable],
    gold_ids: Iterable[Hashable],
    k: int,
    *,
    mode: RecallMode = "fraction",
) -> float:
    """Share of gold ids in the top k (``fraction``), or 1.0/0.0 whether ``any`` / ``all`` are."""
    gold = _check(gold_ids, k)
    found = len(gold.intersection(_first_k(ranked_ids, k)))
    if mode == "fraction":
        return found / len(gold)
    if mode == "any":
        return float(found > 0)
    if mode == "all":
        return float(found == len(gold))
    raise ValueError(f"Unknown recall mode {mode!r}. Available: fraction, any, all")


def recall_any_at_k(ranked_ids: Sequence[Hashable], gold_ids: Iterable[Hashable], k: int) -> float:
    return recall_at_k(ranked_ids, gold_ids, k, mode="any")


def recall_all_at_k(ranked_ids: Sequence[Hashable], gold_ids: Iterable[Hashable], k: int) -> float:
    return recall_at_k(ranked_ids, gold_ids, k, mode="all")


def ndcg_at_k(ranked_ids: Sequence[Hashable], gold_ids: Iterable[Hashable], k: int) -> float:
    """Binary-relevance NDCG@k: DCG = sum of 1/log2(rank+1) over gold hits, over the ideal DCG
    of min(|gold|, k) hits at the top."""
    gold = _check(gold_ids, k)
    dcg = sum(
        1.0 / math.log2(rank + 1)
        for rank, item in enumerate(_first_k(ranked_ids, k), start=1)
        if item in gold
    )
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(gold), k) + 1))
    return dcg / ideal


def mrr(
    ranked_ids: Sequence[Hashable], gold_ids: Iterable[Hashable], k: int | None = None
) -> float:
    """Reciprocal rank of the first gold id (within the top k if given), 0.0 if none."""
    gold = _check(gold_ids, k)
    for rank, item in enumerate(_first_k(ranked_ids, k), start=1):
        if item in gold:
            return 1.0 / rank
    return 0.0
