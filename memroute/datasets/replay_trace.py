"""Replay traces (docs/TRACES.md): read, validate, write and import time-ordered request streams.

A replay sends each row's last user turn in file order and scores the answer against the row's
references, so the reader checks what a replay relies on -- time order, unique request ids, a user
turn last, valid tenant/user ids -- and a bad row fails naming the file, the line (JSONL) or row
(Parquet) and the field. Reading streams (a 100,000-request trace never sits in memory); writing
goes to a temporary file renamed at the end, so a trace on disk is never half-written. The
answered-turn format of :mod:`memroute.datasets.traces` (``query`` + ``answer``) loads too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memroute.datasets.parsing import DatasetError, jsonl_rows
from memroute.datasets.records import TRACE_KINDS, TraceRequest
from memroute.datasets.traces import JSONL_SUFFIXES, PARQUET_SUFFIXES, _parse_ts
from memroute.errors import InvalidRequest
from memroute.types import Message, validate_user_id

ROLES = ("system", "user", "assistant")
DOMAINS = ("personal", "general")
COLUMNS = ("request_id", "ts", "tenant", "user_id", "session_id", "messages", "query",
           "reference", "references", "stale_reference", "stale_references", "answer", "model",
           "kind", "fact_id", "domain")
_BATCH = 8192


def _error(origin: str, name: str, problem: str) -> DatasetError:
    return DatasetError(f"{origin}: {name}: {problem}", field=name)


def _text(row: dict[str, Any], name: str, origin: str, *, required: bool) -> str | None:
    value = row.get(name)
    if value is None:
        if required:
            raise _error(origin, name, "missing")
        return None
    if not isinstance(value, str):
        raise _error(origin, name, f"expected str, got {type(value).__name__}")
    if required and not value.strip():
        raise _error(origin, name, "empty")
    return value


def _content(value: Any, name: str, origin: str) -> str:
    """OpenAI content: a string, or a list of parts whose ``text`` parts are joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) for p in value):
        texts = [p.get("text") for p in value if p.get("type", "text") == "text"]
        if all(isinstance(t, str) for t in texts):
            return "".join(texts)  # type: ignore[arg-type]
    raise _error(origin, name, f"expected str or a list of text parts, got {type(value).__name__}")


def parse_messages(value: Any, origin: str, *, allow_reply: bool = False) -> tuple[Message, ...]:
    """OpenAI chat messages -> :class:`Message` s; the last must be a non-empty user turn
    (``allow_reply``: or an assistant reply, which the caller splits off)."""
    if not isinstance(value, list):
        raise _error(origin, "messages", f"expected a list, got {type(value).__name__}")
    if not value:
        raise _error(origin, "messages", "empty: a request needs at least the user turn")
    out = []
    for i, msg in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise _error(origin, where, f"expected an object, got {type(msg).__name__}")
        role = msg.get("role")
        if role not in ROLES:
            raise _error(origin, f"{where}.role", f"{role!r} is not one of {', '.join(ROLES)}")
        if msg.get("content") is None:
            raise _error(origin, f"{where}.content", "missing")
        out.append(Message(role=role, content=_content(msg["content"], f"{where}.content", origin)))
    last = out[-1]
    if last.role != "user" and not (allow_reply and last.role == "assistant" and len(out) > 1):
        raise _error(origin, f"messages[{len(out) - 1}].role",
                     f"the last message must be the user turn, got {last.role!r}")
    at = len(out) - 1 if last.role == "user" else len(out) - 2
    if out[at].role != "user":
        raise _error(origin, f"messages[{at}].role",
                     f"the message before the reply must be the user turn, got {out[at].role!r}")
    if not out[at].content.strip():
        raise _error(origin, f"messages[{at}].content", "the user turn is empty")
    return tuple(out)


def _strings(row: dict[str, Any], names: tuple[str, str], origin: str) -> tuple[str, ...]:
    name = names[0] if row.get(names[0]) is not None else names[1]
    value = row.get(name)
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value.strip() else ()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise _error(origin, name, f"expected a string or a list of strings, got {type(value).__name__}")


def check_user(tenant: str, user_id: str, origin: str) -> None:
    """``"<tenant>:<user_id>"`` must be a memory user id (tenants never share a partition)."""
    try:
        validate_user_id(f"{tenant}:{user_id}")
    except InvalidRequest as exc:
        uid = f"{tenant}:{user_id}"[:60]
        raise _error(origin, "user_id", f"{uid!r} is not a valid user id ({exc.message})") from None


