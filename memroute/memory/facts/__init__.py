"""Facts with a lifecycle (the MSOCA memory layer): profile, temporal (bi-temporal, superseded
never deleted) and ephemeral (hidden after a TTL) facts per user, on SQLite or PostgreSQL.

Importing this package opens nothing; :class:`FactStore` connects when constructed.
"""

from __future__ import annotations

from memroute.memory.facts.reads import active_query
from memroute.memory.facts.store import FactStore
from memroute.memory.facts.types import (
    ACTIVE,
    CATEGORIES,
    CONFIRMED,
    EPHEMERAL,
    EXPLICIT,
    INFERRED,
    PROFILE,
    RETRACTED,
    SOURCES,
    STATUSES,
    SUPERSEDED,
    TEMPORAL,
    Fact,
    FactInput,
    FactStoreError,
)

__all__ = [
    "ACTIVE",
    "CATEGORIES",
    "CONFIRMED",
    "EPHEMERAL",
    "EXPLICIT",
    "INFERRED",
    "PROFILE",
    "RETRACTED",
    "SOURCES",
    "STATUSES",
    "SUPERSEDED",
    "TEMPORAL",
    "Fact",
    "FactInput",
    "FactStore",
    "FactStoreError",
    "active_query",
]
