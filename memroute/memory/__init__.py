"""Per-user turn-pair memories: the store protocol, the Milvus store and its filter builders."""

from __future__ import annotations

from memroute.config.schema import MemoryConfig
from memroute.memory.base import MemoryStore
from memroute.memory.milvus_store import MilvusMemoryStore

__all__ = ["MemoryStore", "MilvusMemoryStore", "build_store"]


def build_store(cfg: MemoryConfig, dim: int) -> MemoryStore:
    """The configured store for vectors of width ``dim`` (the encoder's ``dim``)."""
    return MilvusMemoryStore(cfg, dim)
