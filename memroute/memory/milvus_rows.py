"""Small helpers of the Milvus store: row -> Memory, value checks, the tenant-prefix scan filter,
delete results, and a context that quiets pymilvus' logging of expected failures."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from memroute.errors import InvalidRequest
from memroute.namespace import SEPARATOR, validate_tenant
from memroute.text.clip import clip_utf8, shorten_middle
from memroute.types import Memory, TurnPair

log = logging.getLogger(__name__)


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
