"""Small helpers of the Milvus store: row -> Memory, value checks, the tenant-prefix scan filter,
delete results, the client's gRPC options, and a context that quiets pymilvus' logging of
expected failures."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from memroute.config.schema import is_server_uri
from memroute.errors import BackendUnavailable, ConfigError, InvalidRequest
from memroute.namespace import SEPARATOR, validate_tenant
from memroute.text.clip import clip_utf8, shorten_middle
from memroute.types import Memory, TurnPair

log = logging.getLogger(__name__)

# VARCHAR limits of the schema (bytes of UTF-8; Milvus servers count bytes).
MAX_TEXT = 8192
MAX_USER_ID = 128
MAX_SESSION_ID = 256
MAX_SOURCE_MODEL = 256
READ_BATCH = 1000  # rows per query-iterator page, and ids per lookup

# gRPC's "never" for a keepalive interval (INT_MAX ms).
NO_KEEPALIVE_MS = 2**31 - 1
# The client of a Milvus Lite file. pymilvus pings every 10 s, between calls too; Lite's
# in-process server is grpcio's with its defaults, which allow a ping only every 5 min during
# calls and none between them (2 h), and answer the third early ping with GOAWAY
# "too_many_pings" (grpc prints it as an error line; the client then doubles its interval). A
# loopback connection to a server in the same process has no dead peer to detect: no pings.
LITE_GRPC_OPTIONS = {
    "grpc.keepalive_time_ms": NO_KEEPALIVE_MS,
    "grpc.keepalive_permit_without_calls": 0,
}


def client_options(uri: str) -> dict[str, Any]:
    """Keyword arguments of ``MilvusClient`` for ``uri`` beyond the address and token: a Lite
    file's keepalive (:data:`LITE_GRPC_OPTIONS`); a server keeps pymilvus' 10 s pings, which
    Milvus servers permit and which find a dead connection behind a load balancer."""
    return {} if is_server_uri(uri) else {"grpc_options": dict(LITE_GRPC_OPTIONS)}


def turn_pair_schema(dim: int, text_params: dict[str, Any]) -> Any:
    """The collection's fields: one row per turn-pair, partitioned by (namespaced) user."""
    from pymilvus import DataType, MilvusClient

    schema = MilvusClient.create_schema(
        auto_id=False, enable_dynamic_field=False, partition_key_field="user_id"
    )
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("user_id", DataType.VARCHAR, max_length=MAX_USER_ID, is_partition_key=True)
    schema.add_field("text", DataType.VARCHAR, max_length=MAX_TEXT, **text_params)
    schema.add_field("session_id", DataType.VARCHAR, max_length=MAX_SESSION_ID)
    schema.add_field("turn_index", DataType.INT64)
    schema.add_field("session_time", DataType.INT64)
    schema.add_field("source_model", DataType.VARCHAR, max_length=MAX_SOURCE_MODEL)
    schema.add_field("created_at", DataType.DOUBLE)
    schema.add_field("superseded_by", DataType.INT64)  # 0: current
    schema.add_field("valid_until", DataType.INT64)  # session time it was superseded at
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dim)
    return schema


def memory_from_row(row: dict[str, Any], pk: Any) -> Memory:
    return Memory(
        id=int(pk),
        user_id=row["user_id"],
        text=row["text"],
        session_time=int(row["session_time"]),
        source_model=row.get("source_model", ""),
        created_at=float(row.get("created_at", 0.0)),
        session_id=row.get("session_id", ""),
        turn_index=int(row.get("turn_index", 0)),
        superseded_by=int(row.get("superseded_by") or 0),
        valid_until=int(row.get("valid_until") or 0),
    )


def stored_text(pair: TurnPair, max_bytes: int) -> str:
    """``pair.text()`` within the store's ``text`` VARCHAR. A longer pair (the API accepts more
    characters than the column holds bytes: emoji are 4 bytes each) is stored with the middle
    of its question, then of its answer, cut out, rather than refused and lost after its 200."""
    text = pair.text()
    over = len(text.encode("utf-8")) - max_bytes
    if over <= 0:
        return text
    user, answer = pair.user_text, pair.assistant_text
    for which in ("user", "answer"):
        current = user if which == "user" else answer
        size = len(current.encode("utf-8"))
        cut = shorten_middle(current, max(0, size - over))
        if which == "user":
            user = cut
        else:
            answer = cut
        text = replace(pair, user_text=user, assistant_text=answer).text()
        over = len(text.encode("utf-8")) - max_bytes
        if over <= 0:
            log.warning("a turn-pair of %d bytes is stored shortened to the store's %d",
                        len(pair.text().encode("utf-8")), max_bytes)
            return text
    return clip_utf8(text, max_bytes)


