"""The per-user extraction lock: one extraction run per user at a time, across processes.

Two implementations behind one small interface (``try_acquire``, ``release``, ``close``):

- :class:`AdvisoryLocks` (PostgreSQL): ``pg_try_advisory_lock(k)`` on a session of its own,
  held until released. ``k`` is a stable signed 64-bit BLAKE2b hash of the user id (our own,
  so it does not depend on the server's ``hashtext`` across versions). The session is a
  dedicated connection outside any pool (a pooled connection handed back would keep the
  lock), in autocommit (no transaction stays open while a run holds the lock). A crashed
  holder's connection closes and the server frees its locks: no lease, no takeover.
- :class:`LeaseLocks` (SQLite): a ``fact_locks`` row ``(user_id, owner, expires_at)`` written in
  a ``BEGIN IMMEDIATE`` transaction. A row whose lease (``lock_lease_s``) has passed is taken
  over, so a crashed holder blocks its user for one lease at most; the holder renews the lease
  by trying again with the same owner.

``owner`` names the holder (``host:pid:uuid``, say). Trying again with the owner that holds
the lock succeeds (and renews a lease); any other owner is refused, in this process too.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

from memroute.errors import InvalidRequest
from memroute.memory.facts.schema import fact_locks

_LOCK_DOMAIN = b"memroute.facts.user_lock\x1f"
_KEY_DOMAIN = b"memroute.facts.key_lock\x1f"


def _signed64(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big", signed=True)


def user_lock_key(user_id: str) -> int:
    """The advisory lock id of ``user_id``'s extraction lock (a PostgreSQL ``bigint``)."""
    return _signed64(_LOCK_DOMAIN + user_id.encode("utf-8"))


def fact_key_lock(user_id: str, key: str) -> int:
    """The transaction-level advisory lock that serializes writes of one (user, key)."""
    return _signed64(_KEY_DOMAIN + user_id.encode("utf-8") + b"\x1f" + key.encode("utf-8"))


def check_owner(owner: object) -> str:
    """``owner`` if it can name a lock holder, else a 400 naming it."""
    if not isinstance(owner, str) or not owner or len(owner) > 200:
        raise InvalidRequest("owner must be a non-empty string of at most 200 characters",
                             field="owner")
    return owner


@dataclass
class _Held:
    owner: str
    conn: Connection


class AdvisoryLocks:
    """PostgreSQL session advisory locks, one dedicated connection per held lock."""

    def __init__(self, url: str) -> None:
        self._engine = sa.create_engine(url, poolclass=NullPool)
        self._held: dict[str, _Held] = {}
        self._mutex = threading.Lock()

    def try_acquire(self, user_id: str, owner: str) -> bool:
        with self._mutex:
            held = self._held.get(user_id)
            if held is not None:
                return held.owner == owner
        conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            got = bool(conn.scalar(sa.select(sa.func.pg_try_advisory_lock(user_lock_key(user_id)))))
        except BaseException:
            conn.close()
            raise
        if not got:  # held by another session (another store, process or replica)
            conn.close()
            return False
        with self._mutex:  # the server gave it to this session only: no one else is here
            self._held[user_id] = _Held(owner, conn)
        return True

    def release(self, user_id: str, owner: str) -> bool:
        with self._mutex:
            held = self._held.get(user_id)
            if held is None or held.owner != owner:
                return False
            del self._held[user_id]
        self._drop(user_id, held.conn)
        return True

    def holder_pid(self, user_id: str) -> int | None:
        """The server process id of the session holding ``user_id``'s lock here (tests)."""
        with self._mutex:
            held = self._held.get(user_id)
        return None if held is None else int(held.conn.scalar(sa.text("SELECT pg_backend_pid()")))

    @staticmethod
    def _drop(user_id: str, conn: Connection) -> None:
        try:
            conn.scalar(sa.select(sa.func.pg_advisory_unlock(user_lock_key(user_id))))
        except sa.exc.DBAPIError:
            pass  # the session is gone already, and with it the lock
        finally:
            conn.close()

    def close(self) -> None:
        with self._mutex:
            held, self._held = self._held, {}
        for user_id, h in held.items():
            self._drop(user_id, h.conn)
        self._engine.dispose()


class LeaseLocks:
    """SQLite lease rows in ``fact_locks``; ``write_engine`` begins its transactions IMMEDIATE."""

    def __init__(self, write_engine: Engine, *, lease_s: float, clock: Callable[[], float]) -> None:
        self._engine = write_engine
        self._lease_s = float(lease_s)
        self._clock = clock
        self._taken: set[tuple[str, str]] = set()  # (user, owner) taken here: freed by close()
        self._mutex = threading.Lock()

    def try_acquire(self, user_id: str, owner: str) -> bool:
        now = float(self._clock())
        t = fact_locks.c
        with self._engine.begin() as conn:
            row = conn.execute(
                sa.select(t.owner, t.expires_at).where(t.user_id == user_id)
            ).first()
            lease = {"owner": owner, "expires_at": now + self._lease_s}
            if row is None:
                conn.execute(sa.insert(fact_locks).values(user_id=user_id, **lease))
            elif row.owner != owner and row.expires_at > now:
                return False
            else:  # ours (renewed) or stale (taken over: its holder did not renew in time)
                conn.execute(sa.update(fact_locks).where(t.user_id == user_id).values(**lease))
        with self._mutex:
            self._taken.add((user_id, owner))
        return True

    def release(self, user_id: str, owner: str) -> bool:
        with self._mutex:
            self._taken.discard((user_id, owner))
        t = fact_locks.c
        with self._engine.begin() as conn:
            done = conn.execute(
                sa.delete(fact_locks).where(t.user_id == user_id, t.owner == owner)
            )
            return done.rowcount > 0

    def close(self) -> None:
        """Release what was taken through this object (a lease taken over since frees nothing:
        the delete matches the owner). The store disposes the shared engine afterwards."""
        with self._mutex:
            taken, self._taken = self._taken, set()
        for user_id, owner in sorted(taken):
            self.release(user_id, owner)


__all__ = ["AdvisoryLocks", "LeaseLocks", "check_owner", "fact_key_lock", "user_lock_key"]
