"""Atomic context units in Milvus: self-contained sentences from fact extraction, embedded and
searched beside the turn-pairs, near-duplicates suppressed.

Storage: a :class:`~memroute.memory.milvus_store.MilvusMemoryStore` of its own collection
(``<memory.collection>_units``, same Milvus), one row per unit: its text, the source turn's
``session_id`` / ``turn_index`` / ``session_time``, and an id from (user, unit text), so the same
sentence written twice is one row. The store writes turn-pairs; :class:`UnitRow` is a unit in
that shape (its text is the unit's, not "Q: ... / A: ...").

Dedup: before writing, each new unit's vector searches the user's stored units; a cosine
similarity at or above ``units.dedup_threshold`` (0.95: MiniLM gives reworded copies of one
sentence ~0.99, two sentences that differ in one detail ~0.8) means it is skipped and counted
as suppressed; units of one batch are checked against each other too. One extraction runs per
user at a time (the fact store's lock), and writes here are serialized, so check-then-write
cannot race with itself.

Search is a :class:`~memroute.retrieval.retriever.HybridRetriever` over the same store, given
by the composition root (``retriever``); this module only tells it when a user's units changed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from memroute.config.units import UnitsConfig, check_units_config
from memroute.embedding.base import Encoder
from memroute.errors import InvalidRequest
from memroute.memory.facts.extraction_schema import ExtractedUnit
from memroute.namespace import validate_tenant
from memroute.types import RetrievalHit, TurnPair, stable_id, validate_user_id

UNIT_SOURCE = "unit"  # source_model of a unit row: what wrote it
SIMILARITY_EPS = 1e-6  # float32 similarities: a cosine of exactly the threshold reads 0.9499999


@dataclass(frozen=True)
class UnitRow(TurnPair):
    """A unit as the turn-pair store writes it: ``text()`` is the unit's sentence (kept in
    ``user_text``) and the id is the unit's own; session and turn are the source turn's."""

    unit_id: int = 0

    @property
    def id(self) -> int:
        return self.unit_id

    def text(self) -> str:
        return self.user_text


def unit_id(user_id: str, text: str) -> int:
    """Stable id of a unit: its user and its words (case and spacing ignored)."""
    return stable_id(UNIT_SOURCE, user_id, " ".join(text.lower().split()))


def unit_row(unit: ExtractedUnit, *, created_at: float = 0.0) -> UnitRow:
    return UnitRow(user_id=unit.user_id, session_id=unit.session_id, turn_index=unit.turn_index,
                   user_text=unit.text, assistant_text="", session_time=int(unit.session_time),
                   source_model=UNIT_SOURCE, created_at=created_at,
                   unit_id=unit_id(unit.user_id, unit.text))


class UnitStore(Protocol):
    """The part of :class:`~memroute.memory.milvus_store.MilvusMemoryStore` the index uses."""

    def upsert(self, pairs: Sequence[TurnPair], vectors: np.ndarray) -> int: ...

    def search(self, user_id: str, vector: np.ndarray, limit: int) -> list[Any]: ...

    def delete_user(self, user_id: str) -> int: ...

    def delete_tenant(self, tenant: str) -> int: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class UnitWrite:
    written: int  # rows upserted
    suppressed: int  # near-duplicates of a stored unit or of an earlier one in the batch


class UnitIndex:
    """Writes, dedups, searches and erases one deployment's atomic context units."""

    def __init__(
        self, encoder: Encoder, store: UnitStore, cfg: UnitsConfig | None = None, *,
        retriever: Any = None, clock: Any = time.time,
    ) -> None:
        self.cfg = check_units_config(cfg or UnitsConfig())
        self.encoder = encoder
        self.store = store
        self.retriever = retriever  # HybridRetriever over ``store`` (search; its BM25 cache)
        self.clock = clock
        self._lock = threading.Lock()
        self.written = self.suppressed = 0

    def add(self, user_id: str, units: Sequence[ExtractedUnit]) -> UnitWrite:
        """Embed ``units`` (all of ``user_id``), skip near-duplicates, upsert the rest, flush."""
        uid = validate_user_id(user_id)
        items = list(units)
        for u in items:
            if not isinstance(u, ExtractedUnit):
                raise InvalidRequest(f"expected ExtractedUnit, got {type(u).__name__}",
                                     field="units")
            if u.user_id != uid:  # never file one user's words under another's
                raise InvalidRequest("a unit belongs to another user", field="units")
        if not items:
            return UnitWrite(0, 0)
        vectors = np.asarray(self.encoder.encode([u.text for u in items]), dtype=np.float32)
        with self._lock:
            keep: list[int] = []
            for i, vec in enumerate(vectors):
                if self._near_duplicate(uid, vec, vectors[keep]):
                    continue
                keep.append(i)
            now = float(self.clock())
            rows = [unit_row(items[i], created_at=now) for i in keep]
            written = self.store.upsert(rows, vectors[keep]) if rows else 0
            if rows:
                self.store.flush()  # Milvus Lite drops unflushed upserts on a failed flush
                if self.retriever is not None:
                    self.retriever.invalidate(uid)  # its BM25 index misses the new rows
            suppressed = len(items) - len(keep)
            self.written += written
            self.suppressed += suppressed
        return UnitWrite(written, suppressed)

    def _near_duplicate(self, user_id: str, vec: np.ndarray, batch: np.ndarray) -> bool:
        threshold = self.cfg.dedup_threshold - SIMILARITY_EPS
        if len(batch) and float(np.max(batch @ vec)) >= threshold:  # vectors are L2-normalized
            return True
        best = self.store.search(user_id, vec, 1)
        return bool(best) and float(best[0][1]) >= threshold

    def search(self, user_id: str, query: str, top_k: int, *,
               vector: np.ndarray | None = None) -> list[RetrievalHit]:
        """The user's units for ``query`` (hybrid: dense + BM25), best first; ``vector``: the
        query already embedded (the retriever embeds the query as it is: no query focus)."""
        if self.retriever is None:
            return []
        if vector is None:
            return self.retriever.retrieve(user_id, query, top_k=top_k)
        return self.retriever.retrieve_many([user_id], [query], top_k=top_k,
                                            vectors=np.asarray(vector)[None, :])[0]

    # -- erasure (memroute.serving.erasure) ---------------------------------------------------

    def erase_user(self, user_id: str) -> int:
        """Delete every unit of ``user_id`` and its cached BM25 index; returns rows deleted."""
        uid = validate_user_id(user_id)
        return self._erase(lambda: self.store.delete_user(uid),
                           lambda r: r.forget_user(uid))

    def erase_tenant(self, tenant: str) -> int:
        validate_tenant(tenant)
        return self._erase(lambda: self.store.delete_tenant(tenant),
                           lambda r: r.forget_tenant(tenant))

    def _erase(self, delete: Callable[[], int], forget: Callable[[Any], object]) -> int:
        with self._lock:
            n = delete()
            self.store.flush()
            if self.retriever is not None:
                forget(self.retriever)
        return int(n)

    def stats(self) -> dict[str, int]:
        return {"written": self.written, "suppressed": self.suppressed}

    def close(self) -> None:
        self.store.close()


__all__ = ["UNIT_SOURCE", "UnitIndex", "UnitRow", "UnitWrite", "unit_id", "unit_row"]
