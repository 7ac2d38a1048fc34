"""Fact extraction settings (:mod:`memroute.memory.facts.extraction`), independent of ``facts``.

``fields`` is the per-agent extraction schema: a list of ``{field, category, description}``.
``field`` is the entity key the fact is stored under (dotted lowercase words, ``user.budget``),
``category`` how its value lives in the fact store (``profile``: last write wins; ``temporal``:
superseded, never deleted; ``ephemeral``: temporal and hidden after the store's TTL) and
``description`` what the small model is told to look for. Extraction runs in the background lane
once a user's unextracted conversation exceeds ``threshold_tokens``.

``keys``: ``open`` (the default) lets the model propose a key of its own for a fact no field
names (``pet.rabbit.name``, with a value-free description of the fact); the fields are then the
keys it is shown first, and a proposed key is mapped to the user's most similar existing key
when the cosine of their embedded texts is at least ``key_match_threshold``
(:mod:`memroute.memory.facts.keys`; measured in bench/bench_key_match.py), else kept as a new
key (category ``temporal``). ``fixed``: only the fields' keys, enumerated in the output schema.

Config stays below the stores: the category names and the key shape are repeated here (the fact
store checks them again on every write).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from memroute.errors import ConfigError

CATEGORIES = ("profile", "temporal", "ephemeral")  # = memroute.memory.facts.CATEGORIES
FIELD_KEYS = ("field", "category", "description")
KEY_RE = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)*$")  # = memroute.memory.facts.types.KEY_RE
MAX_KEY_CHARS = 128
MAX_DESCRIPTION_CHARS = 500
MAX_FIELDS = 64  # every field is listed in each extraction prompt and enumerated in its schema
KEY_MODES = ("open", "fixed")
# MiniLM on "key words: description": no false merge on the labelled pairs from 0.83 (the closest
# different pair, pet.dog.name ~ pet.cat.name, is 0.824), 13 of 22 same pairs merged at 0.85
# (bench/bench_key_match.py, docs/BENCHMARKS.md)
DEFAULT_KEY_MATCH_THRESHOLD = 0.85


def _f(name: str, category: str, description: str) -> dict[str, str]:
    return {"field": name, "category": category, "description": description}


# A personal assistant's default: what the user is, where and with whom they live, what they
# plan. Corrections of temporal fields supersede the old value (kept in the timeline).
DEFAULT_FIELDS: tuple[dict[str, str], ...] = (
    _f("user.name", "profile", "the name the user goes by"),
    _f("user.birthday", "profile", "the user's date of birth"),
    _f("user.diet", "profile", "what the user eats or avoids (vegetarian, allergies...)"),
    _f("user.language", "profile", "the language the user prefers to be answered in"),
    _f("user.location", "temporal", "the city or country the user lives in now"),
    _f("user.employer", "temporal", "the company or organisation the user works for"),
    _f("user.job", "temporal", "the user's job title or occupation"),
    _f("user.budget", "temporal", "the budget the user states for what they are planning"),
    _f("user.partner", "temporal", "the name of the user's partner or spouse"),
    _f("user.pet", "temporal", "the user's pet (kind and name)"),
    _f("user.plan", "ephemeral", "what the user plans to do soon (a trip, an event, a task)"),
)


@dataclass
class ExtractionConfig:
    enabled: bool = True  # the served app's background lane (memroute/memory/facts/lane.py)
    threshold_tokens: int = 4000  # extract once a user's unextracted conversation exceeds this
    max_tokens: int = 1024  # the extraction reply's budget (the JSON object: facts and units)
    retries: int = 1  # invalid output is retried this often, then logged and skipped
    # keep a fact only if its source turn states the value, under one key (facts/grounding.py)
    grounding: bool = True
    tier: int = 0  # the cascade tier that extracts (0: the cheapest)
    # open: the model may propose keys beyond `fields` (canonicalised per user); fixed: `fields` only
    keys: str = "open"
    # open keys: a proposed key joins the user's existing key whose text is at least this similar
    key_match_threshold: float = DEFAULT_KEY_MATCH_THRESHOLD
    fields: list[dict[str, str]] = field(default_factory=lambda: [dict(f) for f in DEFAULT_FIELDS])


def _int_in(cfg: ExtractionConfig, name: str, low: int, high: int) -> None:
    value = getattr(cfg, name)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{name} must be an integer in [{low}, {high}], got {value!r}",
                          field=f"extraction.{name}")


def check_extraction_fields(fields: Any, *, prefix: str = "extraction.fields") -> list[dict]:
    """The fields as plain ``{field, category, description}`` dicts, or :class:`ConfigError`
    naming the bad entry (``extraction.fields[2].category``)."""
    if isinstance(fields, (str, bytes)) or not hasattr(fields, "__iter__"):
        raise ConfigError("fields must be a list of {field, category, description}",
                          field=prefix)
    out: list[dict] = []
    seen: set[str] = set()
    for i, raw in enumerate(fields):
        where = f"{prefix}[{i}]"
        if not hasattr(raw, "keys") or not hasattr(raw, "get"):
            raise ConfigError(f"{where} must be a mapping with keys {', '.join(FIELD_KEYS)}",
                              field=where)
        unknown = sorted(str(k) for k in raw.keys() if k not in FIELD_KEYS)
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]} is not a field key. Available: "
                              f"{', '.join(FIELD_KEYS)}", field=f"{where}.{unknown[0]}")
        name, category = raw.get("field"), raw.get("category")
        description = raw.get("description", "")
        if not isinstance(name, str) or not KEY_RE.fullmatch(name) or len(name) > MAX_KEY_CHARS:
            raise ConfigError(f"{where}.field must be dotted lowercase words of a-z 0-9 _ "
                              f"(like user.budget), got {name!r}", field=f"{where}.field")
        if name in seen:
            raise ConfigError(f"{where}.field {name!r} is listed twice", field=f"{where}.field")
        seen.add(name)
        if category not in CATEGORIES:
            raise ConfigError(f"{where}.category must be one of {', '.join(CATEGORIES)}, got "
                              f"{category!r}", field=f"{where}.category")
        if not isinstance(description, str) or len(description) > MAX_DESCRIPTION_CHARS:
            raise ConfigError(f"{where}.description must be a string of at most "
                              f"{MAX_DESCRIPTION_CHARS} characters", field=f"{where}.description")
        out.append({"field": name, "category": category, "description": description.strip()})
    if not out:
        raise ConfigError("fields must list at least one field", field=prefix)
    if len(out) > MAX_FIELDS:
        raise ConfigError(f"fields lists {len(out)} fields; at most {MAX_FIELDS} fit",
                          field=prefix)
    return out


def check_extraction_config(cfg: ExtractionConfig) -> ExtractionConfig:
    """Raise :class:`ConfigError` naming the bad ``extraction.*`` field; return ``cfg``."""
    _int_in(cfg, "threshold_tokens", 1, 10_000_000)
    _int_in(cfg, "max_tokens", 16, 32_768)
    _int_in(cfg, "retries", 0, 5)
    _int_in(cfg, "tier", 0, 63)
    if not isinstance(cfg.grounding, bool):
        raise ConfigError(f"grounding must be true or false, got {cfg.grounding!r}",
                          field="extraction.grounding")
    if cfg.keys not in KEY_MODES:
        raise ConfigError(f"keys must be one of {', '.join(KEY_MODES)}, got {cfg.keys!r}",
                          field="extraction.keys")
    t = cfg.key_match_threshold
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 < t <= 1.0:
        raise ConfigError(f"key_match_threshold must be a cosine in (0, 1], got {t!r}",
                          field="extraction.key_match_threshold")
    check_extraction_fields(cfg.fields)
    return cfg


__all__ = [
    "DEFAULT_FIELDS",
    "DEFAULT_KEY_MATCH_THRESHOLD",
    "KEY_MODES",
    "ExtractionConfig",
    "check_extraction_config",
    "check_extraction_fields",
]