def parse_request(row: Any, origin: str, default_id: str) -> TraceRequest:
    """One row (a dict) -> :class:`TraceRequest`; :class:`DatasetError` names origin and field."""
    if not isinstance(row, dict):
        raise _error(origin, "record", f"expected an object, got {type(row).__name__}")
    if row.get("ts") is None:
        raise _error(origin, "ts", "missing")
    try:
        ts = _parse_ts(row["ts"])
    except ValueError as exc:
        raise _error(origin, "ts", str(exc)) from None
    tenant = _text(row, "tenant", origin, required=True)
    user_id = _text(row, "user_id", origin, required=True)
    session_id = _text(row, "session_id", origin, required=True)
    assert tenant is not None and user_id is not None and session_id is not None
    check_user(tenant, user_id, origin)
    if row.get("messages") is not None:
        messages = parse_messages(row["messages"], origin)
    elif row.get("query") is not None:
        query = _text(row, "query", origin, required=True)
        messages = (Message(role="user", content=query or ""),)
    else:
        raise _error(origin, "messages", "missing (give messages, or a query column)")
    request_id = row.get("request_id")
    if request_id is None:
        request_id = default_id
    elif isinstance(request_id, int) and not isinstance(request_id, bool):
        request_id = str(request_id)
    elif not isinstance(request_id, str) or not request_id.strip():
        raise _error(origin, "request_id", f"expected a non-empty str, got {request_id!r}")
    kind = _text(row, "kind", origin, required=False)
    if kind is not None and kind not in TRACE_KINDS:
        raise _error(origin, "kind", f"{kind!r} is not one of {', '.join(TRACE_KINDS)}")
    domain = _text(row, "domain", origin, required=False)
    if domain is not None and domain not in DOMAINS:
        raise _error(origin, "domain", f"{domain!r} is not one of {', '.join(DOMAINS)}")
    return TraceRequest(
        request_id=request_id,
        ts=ts,
        tenant=tenant,
        user_id=user_id,
        session_id=session_id,
        messages=messages,
        references=_strings(row, ("reference", "references"), origin),
        stale_references=_strings(row, ("stale_reference", "stale_references"), origin),
        answer=_text(row, "answer", origin, required=False),
        model=_text(row, "model", origin, required=False),
        kind=kind,
        fact_id=_text(row, "fact_id", origin, required=False),
        domain=domain,
        origin=origin,
    )


def _format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    raise InvalidRequest(
        f"{path}: unknown trace format {suffix or '(no suffix)'!r}; use one of "
        f"{', '.join(PARQUET_SUFFIXES + JSONL_SUFFIXES)}",
        field="path",
    )


def _parquet_rows(path: Path) -> Iterator[tuple[str, Any]]:
    import pyarrow as pa  # lazily: only Parquet traces need it
    import pyarrow.parquet as pq

    try:
        reader = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DatasetError(f"{path}: not a readable Parquet file ({exc})", field="path") from None
    columns = [c for c in COLUMNS if c in reader.schema_arrow.names]
    row = 0
    for batch in reader.iter_batches(batch_size=_BATCH, columns=columns):
        for item in batch.to_pylist():
            row += 1
            yield f"{path}: row {row}", item


def iter_trace(path: str | Path) -> Iterator[TraceRequest]:
    """Stream a trace (format by suffix) in file order, validating as it goes: time order
    (``ts`` never decreasing), unique ``request_id`` s (default: the 1-based row number)."""
    path = Path(path)
    kind = _format(path)
    if not path.is_file():
        raise DatasetError(f"{path}: trace file not found", field="path")
    rows = _parquet_rows(path) if kind == "parquet" else jsonl_rows(path)
    seen: set[str] = set()
    last_ts = float("-inf")
    for number, (origin, row) in enumerate(rows, start=1):
        req = parse_request(row, origin, str(number))
        if req.ts < last_ts:
            raise _error(origin, "ts", f"{req.ts} is earlier than the previous request's "
                         f"{last_ts}: a trace must be in time order")
        if req.request_id in seen:
            raise _error(origin, "request_id", f"duplicate {req.request_id!r}")
        seen.add(req.request_id)
        last_ts = req.ts
        yield req


def load_trace(path: str | Path) -> list[TraceRequest]:
    """:func:`iter_trace` as a list (small traces, tests)."""
    return list(iter_trace(path))


# ---------------------------------------------------------------- writing
def _ts_out(ts: float) -> float | int:
    return int(ts) if float(ts).is_integer() else ts


def request_row(req: TraceRequest) -> dict[str, Any]:
    """The JSONL object of a request (None / empty optional fields left out)."""
    row: dict[str, Any] = {
        "request_id": req.request_id,
        "ts": _ts_out(req.ts),
        "tenant": req.tenant,
        "user_id": req.user_id,
        "session_id": req.session_id,
        "messages": [{"role": m.role, "content": m.content} for m in req.messages],
        "reference": list(req.references),
    }
    if req.stale_references:
        row["stale_reference"] = list(req.stale_references)
    for name in ("answer", "model", "kind", "fact_id", "domain"):
        if getattr(req, name) is not None:
            row[name] = getattr(req, name)
    return row


