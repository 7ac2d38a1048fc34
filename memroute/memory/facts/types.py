"""The fact store's values: :class:`FactInput` (what extraction asserts), :class:`Fact` (a stored
row), the category / source / status names, and the input checks (each error names its field)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import NamedTuple

from memroute.errors import InvalidRequest, MemrouteError

# category: how a key's value lives. profile: last write wins; temporal: bi-temporal
# supersession; ephemeral: temporal, and hidden from active reads once expires_at has passed.
PROFILE, TEMPORAL, EPHEMERAL = "profile", "temporal", "ephemeral"
CATEGORIES = (PROFILE, TEMPORAL, EPHEMERAL)
# source: how the fact was obtained (the design's confidence hierarchy)
EXPLICIT, CONFIRMED, INFERRED = "explicit", "confirmed", "inferred"
SOURCES = (EXPLICIT, CONFIRMED, INFERRED)
# A restatement of the active value from a higher rank upgrades it (see FactStore.assert_fact).
SOURCE_RANK = {INFERRED: 0, CONFIRMED: 1, EXPLICIT: 1}
# status: active (the current value; at most one per user and key), superseded (replaced by
# superseded_by), retracted (the user said it is wrong). Rows are never deleted but by erasure.
ACTIVE, SUPERSEDED, RETRACTED = "active", "superseded", "retracted"
STATUSES = (ACTIVE, SUPERSEDED, RETRACTED)

KEY_RE = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)*$")
MAX_KEY_CHARS = 128
MAX_VALUE_CHARS = 4096
MAX_TURN_ID = 2**63 - 1


class FactStoreError(MemrouteError):
    """The fact database could not be read or written (server down, disk full, locked too long)."""

    status = 500
    code = "fact_store_error"


class UserErased(MemrouteError):
    """The user (or tenant) was erased after a write began to be prepared: nothing written."""

    status = 409
    code = "user_erased"


@dataclass(frozen=True)
class FactInput:
    """One extracted fact. ``valid_from`` is world time (when it became true: from the
    conversation, else the turn's time); ``None`` means the store's ``now``."""

    key: str  # the entity key, stable per fact type: "user.budget"
    value: str
    category: str = TEMPORAL
    source: str = EXPLICIT
    valid_from: float | None = None
    turn_id: int | None = None  # the TurnPair.id the fact came from


class Fact(NamedTuple):
    """A stored fact (every time is float epoch seconds). A named tuple: session start builds
    a thousand of them per read, several times faster than a frozen dataclass.

    World time: ``valid_from`` .. ``valid_until`` (``None`` while active), and ``expires_at``
    (ephemeral only: ``valid_from + ttl``). Transaction time: ``recorded_at`` (ingested),
    ``ended_at`` (when the store recorded its end: superseded or retracted) and
    ``retracted_at``. ``superseded_by`` is the id of the row that replaced it.
    """

    id: int
    user_id: str
    key: str
    value: str
    category: str
    source: str
    status: str
    valid_from: float
    valid_until: float | None
    recorded_at: float
    ended_at: float | None
    expires_at: float | None
    retracted_at: float | None
    superseded_by: int | None
    turn_id: int | None

    def visible(self, now: float) -> bool:
        """Whether an active read at ``now`` returns it (active and not expired)."""
        return self.status == ACTIVE and (self.expires_at is None or self.expires_at > now)


FACT_FIELDS = Fact._fields


def _bad(field: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"{field} {why}", field=field)


def check_time(value: object, field: str) -> float:
    """A finite epoch time in seconds (an int or float, not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(field, f"must be a finite number of epoch seconds, got {value!r}")
    return float(value)


def check_key(key: object) -> str:
    if not isinstance(key, str) or not KEY_RE.fullmatch(key) or len(key) > MAX_KEY_CHARS:
        shown = key[:40] if isinstance(key, str) else type(key).__name__
        raise _bad("key", f"{shown!r} is invalid: use dotted lowercase words of a-z 0-9 _ "
                          f"(like user.budget), at most {MAX_KEY_CHARS} characters")
    return key


def check_fact_input(fact: object) -> FactInput:
    """``fact`` with its value stripped of outer whitespace, or :class:`InvalidRequest`."""
    if not isinstance(fact, FactInput):
        raise _bad("fact", f"must be a FactInput, got {type(fact).__name__}")
    check_key(fact.key)
    value = fact.value
    if not isinstance(value, str):
        raise _bad("value", f"must be a string, got {type(value).__name__}")
    value = value.strip()
    if not value:
        raise _bad("value", "must not be empty")
    if len(value) > MAX_VALUE_CHARS:
        raise _bad("value", f"has {len(value)} characters; at most {MAX_VALUE_CHARS} fit")
    if "\x00" in value:  # PostgreSQL text cannot hold NUL: refuse it on both back ends
        raise _bad("value", "must not contain NUL characters")
    if fact.category not in CATEGORIES:
        raise _bad("category", f"{fact.category!r} is not one of {', '.join(CATEGORIES)}")
    if fact.source not in SOURCES:
        raise _bad("source", f"{fact.source!r} is not one of {', '.join(SOURCES)}")
    if fact.valid_from is not None:
        check_time(fact.valid_from, "valid_from")
    turn = fact.turn_id
    if turn is not None and (
        isinstance(turn, bool) or not isinstance(turn, int) or not 0 <= turn <= MAX_TURN_ID
    ):
        raise _bad("turn_id",
                   f"must be a non-negative 64-bit integer (a TurnPair.id), got {turn!r}")
    return replace(fact, value=value) if value != fact.value else fact


def check_fact_id(fact_id: object) -> int:
    if isinstance(fact_id, bool) or not isinstance(fact_id, int):
        raise _bad("fact_id", f"must be an integer, got {type(fact_id).__name__}")
    return fact_id


__all__ = [
    "ACTIVE",
    "CATEGORIES",
    "CONFIRMED",
    "EPHEMERAL",
    "EXPLICIT",
    "FACT_FIELDS",
    "INFERRED",
    "PROFILE",
    "RETRACTED",
    "SOURCES",
    "STATUSES",
    "SUPERSEDED",
    "TEMPORAL",
    "Fact",
    "FactInput",
    "FactStoreError",
    "UserErased",
    "check_fact_id",
    "check_fact_input",
    "check_key",
    "check_time",
]
