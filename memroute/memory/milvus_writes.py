"""The Milvus store's write path: a turn-pair -> a checked row, and rows -> batched requests.

Three request forms, chosen by the store (``mode``):

- ``upsert``: the normal form on Milvus Lite and 2.4+ servers;
- ``replace``: delete + insert, for 2.3 servers whose upsert misroutes rows
  (:mod:`memroute.memory.milvus_builds`);
- ``insert``: rows the caller has checked are not stored (a bulk ingest's plan). Cheapest on every
  build, and on a 2.3 server the only form that keeps a bulk load going: a delete that spans many
  users makes the server seal and index small segments, and 1M rows over 1,000 users fell from
  2,500 to 150-240 rows/s (docs/BENCHMARKS.md). An id inserted twice would be stored twice, so
  only a caller that looked the ids up may ask for it. A bulk ingest's writer actor that Ray
  restarted (``was_current_actor_reconstructed``) gets the block it held again, perhaps half
  written: it upserts instead (``pipelines.ingest.WriteBatch``).

Supersession marks (:func:`mark_superseded`) rewrite the marked rows whole, vectors included:
Milvus has no partial update before 2.6.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from memroute.errors import InvalidRequest
from memroute.memory import filters
from memroute.memory.milvus_builds import replace_rows
from memroute.memory.milvus_collection import SUPERSESSION_FIELDS
from memroute.memory.milvus_rows import (MAX_SESSION_ID, MAX_SOURCE_MODEL, MAX_TEXT, READ_BATCH,
                                         check_varchar, is_int, stored_text)
from memroute.types import TurnPair, validate_user_id

WRITE_BATCH = 1000  # rows per write request
MODES = ("upsert", "replace", "insert")


def write_rows(client: Any, collection: str, rows: Sequence[dict[str, Any]], *, mode: str,
               timeout: float) -> None:
    """Write ``rows`` in requests of at most :data:`WRITE_BATCH` rows, in the form ``mode``."""
    if mode not in MODES:
        raise ValueError(f"write mode must be one of {MODES}, got {mode!r}")
    for start in range(0, len(rows), WRITE_BATCH):
        chunk = list(rows[start : start + WRITE_BATCH])
        if mode == "upsert":
            client.upsert(collection, chunk, timeout=timeout)
        elif mode == "insert":
            client.insert(collection, chunk, timeout=timeout)
        else:
            replace_rows(client, collection, chunk, timeout=timeout)


def row_for(pair: TurnPair, vec: np.ndarray) -> dict[str, Any]:
    """The row of ``pair``, every field checked against the schema's types and limits."""
    if not isinstance(pair, TurnPair):
        raise InvalidRequest(f"expected a TurnPair, got {type(pair).__name__}", field="pairs")
    validate_user_id(pair.user_id)
    text = stored_text(pair, MAX_TEXT)
    check_varchar(pair.session_id, MAX_SESSION_ID, "session_id")
    check_varchar(pair.source_model, MAX_SOURCE_MODEL, "source_model")
    for name in ("turn_index", "session_time"):
        value = getattr(pair, name)
        if not is_int(value) or not -(2**63) <= value < 2**63:
            raise InvalidRequest(f"{name} must be an INT64 integer, got {value!r}", field=name)
    if not math.isfinite(float(pair.created_at)):
        raise InvalidRequest("created_at must be a finite number", field="created_at")
    return {
        "id": pair.id,
        "user_id": pair.user_id,
        "text": text,
        "session_id": pair.session_id,
        "turn_index": pair.turn_index,
        "session_time": pair.session_time,
        "source_model": pair.source_model,
        "created_at": float(pair.created_at),
        "superseded_by": 0,
        "valid_until": 0,
        "vector": vec.tolist(),
    }


def pair_rows(pairs: Sequence[TurnPair], vectors: np.ndarray, *,
              supersession: bool) -> list[dict[str, Any]]:
    """The checked rows of ``pairs`` (``vectors`` row for row), one per id; without the
    supersession fields for a collection that predates them."""
    rows: dict[int, dict[str, Any]] = {}
    for pair, vec in zip(pairs, vectors):
        # Later duplicates win: Milvus refuses duplicate keys inside one upsert request.
        rows[pair.id] = row_for(pair, vec)
    batch = list(rows.values())
    if not supersession:
        batch = [{k: v for k, v in r.items() if k not in SUPERSESSION_FIELDS} for r in batch]
    return batch


def mark_superseded(client: Any, collection: str, user_id: str,
                    marks: Mapping[int, tuple[int, int]], *, fields: list[str],
                    filter_kwargs: Callable[[filters.Filter], dict[str, Any]],
                    timeout: float, write_timeout: float, mode: str) -> int:
    """Rewrite ``user_id``'s rows ``{id: (superseded_by, valid_until)}`` with those marks (read
    with their vectors in pages of :data:`READ_BATCH`, written back in the form ``mode``);
    returns the rows marked, ids not stored skipped."""
    rows: list[dict[str, Any]] = []
    wanted = list(marks)
    for start in range(0, len(wanted), READ_BATCH):
        flt = filters.ids_filter(user_id, wanted[start : start + READ_BATCH])
        rows += client.query(collection, output_fields=[*fields, "vector"], timeout=timeout,
                             **filter_kwargs(flt))
    for row in rows:
        row["superseded_by"], row["valid_until"] = (int(x) for x in marks[int(row["id"])])
        row["vector"] = [float(x) for x in row["vector"]]
    write_rows(client, collection, [dict(r) for r in rows], timeout=write_timeout, mode=mode)
    return len(rows)


def check_vectors(vectors: np.ndarray, n: int, dim: int, *, field: str) -> np.ndarray:
    """``vectors`` as float32 of shape ``(n, dim)``, all finite, else a 400 naming ``field``."""
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape != (n, dim):
        raise InvalidRequest(
            f"{field} has shape {tuple(np.shape(vectors))}, expected ({n}, {dim})", field=field
        )
    if not np.isfinite(arr).all():
        raise InvalidRequest(f"{field} contains NaN or infinite values", field=field)
    return arr
