"""The extraction schema, its prompt, the JSON Schema of its output and the strict parser.

The small model reads the conversation (turns numbered 0.., each with its session date) and
answers with one JSON object::

    {"facts": [{"key": "user.budget", "value": "80", "source": "explicit",
                "valid_from": "2023-05-08" | null, "turn": 3}],
     "units": [{"text": "On 8 May 2023 Alice set her trip budget to 80 dollars a day.",
                "turn": 3}]}

``key`` is one of the schema's fields (the entity key the fact store files it under; its
category comes from the schema, never from the model), ``source`` is ``explicit`` (the user
said it) or ``inferred`` (concluded from what they said), ``valid_from`` the day it became
true when the conversation says so (else the turn's session time) and ``turn`` the number of
the turn it came from (its ``TurnPair.id`` becomes the fact's ``turn_id``).

With open keys (``ExtractionSchema.open_keys``, ``extraction.keys=open``) ``key`` may also be a
key the model proposes (``pet.rabbit.name``), and each fact carries ``description``: what the
fact is, without its value ("the name of the user's pet rabbit"). A proposed key is normalised
(:func:`memroute.memory.facts.keys.normalize_key`); one that cannot be made valid drops that
fact only, with its reason (``ParsedExtraction.rejected``), and the extractor maps the rest
onto the user's keys (:class:`memroute.memory.facts.keys.KeyCanonicalizer`).

:func:`json_schema` is that shape as a JSON Schema with the keys enumerated (vLLM constrains
decoding to it); :func:`parse_extraction` checks it again on every back end and refuses the
whole output (:class:`ExtractionError`) for any bad item: nothing half-parsed is stored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any

from memroute.config.extraction import DEFAULT_FIELDS, check_extraction_fields
from memroute.errors import InvalidRequest, MemrouteError
from memroute.memory.facts.keys import (
    KEY_PATTERN,
    MAX_KEY_DESCRIPTION_CHARS,
    MAX_OPEN_KEY_CHARS,
    KeyRejected,
    normalize_key,
)
from memroute.memory.facts.types import (
    EXPLICIT,
    INFERRED,
    MAX_VALUE_CHARS,
    TEMPORAL,
    FactInput,
    check_fact_input,
)
from memroute.types import Message, TurnPair, format_session_date, stable_id

OUTPUT_SOURCES = (EXPLICIT, INFERRED)  # "confirmed" is the user's answer to a question, not ours
ITEM_KEYS = ("key", "value", "source", "valid_from", "turn")
DESCRIPTION = "description"  # open keys: what the fact is, without its value
UNIT_KEYS = ("text", "turn")
OUTPUT_KEYS = ("facts", "units")
MAX_UNITS = 32  # per extraction output
MAX_UNIT_CHARS = 300  # one sentence, not a summary
MIN_UNIT_CHARS = 8  # shorter is no self-contained sentence ("Yes.")
MAX_FACTS = 64  # per extraction output
FACTS_PER_TURN = 2  # the constrained output's bound on facts per turn read
UNITS_PER_TURN = 2  # and on units per turn read
MAX_OUTPUT_VALUE_CHARS = 300  # an extracted value is a short phrase, not a paragraph
ASSISTANT_CHARS = 300  # assistant replies are clipped in the prompt: facts are the user's
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_FENCE_RE = re.compile(r"^```(?:json)?\s*\n?(?P<body>.*?)\n?```$", re.DOTALL)
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class ExtractionError(MemrouteError):
    """The model's extraction output is not a valid answer to the schema (nothing is stored)."""

    status = 502
    code = "extraction_error"


@dataclass(frozen=True)
class ExtractedUnit:
    """An atomic context unit and the turn it came from (its user, session and time)."""

    text: str
    user_id: str
    session_id: str
    turn_index: int
    session_time: int

    @property
    def turn_id(self) -> int:
        """The source turn-pair's id (``TurnPair.id``)."""
        return stable_id(self.user_id, self.session_id, self.turn_index)


@dataclass(frozen=True)
class ParsedExtraction:
    facts: list[FactInput]
    units: list[ExtractedUnit]
    # open keys: each fact's value-free description ("" when none), parallel to ``facts``
    descriptions: tuple[str, ...] = ()
    rejected: tuple[str, ...] = ()  # open keys: why each dropped fact's key was refused


