"""The JSON bodies and path values of the fact endpoints (``/v1/memory/facts``), checked into the
fact store's inputs with a 400 naming the field; the store checks the values themselves."""

from __future__ import annotations

from typing import Any

from memroute.api.messages import json_type
from memroute.errors import InvalidRequest
from memroute.memory.facts import EXPLICIT, TEMPORAL, FactInput

FIELDS = ("user", "key", "value", "category", "source", "valid_from")


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
