"""Recorded traffic (traces) -> typed records -> turn-pairs for the memory store or a replay.

A trace file is Parquet (``.parquet`` / ``.pq``) or JSON Lines (``.jsonl`` / ``.ndjson``), one
answered request per row: ``ts`` (ISO 8601 text, epoch seconds, or a Parquet timestamp; naive
times are UTC), ``tenant``, ``user_id``, ``session_id``, ``query``, ``answer`` and, optionally,
``model``. Other columns are ignored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memroute.datasets.parsing import DatasetError, jsonl_rows
from memroute.datasets.records import TraceRecord
from memroute.errors import InvalidRequest
from memroute.types import TurnPair, validate_user_id

REQUIRED_FIELDS = ("ts", "tenant", "user_id", "session_id", "query", "answer")
OPTIONAL_FIELDS = ("model",)
PARQUET_SUFFIXES = (".parquet", ".pq")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
# Epoch seconds past this (year 5138) are almost surely milliseconds: refuse rather than guess.
_MAX_EPOCH_S = 1e11


def _parse_ts(value: Any) -> float:
    """ISO text, epoch seconds (number or numeric text) or a datetime -> epoch seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a timestamp, got bool")
    if isinstance(value, datetime):
        dt = value if value.tzinfo else value.replace(tzinfo=UTC)
        return dt.timestamp()
    if isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            try:
                dt = datetime.fromisoformat(text)
            except ValueError:
                raise ValueError(
                    f"cannot parse {value!r} (expected ISO 8601 like '2024-05-01T12:30:00Z' "
                    "or epoch seconds)"
                ) from None
            return _parse_ts(dt)
        value = seconds
    if isinstance(value, (int, float)):
        seconds = float(value)
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"expected non-negative epoch seconds, got {value!r}")
        if seconds > _MAX_EPOCH_S:
            raise ValueError(f"{value!r} looks like milliseconds; expected epoch seconds")
        return seconds
    raise ValueError(f"expected ISO text or epoch seconds, got {type(value).__name__}")


def _record(row: Any, origin: str) -> TraceRecord:
    def error(name: str, problem: str) -> DatasetError:
        return DatasetError(f"{origin}: {name}: {problem}", field=name)

    if not isinstance(row, dict):
        raise error("record", f"expected an object, got {type(row).__name__}")
    values: dict[str, str] = {}
    for name in REQUIRED_FIELDS[1:] + OPTIONAL_FIELDS:
        value = row.get(name)
        if value is None:
            if name in OPTIONAL_FIELDS:
                values[name] = ""
                continue
            raise error(name, "missing")
        if not isinstance(value, str):
            raise error(name, f"expected str, got {type(value).__name__}")
        if name in ("tenant", "user_id", "session_id", "query") and not value.strip():
            raise error(name, "empty")
        values[name] = value
    if row.get("ts") is None:
        raise error("ts", "missing")
    try:
        ts = _parse_ts(row["ts"])
    except ValueError as exc:
        raise error("ts", str(exc)) from None
    return TraceRecord(ts=ts, origin=origin, **values)


def _parquet_rows(path: Path) -> Iterator[tuple[str, Any]]:
    import pyarrow as pa  # lazily: only Parquet traces need it
    import pyarrow.parquet as pq

    try:
        reader = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DatasetError(f"{path}: not a readable Parquet file ({exc})", field="path") from None
    missing = [c for c in REQUIRED_FIELDS if c not in reader.schema_arrow.names]
    if missing:
        raise DatasetError(
            f"{path}: missing column(s) {', '.join(missing)}; a trace needs "
            f"{', '.join(REQUIRED_FIELDS)} (and optionally model)",
            field=missing[0],
        )
    columns = [c for c in REQUIRED_FIELDS + OPTIONAL_FIELDS if c in reader.schema_arrow.names]
    row = 0
    for batch in reader.iter_batches(batch_size=65_536, columns=columns):
        for item in batch.to_pylist():
            row += 1
            yield f"{path}: row {row}", item


def load_traces(path: str | Path) -> list[TraceRecord]:
    """Read a trace file (format by suffix), in file order; a bad record fails naming the file,
    the line (JSONL) or row (Parquet, 1-based) and the field."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in PARQUET_SUFFIXES + JSONL_SUFFIXES:
        raise InvalidRequest(
            f"{path}: unknown trace format {suffix or '(no suffix)'!r}; use one of "
            f"{', '.join(PARQUET_SUFFIXES + JSONL_SUFFIXES)}",
            field="path",
        )
    if not path.is_file():
        raise DatasetError(f"{path}: trace file not found", field="path")
    rows = _parquet_rows(path) if suffix in PARQUET_SUFFIXES else jsonl_rows(path)
    return [_record(row, origin) for origin, row in rows]


def trace_user_id(record: TraceRecord) -> str:
    """``"<tenant>:<user_id>"``: tenants never share a memory partition."""
    uid = f"{record.tenant}:{record.user_id}"
    try:
        return validate_user_id(uid)
    except InvalidRequest as exc:
        where = record.origin or "trace record"
        raise DatasetError(
            f"{where}: tenant/user_id: {uid[:60]!r} is not a valid user id ({exc.message})",
            field="user_id",
        ) from None


def trace_turn_pairs(records: Iterable[TraceRecord]) -> list[TurnPair]:
    """One turn-pair per record, in time order (ties keep file order). ``turn_index`` counts
    within (tenant, user, session) in time order; ``session_time`` is the record's own time."""
    ordered = sorted(enumerate(records), key=lambda item: (item[1].ts, item[0]))
    next_index: dict[tuple[str, str, str], int] = {}
    pairs = []
    for _, rec in ordered:
        uid = trace_user_id(rec)
        key = (rec.tenant, rec.user_id, rec.session_id)
        index = next_index.get(key, 0)
        next_index[key] = index + 1
        pairs.append(
            TurnPair(
                user_id=uid,
                session_id=rec.session_id,
                turn_index=index,
                user_text=rec.query,
                assistant_text=rec.answer,
                session_time=int(rec.ts),
                source_model=rec.model,
                created_at=rec.ts,
            )
        )
    return pairs
