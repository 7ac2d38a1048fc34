"""The PostgreSQL journal's tables, lock keys and argument checks
(:mod:`memroute.journal.postgres_journal` has the rules they serve).

Tables are prefixed ``journal_`` so the journal can share a database with the fact store
(whose ``erasures`` table is another thing): ``journal_entries`` (one row per ``TurnPair.id``;
``seq`` an identity with ``CACHE 1``, so seqs come out in one global order), ``journal_erasures``
(tombstones) and ``journal_erasure_audit``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memroute.errors import ConfigError, InvalidRequest
from memroute.namespace import SEPARATOR

POOL_SIZE = 4
MAX_OWNER_CHARS = 200
MAX_LEASE_S = 86400.0
DEADLOCK_RETRIES = 5
RETRY_SQLSTATES = frozenset({"40P01", "40001"})  # deadlock_detected, serialization_failure
SCHEMA_LOCK_KEY = 0x6D656D6A6F75726E  # "memjourn": one schema creator at a time
_LOCK_DOMAIN = b"memroute.journal.erasure\x1f"

PENDING = "flushed_at IS NULL AND failed_at IS NULL"
# An entry never handed out again: at or below its user's or its tenant's tombstone. The
# tenant of ``tenant:user`` is the text before the first ':'; an id without ':' has none
# (split_part would return the whole id, hence the strpos guard).
NOT_ERASED = (
    "NOT EXISTS (SELECT 1 FROM journal_erasures x WHERE x.scope = 'user' "
    "AND x.target = journal_entries.user_id AND journal_entries.seq <= x.seq) "
    "AND NOT EXISTS (SELECT 1 FROM journal_erasures x WHERE x.scope = 'tenant' "
    "AND strpos(journal_entries.user_id, ':') > 0 "
    "AND x.target = split_part(journal_entries.user_id, ':', 1) "
    "AND journal_entries.seq <= x.seq)"
)
NOW = "extract(epoch FROM statement_timestamp())::float8"  # the server's clock (leases)

SCHEMA = [
    """CREATE TABLE IF NOT EXISTS journal_entries (
        seq BIGINT GENERATED ALWAYS AS IDENTITY (CACHE 1) PRIMARY KEY,
        pair_id BIGINT NOT NULL UNIQUE,
        user_id VARCHAR(128) COLLATE "C" NOT NULL,
        payload TEXT NOT NULL,
        appended_at DOUBLE PRECISION NOT NULL,
        flushed_at DOUBLE PRECISION,
        failed_at DOUBLE PRECISION,
        error TEXT,
        claimed_by TEXT,
        lease_until DOUBLE PRECISION,
        claimed_seq BIGINT
    )""",
    (f"CREATE INDEX IF NOT EXISTS journal_entries_pending ON journal_entries (seq) "
     f"WHERE {PENDING}"),
    (f"CREATE INDEX IF NOT EXISTS journal_entries_pending_user ON journal_entries (user_id, seq) "
     f"WHERE {PENDING}"),
    # erasure of a user (equality) or a tenant (a C-collation range of user_id)
    "CREATE INDEX IF NOT EXISTS journal_entries_user ON journal_entries (user_id)",
    ("CREATE INDEX IF NOT EXISTS journal_entries_claimed ON journal_entries (claimed_seq) "
     "WHERE claimed_seq IS NOT NULL"),
    ("CREATE INDEX IF NOT EXISTS journal_entries_flushed ON journal_entries (flushed_at) "
     "WHERE flushed_at IS NOT NULL"),
    ("CREATE INDEX IF NOT EXISTS journal_entries_failed ON journal_entries (seq) "
     "WHERE failed_at IS NOT NULL"),
    """CREATE TABLE IF NOT EXISTS journal_erasures (
        scope TEXT NOT NULL CHECK (scope IN ('user', 'tenant')),
        target VARCHAR(128) COLLATE "C" NOT NULL,
        seq BIGINT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (scope, target)
    )""",
    """CREATE TABLE IF NOT EXISTS journal_erasure_audit (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        at DOUBLE PRECISION NOT NULL,
        actor TEXT NOT NULL,
        scope TEXT NOT NULL CHECK (scope IN ('user', 'tenant')),
        target VARCHAR(128) COLLATE "C" NOT NULL,
        boundary_seq BIGINT NOT NULL,
        store_rows BIGINT,
        journal_rows BIGINT NOT NULL,
        idempotency_rows BIGINT,
        completed_at DOUBLE PRECISION
    )""",
    ("CREATE INDEX IF NOT EXISTS journal_erasure_audit_target "
     "ON journal_erasure_audit (target, id)"),
]
ENTRY_COLUMNS = frozenset({
    "seq", "pair_id", "user_id", "payload", "appended_at", "flushed_at", "failed_at", "error",
    "claimed_by", "lease_until", "claimed_seq",
})
SEQUENCE = "pg_get_serial_sequence('journal_entries', 'seq')"


def _signed64(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big", signed=True)


def scope_lock_key(scope: str, target: str) -> int:
    """The advisory lock of erasure scope ``scope`` (``user`` / ``tenant``) of ``target``."""
    return _signed64(_LOCK_DOMAIN + scope.encode() + b"\x1f" + target.encode("utf-8"))


def erasure_lock_keys(user_ids: Iterable[str]) -> list[int]:
    """The locks an append of these users holds shared: each user's and each tenant's, sorted
    and without repeats (every transaction takes them in one order)."""
    keys = set()
    for uid in user_ids:
        keys.add(scope_lock_key("user", uid))
        tenant, sep, _ = uid.partition(SEPARATOR)
        if sep:
            keys.add(scope_lock_key("tenant", tenant))
    return sorted(keys)


def check_owner(owner: object) -> str:
    if (
        not isinstance(owner, str) or not owner.strip() or len(owner) > MAX_OWNER_CHARS
        or not owner.isprintable()
    ):
        raise InvalidRequest(
            f"owner must be printable text of 1-{MAX_OWNER_CHARS} characters", field="owner"
        )
    return owner


def check_lease(lease_s: object) -> float:
    if (
        isinstance(lease_s, bool) or not isinstance(lease_s, (int, float))
        or not math.isfinite(lease_s) or not 0 < lease_s <= MAX_LEASE_S
    ):
        raise ValueError(f"lease_s must be a number of seconds in (0, {MAX_LEASE_S:.0f}], "
                         f"got {lease_s!r}")
    return float(lease_s)


def seq_list(seqs: Iterable[int]) -> list[int]:
    return [int(s) for s in seqs]


def create_schema(conn: Connection) -> tuple[set[str], Any]:
    """Create what is missing (one creator at a time) and return the columns found on
    ``journal_entries`` and its seq sequence's cache size (None if the table is not ours)."""
    conn.execute(sa.select(sa.func.pg_advisory_xact_lock(SCHEMA_LOCK_KEY)))
    for stmt in SCHEMA:  # the tables first, then (if they are ours) the indexes
        if stmt.startswith("CREATE TABLE"):
            conn.exec_driver_sql(stmt)
    found = {r[0] for r in conn.execute(sa.text(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_name = 'journal_entries' AND table_schema = current_schema()"))}
    if ENTRY_COLUMNS - found:
        return found, None
    for stmt in SCHEMA:
        if not stmt.startswith("CREATE TABLE"):
            conn.exec_driver_sql(stmt)
    cache = conn.execute(sa.text(
        "SELECT s.seqcache FROM pg_sequence s "
        f"WHERE s.seqrelid = {SEQUENCE}::regclass")).scalar()
    return found, cache


def check_schema(found: set[str], cache: Any, where: str) -> None:
    missing = sorted(ENTRY_COLUMNS - found)
    if missing:
        raise ConfigError(
            f"{where} already has a 'journal_entries' table that is not a memroute "
            f"journal's (missing columns {missing}); choose another database",
            field="journal.url",
        )
    if cache != 1:  # seqs must come out in one global order (see the erasure rule)
        raise ConfigError(
            f"{where}: the sequence of journal_entries.seq has CACHE {cache}; the "
            "journal needs CACHE 1 (ALTER TABLE journal_entries ALTER seq SET CACHE 1)",
            field="journal.url",
        )


def erase_rows(conn: Connection, scope: str, target: str, where: str, args: dict[str, Any], *,
               actor: str, now: float) -> tuple[int, int, int]:
    """One erasure's transaction: the exclusive lock, the boundary seq B, the tombstone, the
    deletes (``where`` selects the target's entries) and the audit row; returns (audit id, B,
    entries deleted)."""
    # Exclusive: appends of the target in flight commit first; later ones wait for us.
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": scope_lock_key(scope, target)})
    boundary = int(conn.execute(sa.text(  # the highest seq ever allocated (0: none)
        f"SELECT coalesce(pg_sequence_last_value({SEQUENCE}::regclass), 0)")).scalar_one())
    conn.execute(sa.text(
        "INSERT INTO journal_erasures (scope, target, seq, at) "
        "VALUES (:scope, :target, :seq, :at) ON CONFLICT (scope, target) DO UPDATE "
        "SET seq = greatest(journal_erasures.seq, excluded.seq), at = excluded.at"),
        {"scope": scope, "target": target, "seq": boundary, "at": now})
    deleted = conn.execute(sa.text(f"DELETE FROM journal_entries WHERE {where}"), args).rowcount
    audit_id = conn.execute(sa.text(
        "INSERT INTO journal_erasure_audit (at, actor, scope, target, boundary_seq, journal_rows) "
        "VALUES (:at, :actor, :scope, :target, :seq, :rows) RETURNING id"),
        {"at": now, "actor": actor, "scope": scope, "target": target, "seq": boundary,
         "rows": deleted}).scalar_one()
    return int(audit_id), boundary, int(deleted)
