"""MemoryStore protocol: per-user turn-pair memories with vectors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from memroute.types import Memory, TurnPair


@dataclass(frozen=True)
class UserRows:
    """A user's memories and their vectors, row for row (``list_user_vectors``: the retriever's
    in-process dense leg, ``retrieval.hot_vectors``)."""

    memories: Sequence[Memory]
    vectors: np.ndarray  # (len(memories), dim) float32, L2-normalized


@runtime_checkable
class MemoryStore(Protocol):
    def upsert(self, pairs: Sequence[TurnPair], vectors: np.ndarray, *,
               known_new: bool = False) -> int:
        """Store turn-pairs (ids are deterministic, so re-inserts replace). Returns rows written.
        ``known_new``: the caller checked that no id is stored, so a plain insert is safe."""
        ...

    def search(self, user_id: str, vector: np.ndarray, limit: int) -> list[tuple[Memory, float]]:
        """Dense search restricted to ``user_id``; (memory, cosine similarity), best first."""
        ...

    def list_user(self, user_id: str) -> list[Memory]:
        """All memories of one user (for the BM25 index)."""
        ...

    def count(self, user_id: str | None = None) -> int: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...
