"""Batched writes that isolate bad rows: one refused pair must not lose its whole batch."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from memroute.errors import InvalidRequest
from memroute.memory.base import MemoryStore
from memroute.types import TurnPair

log = logging.getLogger(__name__)

MAX_MESSAGES = 5  # error messages kept per outcome (the counts are always exact)


@dataclass
class WriteOutcome:
    written: int = 0
    errors: int = 0
    messages: list[str] = field(default_factory=list)

    def add(self, other: WriteOutcome) -> None:
        self.written += other.written
        self.errors += other.errors
        self.messages.extend(other.messages[: max(0, MAX_MESSAGES - len(self.messages))])


def write_pairs(store: MemoryStore, pairs: Sequence[TurnPair], vectors: np.ndarray, *,
                known_new: bool = False) -> WriteOutcome:
    """Upsert ``pairs`` with their ``vectors`` in one request; if the store refuses the batch
    (it validates every row before writing any), write row by row and count the refused rows.
    ``known_new``: no id is stored yet (the caller looked them up), so the store may insert.

    Store faults other than a refused row (connection lost, server error) propagate.
    """
    if len(pairs) != len(vectors):
        raise InvalidRequest(f"{len(pairs)} pairs but {len(vectors)} vectors", field="vectors")
    if not pairs:
        return WriteOutcome()
    try:
        return WriteOutcome(written=store.upsert(pairs, vectors, known_new=known_new))
    except InvalidRequest:
        pass
    out = WriteOutcome()
    for pair, vec in zip(pairs, vectors):
        try:
            out.written += store.upsert([pair], vec[None, :], known_new=known_new)
        except InvalidRequest as exc:
            out.errors += 1
            where = f"user {pair.user_id}, {pair.session_id}#{pair.turn_index}"
            msg = f"pair {pair.id} ({where}): {exc.message}"
            log.warning("not stored: %s", msg)
            if len(out.messages) < MAX_MESSAGES:
                out.messages.append(msg)
    return out
