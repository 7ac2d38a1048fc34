"""The benchmark's fact layer: how facts are extracted for the ``*_facts`` conditions.

The conditions ``warm_memory_facts`` / ``warm_compound_facts`` (:mod:`memroute.eval.conditions`)
answer with the user's active facts injected beside the turn-pairs. The facts come from running
fact extraction (:mod:`memroute.memory.facts.extraction`) with the cascade's first model over
each user's conversation in order, ``turns_per_call`` turn-pairs per model call, into a fact
store in the run's folder. The extracted store is cached under ``cache_dir`` by (dataset,
model, schema, these settings), so a rerun does not extract again.

The extraction schema is ``fields`` when set, else ``dataset_fields[<dataset name>]`` (the
built-in set's planted fact types, conf/benchmark.yaml), else the default schema
(:data:`memroute.config.extraction.DEFAULT_FIELDS`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from memroute.config.extraction import DEFAULT_FIELDS, check_extraction_fields
from memroute.errors import ConfigError


@dataclass
class FactLayerConfig:
    cache_dir: str = ".memroute/fact_cache"
    turns_per_call: int = 8  # turn-pairs per extraction call (a session is cut into chunks)
    max_tokens: int = 512  # the extraction reply's budget
    retries: int = 1  # an invalid output is retried this often, then that chunk is skipped
    grounding: bool = True  # drop facts their turn does not state (memory/facts/grounding.py)
    tier: int = 0  # the cascade tier that extracts (0: the first, as in serving)
    # Atomic context units in the reply too; off by default: these conditions inject facts,
    # and a facts-only reply is about half as long (extraction is most of the run's time).
    units: bool = False  # the *_units conditions turn it on for their run
    unit_k: int = 5  # *_units conditions: units asked for per question, fused with the turns
    unit_weight: float = 1.0  # their weight in the rank fusion (1: a unit ranks like a turn)
    fields: Optional[list[dict[str, str]]] = None  # noqa: UP045 - OmegaConf reads Optional
    dataset_fields: dict[str, Any] = field(default_factory=dict)  # dataset name -> fields


def fact_layer_fields(cfg: FactLayerConfig, dataset: str) -> list[dict[str, str]]:
    """The extraction schema for ``dataset`` (see the module doc), checked."""
    if cfg.fields is not None:
        return check_extraction_fields(cfg.fields, prefix="fact_layer.fields")
    if dataset in cfg.dataset_fields:
        return check_extraction_fields(cfg.dataset_fields[dataset],
                                       prefix=f"fact_layer.dataset_fields.{dataset}")
    return [dict(f) for f in DEFAULT_FIELDS]


def check_fact_layer_config(cfg: FactLayerConfig) -> FactLayerConfig:
    for name, low, high in (("turns_per_call", 1, 256), ("max_tokens", 16, 32_768),
                            ("retries", 0, 5), ("unit_k", 1, 100), ("tier", 0, 63)):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(f"{name} must be an integer in [{low}, {high}], got {value!r}",
                              field=f"fact_layer.{name}")
    w = cfg.unit_weight
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 < w <= 10:
        raise ConfigError(f"unit_weight must be in (0, 10], got {w!r}",
                          field="fact_layer.unit_weight")
    if not isinstance(cfg.grounding, bool):
        raise ConfigError(f"grounding must be true or false, got {cfg.grounding!r}",
                          field="fact_layer.grounding")
    if not isinstance(cfg.units, bool):
        raise ConfigError(f"units must be true or false, got {cfg.units!r}",
                          field="fact_layer.units")
    if not isinstance(cfg.cache_dir, str) or not cfg.cache_dir.strip():
        raise ConfigError("cache_dir must be a folder path", field="fact_layer.cache_dir")
    return cfg


__all__ = ["FactLayerConfig", "check_fact_layer_config", "fact_layer_fields"]