def _parquet_schema() -> Any:
    import pyarrow as pa

    text = pa.string()
    message = pa.struct([("role", text), ("content", text)])
    return pa.schema([
        ("request_id", text), ("ts", pa.float64()), ("tenant", text), ("user_id", text),
        ("session_id", text), ("messages", pa.list_(message)), ("reference", pa.list_(text)),
        ("stale_reference", pa.list_(text)), ("answer", text), ("model", text), ("kind", text),
        ("fact_id", text), ("domain", text),
    ])


def _write_parquet(requests: Iterable[TraceRequest], tmp: Path) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _parquet_schema()
    count = 0
    with pq.ParquetWriter(tmp, schema) as writer:
        batch: list[dict[str, Any]] = []
        for req in requests:
            row = request_row(req)
            row["ts"] = float(req.ts)
            batch.append(row)
            count += 1
            if len(batch) >= _BATCH:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                batch = []
        if batch or not count:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
    return count


def _write_jsonl(requests: Iterable[TraceRequest], tmp: Path) -> int:
    count = 0
    with tmp.open("w", encoding="utf-8") as fh:
        for req in requests:
            fh.write(json.dumps(request_row(req), ensure_ascii=False) + "\n")
            count += 1
    return count


def write_trace(requests: Iterable[TraceRequest], path: str | Path) -> int:
    """Write ``requests`` (consumed lazily) as JSONL or Parquet by suffix; returns the count.

    Written to a temporary file next to ``path`` and renamed, so a failure mid-way (a generator
    raising, a full disk) leaves ``path`` as it was."""
    path = Path(path)
    kind = _format(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        count = _write_parquet(requests, tmp) if kind == "parquet" else _write_jsonl(requests, tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return count


# ---------------------------------------------------------------- importing chat logs
def _chat_row(row: Any, origin: str, lineno: int, tenant: str, default_user: str) -> TraceRequest:
    if not isinstance(row, dict):
        raise _error(origin, "record", f"expected an object, got {type(row).__name__}")
    if row.get("created") is None:
        raise _error(origin, "created", "missing")
    try:
        ts = _parse_ts(row["created"])
    except ValueError as exc:
        raise _error(origin, "created", str(exc)) from None
    if row.get("messages") is None:
        raise _error(origin, "messages", "missing")
    messages = parse_messages(row["messages"], origin, allow_reply=True)
    answer = None
    if messages[-1].role == "assistant":
        answer, messages = messages[-1].content, messages[:-1]
    user = row.get("user") if row.get("user") is not None else default_user
    if not isinstance(user, str) or not user.strip():
        raise _error(origin, "user", f"expected a non-empty str, got {user!r}")
    check_user(tenant, user, origin)
    session = row.get("session_id")
    if session is None:
        session = f"{user}-{datetime.fromtimestamp(ts, tz=UTC):%Y-%m-%d}"
    elif not isinstance(session, str) or not session.strip():
        raise _error(origin, "session_id", f"expected a non-empty str, got {session!r}")
    model = row.get("model")
    if model is not None and not isinstance(model, str):
        raise _error(origin, "model", f"expected str, got {type(model).__name__}")
    rid = row.get("request_id", row.get("id"))
    if rid is None:
        rid = str(lineno)
    elif not isinstance(rid, (str, int)) or isinstance(rid, bool) or not str(rid).strip():
        raise _error(origin, "request_id" if "request_id" in row else "id",
                     f"expected a non-empty str, got {rid!r}")
    return TraceRequest(request_id=str(rid), ts=ts, tenant=tenant, user_id=user,
                        session_id=session, messages=messages, answer=answer, model=model,
                        origin=origin)


def import_openai_chat_log(
    src: str | Path, dest: str | Path, *, tenant: str = "default", default_user: str = "default"
) -> int:
    """OpenAI chat-log JSONL (``{"messages": [...], "user": ..., "created": <epoch>}`` per line,
    the assistant reply at the end optional) -> a replay trace at ``dest``; returns the count.

    A trailing reply becomes the recorded ``answer`` (``model`` from a ``model`` key) and leaves
    the request; the session is ``<user>-<UTC day>`` unless a ``session_id`` is given; rows are
    sorted stably by ``created``; ``request_id`` is the row's ``request_id`` / ``id`` or its line
    number. Every row is checked before anything is written: one bad line leaves ``dest`` as it
    was. (The log is held in memory to sort it.)"""
    src = Path(src)
    if not src.is_file():
        raise DatasetError(f"{src}: chat log not found", field="src")
    _format(Path(dest))
    rows = []
    seen: dict[str, str] = {}
    for origin, row in jsonl_rows(src):
        lineno = int(origin.rsplit(" ", 1)[1])
        req = _chat_row(row, origin, lineno, tenant, default_user)
        if req.request_id in seen:
            raise _error(origin, "request_id",
                         f"duplicate {req.request_id!r} (first at {seen[req.request_id]})")
        seen[req.request_id] = origin
        rows.append(req)
    rows.sort(key=lambda r: r.ts)  # stable: equal times keep log order
    return write_trace(rows, dest)
