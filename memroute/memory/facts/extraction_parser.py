"""The strict parser of the model's extraction output: JSON in, checked facts and units out.

Every item is checked against the :mod:`~memroute.memory.facts.extraction_schema` again on every
back end (constrained decoding or not), and the whole output is refused
(:class:`ExtractionError`) for any bad item: nothing half-parsed is stored. With open keys a
proposed key that cannot be made valid drops that fact only (``ParsedExtraction.rejected``).
Kept apart from the schema: this is the checking of an answer, not the shape asked for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any

from memroute.errors import InvalidRequest, MemrouteError
from memroute.memory.facts.extraction_schema import (
    DESCRIPTION,
    ITEM_KEYS,
    MAX_FACTS,
    MAX_OUTPUT_VALUE_CHARS,
    MAX_UNIT_CHARS,
    MAX_UNITS,
    MIN_UNIT_CHARS,
    OUTPUT_KEYS,
    OUTPUT_SOURCES,
    UNIT_KEYS,
    ExtractedUnit,
    ExtractionField,
    ExtractionSchema,
)
from memroute.memory.facts.keys import MAX_KEY_DESCRIPTION_CHARS, KeyRejected, normalize_key
from memroute.memory.facts.types import MAX_VALUE_CHARS, TEMPORAL, FactInput, check_fact_input
from memroute.types import TurnPair

_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_FENCE_RE = re.compile(r"^```(?:json)?\s*\n?(?P<body>.*?)\n?```$", re.DOTALL)
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class ExtractionError(MemrouteError):
    """The model's extraction output is not a valid answer to the schema (nothing is stored)."""

    status = 502
    code = "extraction_error"


@dataclass(frozen=True)
class ParsedExtraction:
    facts: list[FactInput]
    units: list[ExtractedUnit]
    # open keys: each fact's value-free description ("" when none), parallel to ``facts``
    descriptions: tuple[str, ...] = ()
    rejected: tuple[str, ...] = ()  # open keys: why each dropped fact's key was refused


def _epoch_day(text: str, where: str) -> float:
    if not _DATE_RE.fullmatch(text):
        raise ExtractionError(f"{where}.valid_from must be YYYY-MM-DD or null, got {text[:20]!r}")
    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise ExtractionError(f"{where}.valid_from {text!r} is not a calendar date") from None
    return datetime(day.year, day.month, day.day, tzinfo=timezone.utc).timestamp()


def _json_object(text: str) -> Any:
    body = text.strip()
    fenced = _FENCE_RE.match(body)  # engines without constrained decoding like code fences
    if fenced:
        body = fenced["body"].strip()
    try:
        return json.loads(body)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ExtractionError(f"the output is not JSON: {exc}") from None


def parse_extraction(
    text: str, schema: ExtractionSchema, turns: Sequence[TurnPair]
) -> list[FactInput]:
    """The facts of a model output, in output order (:func:`parse_extraction_output` for the
    units too); :class:`ExtractionError` if anything in it is invalid."""
    return parse_extraction_output(text, schema, turns).facts


def parse_extraction_output(
    text: str, schema: ExtractionSchema, turns: Sequence[TurnPair]
) -> ParsedExtraction:
    """The facts and units of a model output, in output order; :class:`ExtractionError` if
    anything in it is invalid (the whole output is refused, never half-parsed). A missing
    ``units`` key is no units (an output of the facts-only schema)."""
    data = _json_object(text)
    if not isinstance(data, dict) or "facts" not in data or not set(data) <= set(OUTPUT_KEYS):
        raise ExtractionError('the output must be an object with the keys "facts" and "units"')
    facts, descriptions, rejected = _parse_facts(data["facts"], schema, turns)
    return ParsedExtraction(facts, _parse_units(data.get("units", []), turns),
                            tuple(descriptions), tuple(rejected))


def _turn_number(turn: object, where: str, turns: Sequence[TurnPair]) -> int:
    if isinstance(turn, bool) or not isinstance(turn, int) or not 0 <= turn < len(turns):
        raise ExtractionError(f"{where}.turn must be a turn number in [0, {len(turns) - 1}], "
                              f"got {str(turn)[:20]!r}")
    return turn


