"""Per-user version tokens, and the active-facts cache they keep valid across replicas.

Every transaction that changes a user's facts (a supersession, a first assertion, a
retraction) also writes a fresh random token into the user's ``fact_versions`` row, so a
committed change and its new token become visible together. A store caches what it read as
``(token, facts)``; a later read first fetches the token (one primary-key lookup) and uses the
cached facts while the token is unchanged. The token lives in the shared database, so a write
through any replica invalidates every replica's cache on its next read: no message bus, no TTL.

Why random and not a counter: erasure deletes the row with the user's facts, and a counter
restarting at 1 could match a replica's cache from before the erasure. A user without a row
(never written, erased, or facts older than this table) is never served from the cache.

Reading the token before the facts makes every race safe: facts read after the token are at
least as new as it, so at worst a fresh read is cached under an older token and replaced on the
next call. Expiry needs no write: an entry is valid only up to the earliest ``expires_at`` of
the facts in it (an ephemeral fact leaves the active set then).
"""

from __future__ import annotations

import math
import secrets
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memroute.memory.facts.schema import fact_versions
from memroute.memory.facts.types import Fact

# Both SQLite (>= 3.24) and PostgreSQL spell the upsert this way.
_BUMP = sa.text(
    "INSERT INTO fact_versions (user_id, token) VALUES (:user_id, :token) "
    "ON CONFLICT (user_id) DO UPDATE SET token = excluded.token"
)
TOKEN_QUERY = sa.select(fact_versions.c.token).where(
    fact_versions.c.user_id == sa.bindparam("user_id"))


def new_token() -> int:
    return secrets.randbits(62)  # fits a signed BIGINT on both back ends


def bump(conn: Connection, user_id: str) -> None:
    """Inside a write transaction: the user's facts changed."""
    conn.execute(_BUMP, {"user_id": user_id, "token": new_token()})


class _Entry(NamedTuple):
    token: int
    built_at: float  # the ``now`` the facts were filtered at
    until: float  # the earliest expiry among them: the entry is stale from then on
    facts: tuple[Fact, ...]


class ActiveCache:
    """A bounded LRU of users' active facts, keyed by version token (thread-safe).

    ``max_users = 0`` turns it off (every read goes to the database)."""

    def __init__(self, max_users: int) -> None:
        self.max_users = max_users
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, user_id: str, token: int | None, now: float) -> tuple[Fact, ...] | None:
        """The cached facts if built under ``token`` and still unexpired at ``now``."""
        if token is None or self.max_users <= 0:
            return None
        with self._lock:
            entry = self._entries.get(user_id)
            # now < built_at: a fact that had expired by built_at may not have at now
            if entry is None or entry.token != token or not entry.built_at <= now < entry.until:
                self.misses += 1
                return None
            self._entries.move_to_end(user_id)
            self.hits += 1
            return entry.facts

    def put(self, user_id: str, token: int | None, now: float, facts: Sequence[Fact]) -> tuple[Fact, ...]:
        kept = tuple(facts)
        if token is None or self.max_users <= 0:
            return kept
        until = min((f.expires_at for f in kept if f.expires_at is not None), default=math.inf)
        with self._lock:
            self._entries[user_id] = _Entry(token, now, until, kept)
            self._entries.move_to_end(user_id)
            while len(self._entries) > self.max_users:
                self._entries.popitem(last=False)
        return kept

    def drop(self, user_id: str) -> None:
        with self._lock:
            self._entries.pop(user_id, None)

    def drop_prefix(self, prefix: str) -> None:
        with self._lock:
            for uid in [u for u in self._entries if u.startswith(prefix)]:
                del self._entries[uid]

    def __len__(self) -> int:
        return len(self._entries)


__all__ = ["TOKEN_QUERY", "ActiveCache", "bump", "new_token"]
