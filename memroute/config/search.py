"""Memory search settings (:mod:`memroute.memory.search`, ``POST /v1/memory/search``).

Scores are in [0, 1]: ``dense_weight`` x the cosine similarity (negative: 0) plus the rest x the
share of the query's words the text holds. The whole answer's confidence comes from its best
score: ``high`` at or above ``high``, ``medium`` at or above ``medium``, else ``low``. With
MiniLM a paraphrase of a stored sentence scores ~0.35-0.5 on its cosine alone, the same words
~0.75 and more, an unrelated text under ~0.15 (bench/bench_memory_search.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from memroute.errors import ConfigError

MAX_TOP_K = 20  # the memory_search tool's maximum (memroute.memory.facts.session)


@dataclass
class SearchConfig:
    dense_weight: float = 0.6  # the cosine's share of a result's score; the rest is word overlap
    high: float = 0.55  # best score >= high: confidence "high"
    medium: float = 0.3  # best score >= medium: "medium"; below: "low"
    # best score below this: a keyword fallback over the raw turns is added, scored below
    # every real match (0: never)
    fallback_below: float = 0.3
    candidate_k: int = 20  # candidates read from each source before the common ranking
    max_query_chars: int = 2000
    fact_vector_cache: int = 20000  # fact vectors kept (facts are immutable rows: never stale)


def _fraction(cfg: SearchConfig, name: str, *, low_open: bool = False) -> float:
    v = getattr(cfg, name)
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (
        0.0 < v <= 1.0 if low_open else 0.0 <= v <= 1.0)
    if not ok:
        raise ConfigError(f"{name} must be in {'(0' if low_open else '[0'}, 1], got {v!r}",
                          field=f"search.{name}")
    return float(v)


def check_search_config(cfg: SearchConfig) -> SearchConfig:
    _fraction(cfg, "dense_weight")
    high, medium = _fraction(cfg, "high", low_open=True), _fraction(cfg, "medium", low_open=True)
    if medium > high:
        raise ConfigError(f"medium ({medium}) must be <= high ({high})", field="search.medium")
    _fraction(cfg, "fallback_below")
    for name, low in (("candidate_k", MAX_TOP_K), ("max_query_chars", 1), ("fact_vector_cache", 0)):
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ConfigError(f"{name} must be an integer >= {low}, got {v!r}",
                              field=f"search.{name}")
    return cfg
