"""Features of one answer that a calibrator maps to P(correct) (:mod:`memroute.routing.calibrator`).

Everything comes from what a tier already returns and what the router injected: the chosen
tokens' log-probs and the runner-up per position (``ModelReply.logprobs`` / ``alt_logprobs``),
the answer's length, and the injected memories with their retrieval scores. Pure functions, no
model call, a few microseconds per answer.

Token features: the mean, minimum and low quantiles (10th, 25th percentile) of the log-probs;
the top-1/top-2 margin (mean and minimum); the entropy per position as far as the top 2 tell
(``p1``, ``p2`` and the rest ``1 - p1 - p2`` as one bucket: a lower bound of the true entropy),
mean and maximum; ``log(1 + tokens)``.

Memory features: how many memories were injected, their best and mean retrieval score; how much
of the answer's wording appears in one injected memory (``value_in_memory``: the share of the
answer's content words found in the memory that holds most of them; a value the model read
rather than made up); whether that memory is marked superseded (``Memory.superseded_by``), and
whether a newer injected memory on the same subject does not repeat the value
(``value_older``: the answer may be a stale value).

:data:`FEATURES` fixes the names and their order; a calibrator artifact records them and is
refused when they differ (:func:`memroute.routing.calibrator.load`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from memroute.text.tokenize import unigrams
from memroute.types import ModelReply, RetrievalHit

FEATURES: tuple[str, ...] = (
    "mean_lp", "min_lp", "q10_lp", "q25_lp",
    "margin_mean", "margin_min", "entropy_mean", "entropy_max",
    "log_len",
    "n_memories", "top_score", "mean_score",
    "value_in_memory", "value_superseded", "value_older",
)
LP_FLOOR = -20.0  # a log-prob below this (or -inf) counts as this; no tokens: every lp feature
SUBJECT_SHARE = 0.5  # overlap coefficient of two memories' subject words: the same subject


def features(
    reply: ModelReply | None, hits: Sequence[RetrievalHit] = (), query: str = ""
) -> dict[str, float]:
    """The :data:`FEATURES` of ``reply`` given the memories injected with it (``hits``) and the
    question (``query``: what decides whether two memories are on the same subject; without it,
    their shared words less the answer's)."""
    out = token_features(reply)
    out.update(memory_features(reply.text if reply is not None else "", hits, query))
    return out


def token_features(reply: ModelReply | None) -> dict[str, float]:
    lps = [] if reply is None else [max(LP_FLOOR, float(x)) if math.isfinite(x) else LP_FLOOR
                                    for x in reply.logprobs]
    if not lps:
        return {"mean_lp": LP_FLOOR, "min_lp": LP_FLOOR, "q10_lp": LP_FLOOR, "q25_lp": LP_FLOOR,
                "margin_mean": 0.0, "margin_min": 0.0, "entropy_mean": 0.0, "entropy_max": 0.0,
                "log_len": 0.0}
    lp = np.asarray(lps, dtype=float)
    alts = reply.alt_logprobs if reply is not None else None
    if alts and len(alts) >= len(lps):
        alt = np.asarray([max(LP_FLOOR, float(a)) if math.isfinite(a) else LP_FLOOR
                          for a in alts[: len(lps)]], dtype=float)
        alt = np.minimum(alt, lp)  # the runner-up is never likelier than the chosen token
        margin = lp - alt
        p2 = np.exp(alt)
    else:  # no runner-up: no margin known, the entropy from the chosen token alone
        margin = np.zeros_like(lp)
        p2 = np.zeros_like(lp)
    p1 = np.exp(lp)
    p2 = np.minimum(p2, np.maximum(0.0, 1.0 - p1))
    rest = np.maximum(0.0, 1.0 - p1 - p2)
    entropy = -(_plogp(p1) + _plogp(p2) + _plogp(rest))
    return {
        "mean_lp": float(lp.mean()), "min_lp": float(lp.min()),
        "q10_lp": float(np.quantile(lp, 0.10)), "q25_lp": float(np.quantile(lp, 0.25)),
        "margin_mean": float(margin.mean()), "margin_min": float(margin.min()),
        "entropy_mean": float(entropy.mean()), "entropy_max": float(entropy.max()),
        "log_len": math.log1p(len(lps)),
    }


def _plogp(p: np.ndarray) -> np.ndarray:
    safe = np.where(p > 0, p, 1.0)
    return np.where(p > 0, p * np.log(safe), 0.0)


def memory_features(answer: str, hits: Sequence[RetrievalHit], query: str = "") -> dict[str, float]:
    scores = [float(h.score) for h in hits]
    out = {"n_memories": float(len(hits)), "top_score": max(scores, default=0.0),
           "mean_score": sum(scores) / len(scores) if scores else 0.0,
           "value_in_memory": 0.0, "value_superseded": 0.0, "value_older": 0.0}
    value = set(unigrams(answer))
    if not value or not hits:
        return out
    words = [set(unigrams(h.memory.text)) for h in hits]
    cover = [len(value & w) / len(value) for w in words]
    src = max(range(len(hits)), key=lambda k: (cover[k], -k))  # ties: the better ranked
    if cover[src] <= 0.0:
        return out
    out["value_in_memory"] = cover[src]
    source = hits[src].memory
    out["value_superseded"] = float(bool(getattr(source, "superseded_by", 0)))
    subject = _subjects(hits, value, query)
    for k, h in enumerate(hits):
        if k == src or cover[k] >= cover[src] or _when(h) <= _when(hits[src]):
            continue  # the value's own memory, one that repeats the value, or not newer
        if _same_subject(subject[src], subject[k]):
            out["value_older"] = 1.0
            break
    return out


def _when(hit: RetrievalHit) -> tuple[int, float, int]:
    m = hit.memory
    return (int(m.session_time), float(getattr(m, "created_at", 0.0) or 0.0),
            int(getattr(m, "turn_index", 0) or 0))


def _subjects(hits: Sequence[RetrievalHit], value: set[str], query: str) -> list[set[str]]:
    """Per memory, the words that say what it is about: those of the question it shares (with
    a question), else its words less the answer's and any containing a digit (dates, codes)."""
    asked = set(unigrams(query, stem=True)) if query.strip() else None
    out = []
    for h in hits:
        stemmed = set(unigrams(h.memory.text, stem=True))
        if asked is not None:
            out.append(stemmed & asked)
        else:
            out.append({w for w in stemmed - value if not any(c.isdigit() for c in w)})
    return out


def _same_subject(a: set[str], b: set[str]) -> bool:
    if not a or not b:
        return False
    return len(a & b) >= SUBJECT_SHARE * min(len(a), len(b))


def vector(values: dict[str, float], names: Sequence[str] = FEATURES) -> list[float]:
    """``values`` in the order of ``names`` (a missing feature is 0)."""
    return [float(values.get(n, 0.0)) for n in names]