@dataclass(frozen=True)
class ExtractionField:
    """One fact the model looks for: ``name`` is the entity key (``user.budget``)."""

    name: str
    category: str
    description: str = ""


@dataclass(frozen=True)
class ExtractionSchema:
    """A per-agent extraction schema: the fields, in prompt order (names unique); ``units``:
    whether the output also holds atomic context units (off: facts only, a shorter reply)."""

    fields: tuple[ExtractionField, ...]
    units: bool = True
    open_keys: bool = False  # the model may propose keys beyond ``fields`` (with a description)

    def __post_init__(self) -> None:
        check_extraction_fields(
            [{"field": f.name, "category": f.category, "description": f.description}
             for f in self.fields], prefix="fields")

    @classmethod
    def from_config(cls, fields: Sequence[Mapping[str, Any]] = DEFAULT_FIELDS, *,
                    units: bool = True, open_keys: bool = False) -> ExtractionSchema:
        """From config's ``[{field, category, description}, ...]`` (:class:`ConfigError`
        names a bad entry); ``open_keys``: ``extraction.keys == "open"``."""
        checked = check_extraction_fields(fields)
        return cls(tuple(ExtractionField(f["field"], f["category"], f["description"])
                         for f in checked), units=units, open_keys=open_keys)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def field(self, key: str) -> ExtractionField | None:
        return next((f for f in self.fields if f.name == key), None)


def json_schema(schema: ExtractionSchema, n_turns: int | None = None) -> dict[str, Any]:
    """The JSON Schema of an extraction output; with ``n_turns``, ``turn`` is bounded too."""
    turn: dict[str, Any] = {"type": "integer", "minimum": 0}
    if n_turns is not None:
        turn["maximum"] = max(int(n_turns) - 1, 0)
    key: dict[str, Any] = {"type": "string", "enum": list(schema.keys)}
    described: dict[str, Any] = {}
    if schema.open_keys:  # described first: the model says what the fact is, then names it
        key = {"type": "string", "pattern": KEY_PATTERN, "minLength": 1,
               "maxLength": MAX_OPEN_KEY_CHARS}
        described = {DESCRIPTION: {"type": "string", "minLength": 1,
                                   "maxLength": MAX_KEY_DESCRIPTION_CHARS}}
    item = {
        "type": "object",
        "properties": {
            **described,
            "key": key,
            "value": {"type": "string", "minLength": 1, "maxLength": MAX_OUTPUT_VALUE_CHARS},
            "source": {"type": "string", "enum": list(OUTPUT_SOURCES)},
            "valid_from": {"anyOf": [
                {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"}, {"type": "null"}]},
            "turn": turn,
        },
        "required": [*described, *ITEM_KEYS],
        "additionalProperties": False,
    }
    unit = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": MIN_UNIT_CHARS, "maxLength": MAX_UNIT_CHARS},
            "turn": dict(turn),
        },
        "required": list(UNIT_KEYS),
        "additionalProperties": False,
    }
    # A small model under a grammar can repeat items until the token budget runs out; two
    # facts a turn is more than a conversation states and keeps the reply bounded.
    most = MAX_FACTS if n_turns is None else max(1, min(MAX_FACTS, FACTS_PER_TURN * int(n_turns)))
    properties: dict[str, Any] = {"facts": {"type": "array", "items": item, "maxItems": most}}
    if schema.units:
        units = (MAX_UNITS if n_turns is None
                 else max(1, min(MAX_UNITS, UNITS_PER_TURN * int(n_turns))))
        properties["units"] = {"type": "array", "items": unit, "maxItems": units}
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}


def _iso(epoch_s: int | float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).date().isoformat()


