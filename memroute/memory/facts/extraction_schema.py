"""The extraction schema and the JSON Schema of its output.

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
decoding to it); :func:`~memroute.memory.facts.extraction_parser.parse_extraction` checks it
again on every back end and refuses the whole output (``ExtractionError``) for any bad item:
nothing half-parsed is stored. The prompt that asks for it is
:mod:`memroute.memory.facts.extraction_prompt`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memroute.config.extraction import DEFAULT_FIELDS, check_extraction_fields
from memroute.memory.facts.keys import KEY_PATTERN, MAX_KEY_DESCRIPTION_CHARS, MAX_OPEN_KEY_CHARS
from memroute.memory.facts.types import EXPLICIT, INFERRED
from memroute.types import stable_id

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


__all__ = [
    "MAX_UNITS",
    "MAX_UNIT_CHARS",
    "OUTPUT_SOURCES",
    "ExtractedUnit",
    "ExtractionField",
    "ExtractionSchema",
    "json_schema",
]
