"""What the journal hands out and takes in, whatever its database: the records, its error, and
the argument checks every back end applies alike (so a bad call fails the same way on both)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memroute.errors import InvalidRequest, MemrouteError
from memroute.types import TurnPair

MAX_ACTOR_CHARS = 256
MAX_OWNER_CHARS = 200
MAX_LEASE_S = 86400.0
GATE_TIMEOUT_S = 120.0  # an erasure waits this long at most for the flusher's batch in flight


class JournalError(MemrouteError):
    """The journal could not be read or written (disk full, I/O error, corrupt page, the
    database down)."""

    status = 500
    code = "journal_error"


@dataclass(frozen=True)
class JournalEntry:
    seq: int
    pair: TurnPair
    appended_at: float
    error: str | None = None  # set on entries parked as failed


@dataclass(frozen=True)
class JournalErasure:
    """What ``erase_user`` / ``erase_tenant`` did."""

    audit_id: int
    scope: str
    target: str
    boundary_seq: int  # entries of the target with seq <= this are erased data
    journal_rows: int
    at: float


@dataclass(frozen=True)
class AuditEntry:
    """One erasure audit row: who erased what, when, and how many rows (no content).
    ``store_rows`` / ``idempotency_rows`` / ``completed_at`` are None while (or if) the erasure
    did not finish; re-running it completes the job."""

    id: int
    at: float
    actor: str
    scope: str
    target: str
    boundary_seq: int
    store_rows: int | None
    journal_rows: int
    idempotency_rows: int | None
    completed_at: float | None


@dataclass(frozen=True)
class JournalStats:
    path: str
    total: int
    pending: int
    flushed: int
    failed: int
    last_seq: int
    oldest_pending_age_s: float | None  # None when nothing is pending


def erased_entries(entries: Sequence[JournalEntry], alive: set[int],
                   erasure_seq: Callable[[str], int | None]) -> list[JournalEntry]:
    """Of ``entries``, those not ``alive`` (not in the journal as pending and unerased) that
    an erasure covers: at or below their user's (or tenant's) boundary seq."""
    bounds: dict[str, int | None] = {}
    out = []
    for e in entries:
        if e.seq in alive:
            continue
        uid = e.pair.user_id
        if uid not in bounds:
            bounds[uid] = erasure_seq(uid)
        if (b := bounds[uid]) is not None and e.seq <= b:
            out.append(e)
    return out


def check_actor(actor: object) -> str:
    if (not isinstance(actor, str) or not actor.strip() or len(actor) > MAX_ACTOR_CHARS
            or not actor.isprintable()):
        raise InvalidRequest(f"actor must be printable text of 1-{MAX_ACTOR_CHARS} characters",
                             field="actor")
    return actor


def check_owner(owner: object) -> str:
    if (not isinstance(owner, str) or not owner.strip() or len(owner) > MAX_OWNER_CHARS
            or not owner.isprintable()):
        raise InvalidRequest(
            f"owner must be printable text of 1-{MAX_OWNER_CHARS} characters", field="owner")
    return owner


def check_lease(lease_s: object) -> float:
    if (isinstance(lease_s, bool) or not isinstance(lease_s, (int, float))
            or not math.isfinite(lease_s) or not 0 < lease_s <= MAX_LEASE_S):
        raise ValueError(f"lease_s must be a number of seconds in (0, {MAX_LEASE_S:.0f}], "
                         f"got {lease_s!r}")
    return float(lease_s)


def check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive integer, got {limit!r}")
    return limit


def wants_recent(within_s: object) -> bool:
    """Whether recently flushed entries are asked for (``flushed_within_s`` > 0), checked."""
    if isinstance(within_s, bool) or not isinstance(within_s, (int, float)) or within_s < 0:
        raise ValueError(f"flushed_within_s must be a number of seconds >= 0, got {within_s!r}")
    return within_s > 0
