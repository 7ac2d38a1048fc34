"""Failure causes: every wrong answer gets exactly one cause, so a score says what to fix.

An answer is *wrong* when its LoCoMo F1 (:func:`memroute.eval.metrics.f1`) is below
``wrong_below`` (default :data:`WRONG_BELOW` = 0.5); correct answers get no cause (null).

The ``cause`` column holds one of :data:`CAUSES`, checked in this fixed precedence (the first
that applies wins):

1. ``not_retrieved``: the question has gold evidence and none of its turns was among the
   memories injected into the prompt of the answering call. Cold conditions inject nothing, so
   there every wrong answer to a question with evidence is ``not_retrieved`` by definition: the
   model never saw the fact, and the cold rows show how much of their error memory could address.
2. ``compacted_away``: the evidence reached the prompt only inside summaries (the summary-tree
   conditions, ``evidence_compacted``) and those summaries no longer hold the answer: fewer than
   :data:`KEPT_MIN_RECALL` of the reference's answer tokens appear in them (``compacted_text``).
   The compaction lost the fact; retrieval did not.
3. ``stale_value``: the question is about a corrected fact (``stale_answer`` set, synthetic
   corrections) and the prediction matches the superseded value better than the current one:
   it contains the stale answer's tokens in order, or has token F1 >= :data:`STALE_MIN_F1`
   against it, and in both cases scores strictly higher against the stale value than against
   the reference (an answer naming both values is not stale, just verbose).
4. ``hedged``: the model declined: an empty answer, or one matching :data:`HEDGE_PATTERNS`
   ("i don't know", "not sure", "no information", "cannot", "not mentioned", ...).
5. ``confident_wrong_cheap``: answered by the cheap (first) model without escalation, with gold
   evidence injected, and still wrong: the confidence gate accepted a wrong answer.
6. ``escalated_still_wrong``: escalated to a larger tier, which answered wrong.
7. ``other``: the rest, e.g. questions without gold evidence answered wrong on the cheap tier,
   or the large model alone (``cold_large``) wrong on a question without evidence.

Checks 1 and 5 use ``evidence_injected`` (True / False, null when the question has no
evidence); 5 and 6 use ``on_small`` (answered by the cascade's first model) and ``escalated``.
Pure functions, no model: the rescore job recomputes the labels from saved predictions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import polars as pl

from memroute.eval.metrics import answer_tokens, f1_score

CAUSES: tuple[str, ...] = (
    "not_retrieved",
    "compacted_away",
    "stale_value",
    "hedged",
    "confident_wrong_cheap",
    "escalated_still_wrong",
    "other",
)
WRONG_BELOW = 0.5
STALE_MIN_F1 = 0.5
KEPT_MIN_RECALL = 0.5  # share of the reference's answer tokens a summary must still hold
# Matched case-insensitively anywhere in the prediction (curly apostrophes are straightened).
HEDGE_PATTERNS: tuple[str, ...] = (
    r"\bi (?:do not|don't|dont) know\b",
    r"\bnot (?:sure|certain)\b|\bunsure\b",
    r"\bno (?:idea|information|info|record|records|memory|memories|mention|details?|data)\b",
    r"\bcannot\b|\bcan't\b|\bcan not\b|\bunable to\b",
    r"\bnot (?:mentioned|specified|stated|provided|available|known|clear)\b",
    r"\b(?:do not|don't|does not|doesn't) (?:have|say|mention|specify)\b",
    r"\bunknown\b|\bunclear\b|\bnot enough\b",
)
_HEDGE = re.compile("|".join(f"(?:{p})" for p in HEDGE_PATTERNS), re.IGNORECASE)


def is_wrong(f1: float, wrong_below: float = WRONG_BELOW) -> bool:
    return f1 < wrong_below


def is_hedged(prediction: object) -> bool:
    text = str(prediction or "").replace("\u2019", "'").strip()
    return not text or _HEDGE.search(text) is not None


def _contains(haystack: list[str], needle: list[str]) -> bool:
    n = len(needle)
    return n > 0 and any(haystack[i : i + n] == needle for i in range(len(haystack) - n + 1))


def matches_stale(prediction: object, stale_answer: object, reference: object) -> bool:
    """The prediction gives the superseded value rather than the current one (see module doc)."""
    if stale_answer is None or not str(stale_answer).strip():
        return False
    to_stale = f1_score(prediction, stale_answer)
    if to_stale <= f1_score(prediction, reference):
        return False
    contained = _contains(answer_tokens(prediction), answer_tokens(stale_answer))
    return to_stale >= STALE_MIN_F1 or contained


def answer_kept(reference: object, text: object) -> bool:
    """At least :data:`KEPT_MIN_RECALL` of the reference's answer tokens occur in ``text``."""
    ref = answer_tokens(reference)
    if not ref:
        return True
    have = set(answer_tokens(text))
    return sum(t in have for t in ref) >= KEPT_MIN_RECALL * len(ref)


def label_cause(
    *,
    f1: float,
    prediction: object,
    reference: object,
    stale_answer: object,
    evidence_injected: bool | None,
    on_small: bool,
    escalated: bool,
    wrong_below: float = WRONG_BELOW,
    evidence_compacted: bool | None = None,
    compacted_text: str | None = None,
) -> str | None:
    """The one cause of a wrong answer (precedence in the module doc); None if it is correct."""
    if not is_wrong(f1, wrong_below):
        return None
    if evidence_injected is False:
        return "not_retrieved"
    if evidence_compacted and not answer_kept(reference, compacted_text):
        return "compacted_away"
    if matches_stale(prediction, stale_answer, reference):
        return "stale_value"
    if is_hedged(prediction):
        return "hedged"
    if on_small and not escalated and evidence_injected:
        return "confident_wrong_cheap"
    if escalated:
        return "escalated_still_wrong"
    return "other"


def cause_of_row(row: Mapping[str, Any], wrong_below: float = WRONG_BELOW) -> str | None:
    return label_cause(
        f1=row["f1"],
        prediction=row["prediction"],
        reference=row["reference"],
        stale_answer=row.get("stale_answer"),
        evidence_injected=row.get("evidence_injected"),
        on_small=bool(row["on_small"]),
        escalated=bool(row["escalated"]),
        wrong_below=wrong_below,
        evidence_compacted=row.get("evidence_compacted"),
        compacted_text=row.get("compacted_text"),
    )


def add_causes(df: pl.DataFrame, wrong_below: float = WRONG_BELOW) -> pl.DataFrame:
    """Adds ``correct`` (F1 >= wrong_below) and ``cause`` (null when correct)."""
    cols = ["f1", "prediction", "reference", "stale_answer", "evidence_injected", "on_small",
            "escalated", "evidence_compacted", "compacted_text"]
    present = [c for c in cols if c in df.columns]
    causes = [cause_of_row(r, wrong_below) for r in df.select(present).iter_rows(named=True)]
    return df.with_columns(
        (pl.col("f1") >= wrong_below).alias("correct"),
        pl.Series("cause", causes, dtype=pl.String),
    )


def settings(wrong_below: float = WRONG_BELOW) -> dict[str, Any]:
    """Everything that decides a label, for the run manifest's metric version."""
    return {
        "causes": list(CAUSES),
        "wrong_below": wrong_below,
        "stale_min_f1": STALE_MIN_F1,
        "kept_min_recall": KEPT_MIN_RECALL,
        "hedge_patterns": list(HEDGE_PATTERNS),
    }
