"""Retrieval quality of the memory store, measured as the LongMemEval and LoCoMo papers do.

Each case is one question of one user with its gold turn-pairs (and gold sessions); every
strategy ranks that user's memories and the ranks are scored with Recall@k (fraction, any,
all), NDCG@k and MRR at turn-pair level and at session level. The cases come from the dataset
layer (:func:`memroute.datasets.dataset_cases`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol, Sequence

import polars as pl

from memroute.config import RetrievalConfig
from memroute.datasets.records import RetrievalCase
from memroute.errors import ConfigError
from memroute.eval.metrics import mrr, ndcg_at_k, recall_at_k
from memroute.retrieval.with_units import source_turn_id
from memroute.types import RetrievalHit

# name -> (strategy, fusion)
STRATEGIES: dict[str, tuple[str, str]] = {
    "dense": ("dense", "rrf"),
    "bm25": ("bm25", "rrf"),
    "hybrid-rrf": ("hybrid", "rrf"),
    "hybrid-weighted": ("hybrid", "weighted"),
    "hybrid-bm25_dominant": ("hybrid", "bm25_dominant"),
}
# "<name>-plain": the same strategy without stemming, query focus or session context (ablation).
PLAIN_SUFFIX = "-plain"
PLAIN = {"stem": False, "query_focus": 1.0, "context_weight": 0.0}
# "<name>-maxsim": the same strategy with the late-interaction rerank (hybrid strategies only).
MAXSIM_SUFFIX = "-maxsim"


class Retrieves(Protocol):
    def retrieve_many(
        self, user_ids: Sequence[str], queries: Sequence[str], *, top_k: int | None = None
    ) -> list[list[RetrievalHit]]: ...


def score_case(hits: Sequence[RetrievalHit], case: RetrievalCase, ks: Sequence[int]) -> dict[str, float]:
    """Turn-level and session-level metrics of one ranked list (an atomic unit counts as the
    turn it came from, once)."""
    ranked = list(dict.fromkeys(source_turn_id(h.memory) for h in hits))
    ranked_sessions = list(dict.fromkeys(h.memory.session_id for h in hits))
    out: dict[str, float] = {}
    for level, r, gold in (("turn", ranked, case.gold_pairs), ("session", ranked_sessions, case.gold_sessions)):
        for k in ks:
            out[f"{level}_recall@{k}"] = recall_at_k(r, gold, k)
            out[f"{level}_recall_any@{k}"] = recall_at_k(r, gold, k, mode="any")
            out[f"{level}_recall_all@{k}"] = recall_at_k(r, gold, k, mode="all")
            out[f"{level}_ndcg@{k}"] = ndcg_at_k(r, gold, k)
        out[f"{level}_mrr"] = mrr(r, gold)
    return out


def strategy_config(base: RetrievalConfig, name: str) -> RetrievalConfig:
    """The retrieval config of a named strategy; ``<name>-plain`` also turns the extras off,
    ``<name>-maxsim`` turns the late-interaction rerank on."""
    key = name if isinstance(name, str) else ""
    extras: dict[str, object] = {}
    if key.endswith(PLAIN_SUFFIX):
        key, extras = key.removesuffix(PLAIN_SUFFIX), {**PLAIN, "rerank": "none"}
    elif key.endswith(MAXSIM_SUFFIX) and key.startswith("hybrid"):
        key, extras = key.removesuffix(MAXSIM_SUFFIX), {"rerank": "maxsim"}
    if key not in STRATEGIES:
        raise ConfigError(
            f"Unknown retrieval strategy {name!r}. Available: {', '.join(STRATEGIES)} "
            f"(each also as <name>{PLAIN_SUFFIX}, the hybrid ones as <name>{MAXSIM_SUFFIX})",
            field="strategies",
        )
    strategy, fusion = STRATEGIES[key]
    return replace(base, strategy=strategy, fusion=fusion, **extras)


def evaluate(
    retriever_for: "dict[str, Retrieves]",
    cases: Sequence[RetrievalCase],
    *,
    ks: Sequence[int] = (1, 5, 10),
    batch_size: int = 64,
    label: dict[str, object] | None = None,
) -> list[dict[str, object]]:
    """One row per (strategy, case) with every metric; ``retriever_for`` maps strategy name -> retriever."""
    depth = max(ks)
    rows: list[dict[str, object]] = []
    for name, retriever in retriever_for.items():
        for lo in range(0, len(cases), batch_size):
            chunk = cases[lo : lo + batch_size]
            times = [c.question_time for c in chunk]
            # when each question is asked, for its relative dates ("last month"); else now
            extra = {} if None in times else {"question_times": times}
            ranked = retriever.retrieve_many([c.user_id for c in chunk], [c.query for c in chunk],
                                             top_k=depth, **extra)
            for case, hits in zip(chunk, ranked):
                rows.append({**(label or {}), "strategy": name, "group": case.group, **score_case(hits, case, ks)})
    return rows


def summarize(rows: Sequence[dict[str, object]], by: Sequence[str] = ("strategy",)) -> pl.DataFrame:
    """Mean of every metric per ``by`` columns (rounded to 3 decimals), with the case count."""
    df = pl.DataFrame(list(rows))
    metrics = [c for c in df.columns if "@" in c or c.endswith("_mrr")]
    return (
        df.group_by(list(by), maintain_order=True)
        .agg(pl.len().alias("n"), *[pl.col(m).mean().round(3) for m in metrics])
    )
