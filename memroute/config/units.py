"""Atomic context units (:mod:`memroute.memory.units`): written by fact extraction, embedded
into a Milvus collection of their own beside the turn-pairs, near-duplicates suppressed."""

from __future__ import annotations

from dataclasses import dataclass

from memroute.errors import ConfigError


@dataclass
class UnitsConfig:
    enabled: bool = True  # extraction writes units; memory search reads them
    # cosine similarity at or above which a new unit is a near-duplicate of a stored one (skipped)
    dedup_threshold: float = 0.95
    collection_suffix: str = "_units"  # the units' collection: <memory.collection><suffix>


def check_units_config(cfg: UnitsConfig) -> UnitsConfig:
    t = cfg.dedup_threshold
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 < t <= 1.0:
        raise ConfigError(f"dedup_threshold must be in (0, 1], got {t!r}",
                          field="units.dedup_threshold")
    suffix = cfg.collection_suffix
    if not isinstance(suffix, str) or not suffix or not suffix.replace("_", "").isalnum():
        raise ConfigError(f"collection_suffix must be letters, digits and _, got {suffix!r}",
                          field="units.collection_suffix")
    return cfg