def check_varchar(value: object, max_bytes: int, field: str) -> None:
    if not isinstance(value, str):
        raise InvalidRequest(f"{field} must be a string", field=field)
    size = len(value.encode("utf-8"))
    if size > max_bytes:
        raise InvalidRequest(
            f"{field} is {size} bytes (UTF-8), the memory store holds at most {max_bytes}",
            field=field,
        )


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def tenant_scan_filter(tenant: str) -> tuple[str, str]:
    """``(expr, prefix)``: a ``like`` filter that matches *at least* every row of ``tenant``
    (``user_id`` starting with ``tenant:``), and the exact prefix the caller must check.

    The tenant alphabet (:data:`memroute.namespace.TENANT_RE`) has no quote, backslash, ``%`` or
    ``:``, so the literal cannot change the expression's structure. Its ``_`` is a ``like``
    wildcard (one character) and is left unescaped on purpose: the pattern then over-matches
    (``acme_x:%`` also matches ``acmeYx:...``) but never under-matches on any Milvus version,
    and the exact ``startswith(prefix)`` check drops the extra rows.
    """
    validate_tenant(tenant)
    prefix = f"{tenant}{SEPARATOR}"
    return f'user_id like "{prefix}%"', prefix


def delete_count(result: Any) -> int:
    """Rows deleted, from ``MilvusClient.delete``: Milvus Lite returns the deleted primary keys
    (a list; ``{}`` when none), a server ``{"delete_count": n}``."""
    if isinstance(result, dict):
        return int(result.get("delete_count", 0) or 0)
    if isinstance(result, (list, tuple)):
        return len(result)
    return int(getattr(result, "delete_count", 0) or 0)


@contextlib.contextmanager
def quiet_pymilvus(level: int = logging.CRITICAL) -> Iterator[None]:
    """pymilvus logs expected failures (the template probe) as errors with tracebacks."""
    loggers = [logging.getLogger(name) for name in ("pymilvus", "milvus_lite")]
    old = [lg.level for lg in loggers]
    for lg, lvl in zip(loggers, old):
        lg.setLevel(max(level, lvl))
    try:
        yield
    finally:
        for lg, lvl in zip(loggers, old):
            lg.setLevel(lvl)


COLLECTION_NOT_LOADED = 101  # Milvus' error code for a search on a released collection


class ReadBreaker:
    """After a read the server did not answer, further reads fail at once for ``pause_s``
    instead of each waiting for the timeout again: during an outage requests are answered
    without memory in milliseconds, not seconds. Health probes (``ping``) bypass it, so the
    store is seen answering again as soon as it does."""

    def __init__(self, pause_s: float) -> None:
        self.pause_s = pause_s
        self._until = 0.0

    def check(self) -> None:
        left = self._until - time.monotonic()
        if left > 0:
            raise BackendUnavailable(f"the memory store did not answer; not asked again for "
                                     f"{left:.1f} s", field="memory.uri")

    def trip(self) -> None:
        self._until = time.monotonic() + self.pause_s

    def reset(self) -> None:
        """The store answered (a health probe): reads go to it again now."""
        self._until = 0.0


def reloading(client: Any, collection: str, call: Callable[[], Any],
              breaker: ReadBreaker | None = None) -> Any:
    """``call()``, a read on the request path. When the collection was released (a restarted
    Milvus server keeps its collections unloaded) it is loaded again and the call retried once,
    instead of every search failing; a server that does not answer in time (or at all) is a
    :class:`BackendUnavailable`, which the Router answers without memory for the whole batch at
    once (no bisection, whose every call would wait for the timeout again)."""
    import grpc
    from pymilvus.exceptions import MilvusException

    if breaker is not None:
        breaker.check()
    try:
        try:
            return call()
        except MilvusException as exc:
            if getattr(exc, "code", None) != COLLECTION_NOT_LOADED:
                raise
            log.warning("collection %s is not loaded (a restarted Milvus server?); loading it "
                        "again", collection)
            client.load_collection(collection)
            return call()
    except grpc.RpcError as exc:
        unanswered = {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE}
        if exc.code() in unanswered:  # type: ignore[attr-defined]
            if breaker is not None:
                breaker.trip()
            raise BackendUnavailable(f"the memory store does not answer ({exc.code().name})",
                                     field="memory.uri") from exc  # type: ignore[attr-defined]
        raise


def query_pages(client: Any, collection: str, *, batch_size: int, fields: list[str],
                timeout_s: float, **kwargs: Any) -> Iterator[dict]:
    """Every row a filter matches, through pymilvus' query iterator, page by page."""
    # Lite has no mvcc timestamps and pymilvus warns about it on every iterator.
    with quiet_pymilvus(logging.ERROR):
        it = client.query_iterator(collection, batch_size=batch_size, output_fields=fields,
                                   timeout=timeout_s, **kwargs)
    try:
        while page := it.next():
            yield from page
    finally:
        it.close()


CONSISTENCY_LEVELS = ("Strong", "Session", "Bounded", "Eventually")


def read_consistency(level: str, server: bool) -> dict[str, Any]:
    """The request-path reads' ``consistency_level`` kwarg (``memory.read_consistency``): a
    server's Strong read waits for its next time tick (~200 ms); Lite has no ticks to wait for."""
    if level not in CONSISTENCY_LEVELS:
        raise ConfigError(f"read_consistency must be one of {', '.join(CONSISTENCY_LEVELS)}, "
                          f"got {level!r}", field="memory.read_consistency")
    return {"consistency_level": level} if server else {}