def _parse_units(items: Any, turns: Sequence[TurnPair]) -> list[ExtractedUnit]:
    if not isinstance(items, list):
        raise ExtractionError('"units" must be a list')
    if len(items) > MAX_UNITS:
        raise ExtractionError(f'"units" has {len(items)} items; at most {MAX_UNITS} are read')
    out = []
    for i, item in enumerate(items):
        where = f"units[{i}]"
        if not isinstance(item, dict) or set(item) != set(UNIT_KEYS):
            raise ExtractionError(f"{where} must be an object with exactly the keys "
                                  f"{', '.join(UNIT_KEYS)}")
        text = item["text"]
        if not isinstance(text, str):
            raise ExtractionError(f"{where}.text must be a string")
        text = " ".join(text.split())  # one line: newlines and runs of spaces carry nothing
        if not MIN_UNIT_CHARS <= len(text) <= MAX_UNIT_CHARS:
            raise ExtractionError(f"{where}.text has {len(text)} characters; it must have "
                                  f"{MIN_UNIT_CHARS}-{MAX_UNIT_CHARS}")
        if _CONTROL_RE.search(text):
            raise ExtractionError(f"{where}.text contains control characters")
        source = turns[_turn_number(item["turn"], where, turns)]
        out.append(ExtractedUnit(text, source.user_id, source.session_id, source.turn_index,
                                 int(source.session_time)))
    return out


def _description(item: dict, where: str) -> str:
    """An open-keys item's description, one line ("" if the item has none: a back end
    without constrained decoding may leave it out; the key alone is then embedded)."""
    text = item.get(DESCRIPTION, "")
    if not isinstance(text, str):
        raise ExtractionError(f"{where}.description must be a string")
    text = " ".join(text.split())
    if len(text) > MAX_KEY_DESCRIPTION_CHARS or _CONTROL_RE.search(text):
        raise ExtractionError(f"{where}.description must be one line of at most "
                              f"{MAX_KEY_DESCRIPTION_CHARS} characters")
    return text


def _parse_facts(items: Any, schema: ExtractionSchema, turns: Sequence[TurnPair]
                 ) -> tuple[list[FactInput], list[str], list[str]]:
    """The facts, their descriptions (open keys) and why each dropped fact's key was refused."""
    if not isinstance(items, list):
        raise ExtractionError('"facts" must be a list')
    if len(items) > MAX_FACTS:
        raise ExtractionError(f'"facts" has {len(items)} items; at most {MAX_FACTS} are read')
    out: list[FactInput] = []
    descriptions: list[str] = []
    rejected: list[str] = []
    allowed = {*ITEM_KEYS, DESCRIPTION} if schema.open_keys else set(ITEM_KEYS)
    for i, item in enumerate(items):
        where = f"facts[{i}]"
        if not isinstance(item, dict):
            raise ExtractionError(f"{where} must be an object")
        if not set(ITEM_KEYS) <= set(item) <= allowed:
            extra = sorted(set(item) - allowed)
            missing = sorted(set(ITEM_KEYS) - set(item))
            raise ExtractionError(f"{where} has unknown keys {extra}" if extra
                                  else f"{where} lacks {missing}")
        key, value, source = item["key"], item["value"], item["source"]
        description = _description(item, where) if schema.open_keys else ""
        if schema.open_keys:
            if not isinstance(key, str):
                raise ExtractionError(f"{where}.key must be a string")
            try:
                key = normalize_key(key)
            except KeyRejected as exc:  # this fact only: the rest of the output stands
                rejected.append(f"{where}: {exc.message}")
                continue
            spec = schema.field(key) or ExtractionField(key, TEMPORAL, description)
        else:
            spec = schema.field(key) if isinstance(key, str) else None
        if spec is None:
            raise ExtractionError(f"{where}.key {str(key)[:40]!r} is not a field of the schema")
        if not isinstance(value, str) or not value.strip():
            raise ExtractionError(f"{where}.value must be a non-empty string")
        if len(value) > min(MAX_OUTPUT_VALUE_CHARS, MAX_VALUE_CHARS):
            raise ExtractionError(f"{where}.value has {len(value)} characters; at most "
                                  f"{MAX_OUTPUT_VALUE_CHARS}")
        if source not in OUTPUT_SOURCES:
            raise ExtractionError(f"{where}.source must be one of {', '.join(OUTPUT_SOURCES)}, "
                                  f"got {str(source)[:20]!r}")
        turn = _turn_number(item["turn"], where, turns)
        raw_from = item["valid_from"]
        if raw_from is None:
            valid_from = float(turns[turn].session_time)
        elif isinstance(raw_from, str):
            valid_from = _epoch_day(raw_from, where)
        else:
            raise ExtractionError(f"{where}.valid_from must be YYYY-MM-DD or null")
        fact = FactInput(key=spec.name, value=value, category=spec.category, source=source,
                         valid_from=valid_from, turn_id=turns[turn].id)
        try:
            out.append(check_fact_input(fact))  # the store's own checks, before any write
        except InvalidRequest as exc:
            raise ExtractionError(f"{where}: {exc}") from None
        descriptions.append(description)
    return out, descriptions, rejected


__all__ = ["ExtractionError", "ParsedExtraction", "parse_extraction", "parse_extraction_output"]
