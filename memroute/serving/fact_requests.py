"""The JSON bodies and path values of the memory endpoints (``/v1/memory/facts``,
``/v1/memory/turns``, ``/v1/memory/search``), checked into the stores' inputs with a 400 naming the field; the stores
check the values themselves."""

from __future__ import annotations

import time
from typing import Any

from memroute.api.messages import check_text, json_type
from memroute.errors import InvalidRequest
from memroute.memory.facts import EXPLICIT, TEMPORAL, FactInput
from memroute.memory.search import check_query
from memroute.types import TurnPair, stable_id

MAX_TURNS = 100  # turn-pairs per append request
TURN_FIELDS = ("user", "assistant", "session_id", "time")

FIELDS = ("user", "key", "value", "category", "source", "valid_from")
SEARCH_FIELDS = ("user", "query", "top_k")
DEFAULT_TOP_K = 5


def fact_input(body: Any) -> FactInput:
    """``{"user", "key", "value", "category"?, "source"?, "valid_from"?}`` (``user`` is read by
    the caller for the namespace); ``valid_from``: epoch seconds, or absent for now."""
    if not isinstance(body, dict):
        raise InvalidRequest(f"the body must be a JSON object, got {json_type(body)}", field="body")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise InvalidRequest(f"{unknown[0]} is not a field of a fact; use {', '.join(FIELDS)}",
                             field=unknown[0])
    for name in ("key", "value", "category", "source"):
        if name in body and not isinstance(body[name], str):
            raise InvalidRequest(f"{name} must be a string, got {json_type(body[name])}", field=name)
    for name in ("key", "value"):
        if name not in body:
            raise InvalidRequest(f"{name} is required", field=name)
    valid_from = body.get("valid_from")
    if valid_from is not None and (isinstance(valid_from, bool)
                                   or not isinstance(valid_from, (int, float))):
        raise InvalidRequest("valid_from must be epoch seconds (a number) or null",
                             field="valid_from")
    return FactInput(key=body["key"], value=body["value"],
                     category=body.get("category", TEMPORAL), source=body.get("source", EXPLICIT),
                     valid_from=None if valid_from is None else float(valid_from))


def fact_id(text: str) -> int:
    """A fact id from the path: decimal digits (ids are sent as strings)."""
    if not text.isdigit() or len(text) > 19:
        raise InvalidRequest(f"fact id must be decimal digits, got {text[:24]!r}", field="fact_id")
    return int(text)


def turn_pairs(body: Any, user_id: str, *, max_chars: int, clock: Any = time.time) -> list[TurnPair]:
    """``{"user": <name>, "turns": [{"user": text, "assistant": text, "session_id"?, "time"?}]}``
    -> the turn-pairs to journal (ids from user, session and text: a retried append replaces,
    never duplicates). ``max_chars``: the API's limit on message characters, for all turns."""
    turns = body.get("turns") if isinstance(body, dict) else None
    if not isinstance(turns, list) or not turns:
        raise InvalidRequest("turns must be a non-empty array of {user, assistant}", field="turns")
    if len(turns) > MAX_TURNS:
        raise InvalidRequest(f"turns takes at most {MAX_TURNS} turn-pairs", field="turns")
    now, out, total = clock(), [], 0
    for i, t in enumerate(turns):
        path = f"turns[{i}]"
        if not isinstance(t, dict):
            raise InvalidRequest(f"{path} must be an object", field=path)
        unknown = sorted(set(t) - set(TURN_FIELDS))
        if unknown:
            raise InvalidRequest(f"{path}.{unknown[0]} is not a field; use {', '.join(TURN_FIELDS)}",
                                 field=f"{path}.{unknown[0]}")
        texts = []
        for name in ("user", "assistant"):
            value = t.get(name)
            if not isinstance(value, str) or not value.strip():
                raise InvalidRequest(f"{path}.{name} must be a non-empty string",
                                     field=f"{path}.{name}")
            texts.append(check_text(value, f"{path}.{name}"))
            total += len(value)
        session = t.get("session_id", "appended")
        if not isinstance(session, str) or not 0 < len(session) <= 128:
            raise InvalidRequest(f"{path}.session_id must be a string of 1-128 characters",
                                 field=f"{path}.session_id")
        at = t.get("time", now)
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not 0 <= at < 2**40:
            raise InvalidRequest(f"{path}.time must be epoch seconds", field=f"{path}.time")
        out.append(TurnPair(user_id=user_id, session_id=check_text(session, f"{path}.session_id"),
                            turn_index=stable_id(*texts, int(at)), user_text=texts[0],
                            assistant_text=texts[1], session_time=int(at),
                            # a microsecond apart: the list's order is the order they were
                            # said in (supersession and the timeline read it)
                            source_model="client", created_at=now + len(out) * 1e-6))
    if total > max_chars:
        raise InvalidRequest(f"turns hold {total} characters; the limit is {max_chars}", field="turns")
    return out


def search_request(body: Any, *, max_chars: int) -> tuple[str, int]:
    """``{"user"?, "query", "top_k"?}`` -> (query, top_k); ``user`` is read by the caller."""
    if not isinstance(body, dict):
        raise InvalidRequest(f"the body must be a JSON object, got {json_type(body)}", field="body")
    unknown = sorted(set(body) - set(SEARCH_FIELDS))
    if unknown:
        raise InvalidRequest(f"{unknown[0]} is not a field of a memory search; use "
                             f"{', '.join(SEARCH_FIELDS)}", field=unknown[0])
    if "query" not in body:
        raise InvalidRequest("query is required", field="query")
    return check_query(body["query"], body.get("top_k", DEFAULT_TOP_K), max_chars)