def system_prompt(schema: ExtractionSchema) -> str:
    described = '"description": ..., ' if schema.open_keys else ""
    lines = [
        "You extract facts about the user from a conversation, for a personal assistant's "
        "memory. Answer with one JSON object and nothing else:",
        f'{{"facts": [{{{described}"key": ..., "value": ..., "source": ..., "valid_from": ..., '
        '"turn": ...}]' + (',\n "units": [{"text": ..., "turn": ...}]}' if schema.units else "}"),
        "",
        ("Known keys (use one when the fact is exactly what it says; skip keys the conversation "
         "does not mention):" if schema.open_keys else
         "The keys you may use (one fact per key and value; skip keys the conversation does "
         "not mention):"),
    ]
    lines += [f"- {f.name}: {f.description}" if f.description else f"- {f.name}"
              for f in schema.fields]
    lines += ["", "Rules:"]
    lines += [
        '- "description": what the fact is, without its value ("the name of the user\'s pet '
        'rabbit", "the caterer the user chose for the wedding").',
        '- "key": a known key when the fact is exactly that one; otherwise a new short key of '
        'lowercase words joined by "_" and ".", general to specific ("pet.rabbit.name", '
        '"event.caterer", "building.gate_code"). Different things get different keys: a '
        "pet's name is not user.name, and two pets are two keys.",
    ] if schema.open_keys else ['- "key": one of the keys above, exactly as written.']
    lines += [
        '- "value": the value in a few words, as the user gave it (a number stays a number: '
        '"80", not "eighty dollars a month" unless they said so).',
        '- "source": "explicit" when the user said it themselves; "inferred" when you '
        "concluded it from what they said.",
        '- "valid_from": the day it became true as "YYYY-MM-DD" when the conversation says '
        "when (\"since March 2021\": \"2021-03-01\"), else null.",
        '- "turn": the number of the turn the fact comes from.',
        "- When the user corrects or changes a value, give each value with its own turn; the "
        "later one replaces the earlier.",
        "- Only facts about the user (not the assistant's suggestions or general knowledge).",
    ]
    if not schema.units:
        return "\n".join([*lines, '- Nothing to extract: {"facts": []}.'])
    lines += [
        "",
        '"units": what the user said that is worth remembering, each as one short sentence that '
        "stands alone, read months later without the conversation:",
        "- Say who (the user's name if known, else \"The user\"), what, and when: the date of "
        "the turn it comes from, written out (\"On 8 May 2023\").",
        "- No pronouns (he, she, it, they, this, that): name the person or thing.",
        "- No relative dates (yesterday, last week, next month, tomorrow): turn them into "
        "dates from the turn's date.",
        f"- At most {MAX_UNITS} units, each under {MAX_UNIT_CHARS} characters; "
        '"turn": the number of the turn it comes from.',
        '- Nothing to extract: {"facts": [], "units": []}.',
    ]
    return "\n".join(lines)


def conversation_text(turns: Sequence[TurnPair], *, assistant_chars: int = ASSISTANT_CHARS) -> str:
    """The turns, numbered from 0, each with its session date; assistant replies clipped."""
    out = []
    for i, t in enumerate(turns):
        reply = t.assistant_text.strip()
        if len(reply) > assistant_chars:
            reply = reply[:assistant_chars].rstrip() + " ..."
        out.append(f"Turn {i} ({format_session_date(t.session_time)}, "
                   f"{_iso(t.session_time)})\nUser: {t.user_text.strip()}\nAssistant: {reply}")
    return "\n\n".join(out)


def extraction_prompt(
    schema: ExtractionSchema, turns: Sequence[TurnPair], *, assistant_chars: int = ASSISTANT_CHARS
) -> list[Message]:
    """The system instructions and the conversation, as the chat the model answers."""
    conversation = conversation_text(turns, assistant_chars=assistant_chars)
    return [
        Message("system", system_prompt(schema)),
        Message("user", f"Conversation:\n\n{conversation}\n\nExtract the facts about the user "
                        + ("and the units " if schema.units else "") + "as the JSON object."),
    ]


def retry_prompt(messages: Sequence[Message], output: str, error: str) -> list[Message]:
    """``messages`` plus the refused output and why, asking once more (the retry)."""
    return [*messages, Message("assistant", output[:2000]),
            Message("user", f"That output was invalid: {error[:300]}. Answer again with only "
                            "the JSON object, following the rules.")]


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


__all__ = [
    "MAX_UNITS",
    "MAX_UNIT_CHARS",
    "OUTPUT_SOURCES",
    "ExtractedUnit",
    "ExtractionError",
    "ExtractionField",
    "ExtractionSchema",
    "ParsedExtraction",
    "conversation_text",
    "extraction_prompt",
    "json_schema",
    "parse_extraction",
    "parse_extraction_output",
    "retry_prompt",
    "system_prompt",
]
