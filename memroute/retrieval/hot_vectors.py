"""A user's vectors in process, beside their BM25 index (``retrieval.hot_vectors``).

Milvus Lite answers a filtered vector search by scanning the rows in Python (120 ms p50 at 100
users x 1,000 memories); a user's 1,000 x 384 float32 matrix is 1.5 MB and one matrix-vector
product ranks it exactly in well under a millisecond. The cache entry that holds a user's BM25
index (:class:`memroute.retrieval.bm25_cache.BM25Cache`) holds these too, read in the same store
round trip, kept in step by the retriever's writes, evicted with it under the same byte cap.
Milvus stays the source of truth: an entry is rebuilt from it whenever in doubt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from memroute.memory.base import UserRows
from memroute.types import Memory


@dataclass(frozen=True)
class UserVectors:
    ids: np.ndarray  # (n,) int64, the memory ids in row order
    matrix: np.ndarray  # (n, dim) float32
    session_times: np.ndarray  # (n,) int64

    @classmethod
    def of(cls, memories: Sequence[Memory], vectors: np.ndarray) -> UserVectors:
        matrix = np.ascontiguousarray(vectors, dtype=np.float32)
        # a user with no rows yet: an empty (0, dim) matrix (reshape(0, -1) is ambiguous)
        dim = matrix.shape[-1] if matrix.ndim == 2 else matrix.size // max(len(memories), 1)
        matrix = matrix.reshape(len(memories), dim)
        return cls(np.fromiter((m.id for m in memories), np.int64, len(memories)), matrix,
                   np.fromiter((m.session_time for m in memories), np.int64, len(memories)))

    def merged(self, memories: Sequence[Memory], vectors: np.ndarray) -> UserVectors:
        """These rows with ``memories`` added (a rewritten id takes its new vector; of one id
        given twice, the later)."""
        last = {m.id: i for i, m in enumerate(memories)}
        picked = sorted(last.values())
        new = UserVectors.of([memories[i] for i in picked], np.asarray(vectors)[picked])
        keep = ~np.isin(self.ids, new.ids)
        return UserVectors(np.concatenate([self.ids[keep], new.ids]),
                           np.concatenate([self.matrix[keep], new.matrix]),
                           np.concatenate([self.session_times[keep], new.session_times]))

    @property
    def nbytes(self) -> int:
        return int(self.ids.nbytes + self.matrix.nbytes + self.session_times.nbytes)

    def search(self, memories: Mapping[int, Memory], vector: np.ndarray, limit: int,
               time_window: tuple[int, int] | None = None) -> list[tuple[Memory, float]]:
        """Exact cosine top ``limit`` (rows are normalized), best first, as the store's
        ``search`` returns them; within ``time_window`` (inclusive) when given."""
        if not len(self.ids):
            return []
        scores = self.matrix @ np.asarray(vector, dtype=np.float32).reshape(-1)
        rows = np.arange(len(scores))
        if time_window is not None:
            start, end = time_window
            rows = rows[(self.session_times >= start) & (self.session_times <= end)]
        if len(rows) > limit:
            rows = rows[np.argpartition(-scores[rows], limit - 1)[:limit]]
        rows = rows[np.lexsort((self.ids[rows], -scores[rows]))]  # ties: the lower id first
        return [(memories[int(self.ids[r])], float(scores[r])) for r in rows]


__all__ = ["UserRows", "UserVectors"]
