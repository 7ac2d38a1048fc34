"""The durable, append-only journal of turn-pairs: one implementation on a SQLite file (the
embedded default) or a PostgreSQL database (one journal shared by every ingress replica).

:meth:`Journal.append` returns after its transaction committed durably
(:mod:`memroute.journal.dialects`); only then is a turn-pair acknowledged. The flusher
(:mod:`memroute.journal.flusher`) writes pending entries to the store and marks them.

- **One row per pair id**: the same pair again (equal but for ``created_at``) is a no-op
  returning its seq; other content replaces the entry with a new seq, pending again (last write
  wins). Seqs are never reused, so a replaced entry stays pending when the old seq is marked.
- **Claims** (several flushers): pending entries no live lease holds, oldest first, locked
  ``FOR UPDATE SKIP LOCKED`` (SQLite: its write lock) and leased on the database's clock. A
  replaced entry keeps the lease of the version being written (``claimed_seq``), so the new
  version is written after the old one, never beside it.
- **Erasure**: the boundary seq B is the highest seq ever allocated when it runs; the
  target's entries with seq <= B are erased data, later ones new data. One transaction locks
  out the target's appends, reads B, upserts the tombstone, deletes the entries and writes the
  audit row; no read that hands entries out returns one at or below a tombstone.
  :meth:`Journal.store_gate` orders this process's flusher against it; a flusher elsewhere
  re-checks with :meth:`Journal.erased_among`.

docs/ARCHITECTURE.md ("The journal on PostgreSQL") has the full argument.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Self

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memroute.errors import ConfigError
from memroute.journal.codec import check_pair, decode_pair, encode_pair, same_content
from memroute.journal.dialects import (
    POOL_SIZE,
    POSTGRES_URLS,
    Database,
    open_postgres,
    open_sqlite,
)
from memroute.journal.erasure import SEQ_CHUNK, ErasureMixin
from memroute.journal.listeners import ListenersMixin
from memroute.journal.records import (
    JournalEntry,
    JournalError,
    JournalStats,
    check_lease,
    check_limit,
    check_owner,
    wants_recent,
)
from memroute.journal.schema import not_erased, pending
from memroute.types import TurnPair, validate_user_id


class Journal(ListenersMixin, ErasureMixin):
    """The journal in a SQLite file (``path``); :class:`PostgresJournal` opens a shared one."""

    #: several processes hand out its entries: flushers claim with leases and poll
    shared = False

    def __init__(self, path: str | os.PathLike[str], *,
                 clock: Callable[[], float] = time.time) -> None:
        self._setup(open_sqlite(path), clock)

    def _setup(self, db: Database, clock: Callable[[], float]) -> None:
        super().__init__()  # the listeners
        self._db, self._clock = db, clock
        self._engine = db.engine
        self.path = db.path  # the SQLite file, or the URL without its password
        self._t = db.tables
        self._e = db.tables.entries
        self._pending = pending(db.tables)
        self._alive = sa.and_(self._pending, not_erased(db.tables, db.tenant_of))
        self._store_gate = threading.RLock()  # see store_gate()

    # ----------------------------------------------------------------- writes
    def append(self, pairs: Sequence[TurnPair]) -> list[int]:
        """Durably record ``pairs`` in one transaction; returns one seq per pair, in order.

        Every pair is checked before anything is written (:class:`InvalidRequest` on a bad
        one). When this returns, the transaction is committed (fsync'd / WAL flushed).
        """
        items = [check_pair(p, index=i) for i, p in enumerate(pairs)]
        if not items:
            return []
        now = self._clock()

        def write(conn: Connection) -> tuple[list[int], int]:
            self._db.lock_users(conn, {p.user_id for p in items})
            seqs = [self._append_one(conn, p, now) for p in items]
            return [s for s, _ in seqs], sum(new for _, new in seqs)

        seqs, inserted = self._db.transact("append", write)
        if inserted:
            self._notify(inserted)
        return seqs

    def _append_one(self, conn: Connection, pair: TurnPair, now: float) -> tuple[int, bool]:
        e = self._e.c
        row_values = {"pair_id": pair.id, "user_id": pair.user_id,
                      "payload": encode_pair(pair), "appended_at": now}
        while True:  # twice at most, unless prunes keep deleting the row we found
            # The existing row first (a retry is the common conflict): a no-op allocates no seq.
            row = conn.execute(sa.select(e.seq, e.payload, e.claimed_by, e.lease_until,
                                         e.claimed_seq)
                               .where(e.pair_id == pair.id).with_for_update()).first()
            if row is not None:
                if same_content(self._decode(row[0], row[1]), pair):
                    return int(row[0]), False
                # Replaced: a new seq, pending again; a live claim of the old version stays
                # (claimed_seq names it), so the new version is written after it.
                conn.execute(sa.delete(self._e).where(e.seq == row[0]))
                row_values.update(claimed_by=row[2], lease_until=row[3], claimed_seq=row[4])
            # Another replica may insert the same id meanwhile: ON CONFLICT waits for its
            # commit and inserts nothing; the loop then reads its row.
            seq = conn.execute(self._db.insert(self._e).values(**row_values)
                               .on_conflict_do_nothing(index_elements=["pair_id"])
                               .returning(e.seq)).scalar()
            if seq is not None:
                return int(seq), True

    def claim(self, limit: int, *, owner: str, lease_s: float) -> list[JournalEntry]:
        """Take up to ``limit`` pending entries no live lease holds (or ``owner``'s own), oldest
        first, leased to ``owner`` for ``lease_s`` seconds of the database's clock. Until then or
        until they are marked flushed/failed no other claimer gets them."""
        limit, owner, lease_s = check_limit(limit), check_owner(owner), check_lease(lease_s)
        e, now = self._e.c, self._db.now()
        free = sa.or_(e.lease_until.is_(None), e.lease_until <= now, e.claimed_by == owner)

        def take(conn: Connection) -> list[tuple[Any, ...]]:
            seqs = list(conn.execute(
                sa.select(e.seq).where(self._alive, free).order_by(e.seq).limit(limit)
                .with_for_update(skip_locked=True, of=self._e)).scalars())
            if not seqs:
                return []
            return list(conn.execute(
                sa.update(self._e).where(e.seq.in_(seqs))
                .values(claimed_by=owner, lease_until=now + lease_s, claimed_seq=e.seq)
                .returning(e.seq, e.payload, e.appended_at)).all())

        rows = self._db.transact("claim entries", take)
        return [JournalEntry(s, self._decode(s, p), a) for s, p, a in sorted(rows)]

    def release(self, seqs: Iterable[int], *, owner: str) -> int:
        """Give ``owner``'s claims of ``seqs`` back unwritten (a flusher stopping); returns how
        many it held."""
        owner = check_owner(owner)
        e = self._e.c
        return self._each_chunk("release claims", seqs, lambda conn, chunk: conn.execute(
            sa.update(self._e).where(e.claimed_by == owner, e.claimed_seq.in_(chunk))
            .values(claimed_by=None, lease_until=None, claimed_seq=None)).rowcount)

    def mark_flushed(self, seqs: Iterable[int]) -> int:
        """Mark pending entries written to the store; returns how many were still pending."""
        # claimed_by stays: who wrote it (``settled_seq`` tells another replica's writes apart)
        return self._mark(seqs, keep_writer=True, flushed_at=self._clock())

    def mark_failed(self, seqs: Iterable[int], error: str) -> int:
        """Park entries the store refuses for good, so they stop blocking the queue."""
        text = error[:2000].replace("\x00", "\ufffd")  # PostgreSQL text holds no NUL
        return self._mark(seqs, failed_at=self._clock(), error=text)

    def _mark(self, seqs: Iterable[int], *, keep_writer: bool = False, **values: Any) -> int:
        e, unclaimed = self._e.c, {"claimed_by": None, "lease_until": None, "claimed_seq": None}
        done = {k: v for k, v in unclaimed.items() if not (keep_writer and k == "claimed_by")}

        def mark(conn: Connection, chunk: list[int]) -> int:
            changed = conn.execute(sa.update(self._e).where(self._pending, e.seq.in_(chunk))
                                   .values(**values, **done)).rowcount
            # Versions that replaced one of these while it was being written: claimable now.
            conn.execute(sa.update(self._e).where(e.claimed_seq.in_(chunk),
                                                  e.seq != e.claimed_seq).values(**unclaimed))
            return int(changed)

        return self._each_chunk("mark entries", seqs, mark)

    def _each_chunk(self, what: str, seqs: Iterable[int],
                    fn: Callable[[Connection, list[int]], int]) -> int:
        wanted = [int(s) for s in seqs]
        if not wanted:
            return 0
        return self._db.transact(what, lambda conn: sum(
            fn(conn, wanted[i:i + SEQ_CHUNK]) for i in range(0, len(wanted), SEQ_CHUNK)))

    def requeue_failed(self) -> int:
        """Make parked entries pending again (after the cause was fixed); returns how many."""
        e = self._e.c
        changed = int(self._db.transact("requeue failed entries", lambda conn: conn.execute(
            sa.update(self._e).where(e.failed_at.is_not(None), e.flushed_at.is_(None))
            .values(failed_at=None, error=None, claimed_by=None, lease_until=None,
                    claimed_seq=None)).rowcount))
        if changed:
            self._notify(changed)
        return changed

    def prune_flushed(self, older_than_s: float) -> int:
        """Delete entries flushed more than ``older_than_s`` ago (they live in the store now).
        A pair re-appended after its entry was pruned is journaled and flushed again, which
        rewrites the same store id: still one memory."""
        e, cutoff = self._e.c, self._clock() - older_than_s
        return int(self._db.transact("prune flushed entries", lambda conn: conn.execute(
            sa.delete(self._e).where(e.flushed_at.is_not(None), e.flushed_at < cutoff)
        ).rowcount))

    # ------------------------------------------------------------------ reads
    def pending(self, limit: int | None = None, *,
                max_seq: int | None = None) -> list[JournalEntry]:
        """Unflushed entries, oldest first (at most ``limit``; only seq <= ``max_seq``), claimed
        or not (what read-your-writes needs; flushers on several replicas use :meth:`claim`)."""
        e = self._e.c
        stmt = sa.select(e.seq, e.payload, e.appended_at).where(self._alive).order_by(e.seq)
        if max_seq is not None:
            stmt = stmt.where(e.seq <= int(max_seq))
        if limit is not None:
            stmt = stmt.limit(check_limit(limit))
        return [JournalEntry(s, self._decode(s, p), a) for s, p, a in self._db.read(stmt)]

    def pending_for_user(self, user_id: str, limit: int | None = None, *,
                         flushed_within_s: float = 0.0) -> list[JournalEntry]:
        """A user's unflushed entries, oldest first; with ``limit`` only the newest ``limit``;
        with ``flushed_within_s`` also those flushed that recently (not yet visible everywhere)."""
        validate_user_id(user_id)
        e = self._e.c
        # the plain pending read stays on its partial index; the recent ones need flushed_at
        which = (sa.or_(self._pending, e.flushed_at >= self._clock() - flushed_within_s)
                 if wants_recent(flushed_within_s) else self._pending)
        stmt = (sa.select(e.seq, e.payload, e.appended_at)
                .where(which, e.user_id == user_id, not_erased(self._t, self._db.tenant_of))
                .order_by(e.seq.desc()))
        if limit is not None:
            stmt = stmt.limit(check_limit(limit))
        rows = self._db.read(stmt)
        return [JournalEntry(s, self._decode(s, p), a) for s, p, a in reversed(rows)]

    def settled_seq(self, user_id: str, settled_s: float = 0.0, *,
                    writer: str | None = None) -> int:
        """The highest seq of ``user_id``'s entries flushed at least ``settled_s`` ago by a
        flusher other than ``writer`` (0: none). Each pair up to it is readable from the store by
        now, so a replica's cached copy of the user's memories built before it moved has missed
        another replica's write. (``prune_flushed`` would lower it; a user whose entries were
        all pruned reads 0 and keeps its cache.)"""
        validate_user_id(user_id)
        e = self._e.c
        return int(self._db.read(
            sa.select(sa.func.coalesce(sa.func.max(e.seq), 0))
            .where(e.user_id == user_id, e.flushed_at <= self._clock() - settled_s,
                   e.claimed_by.is_distinct_from(writer)))[0][0])

    def failed(self, limit: int = 100) -> list[JournalEntry]:
        """Entries parked by :meth:`mark_failed`, oldest first, with their error."""
        e = self._e.c
        rows = self._db.read(sa.select(e.seq, e.payload, e.appended_at, e.error)
                             .where(e.failed_at.is_not(None)).order_by(e.seq)
                             .limit(check_limit(limit)))
        return [JournalEntry(s, self._decode(s, p), a, err) for s, p, a, err in rows]

    def pending_count(self) -> int:
        return int(self._db.read(sa.select(sa.func.count()).where(self._pending)
                                 .select_from(self._e))[0][0])

    def last_seq(self) -> int:
        return int(self._db.read(sa.select(sa.func.coalesce(sa.func.max(self._e.c.seq), 0)))[0][0])

    def stats(self) -> JournalStats:
        e = self._e.c
        oldest = sa.select(sa.func.min(e.appended_at)).where(self._pending).scalar_subquery()
        total, flushed, failed, last, first = self._db.read(sa.select(
            sa.func.count(), sa.func.count(e.flushed_at), sa.func.count(e.failed_at),
            sa.func.coalesce(sa.func.max(e.seq), 0), oldest).select_from(self._e))[0]
        return JournalStats(
            path=str(self.path), total=int(total), flushed=int(flushed), failed=int(failed),
            pending=int(total) - int(flushed) - int(failed), last_seq=int(last),
            oldest_pending_age_s=None if first is None else max(0.0, self._clock() - first))

    def _decode(self, seq: int, payload: str) -> TurnPair:
        try:
            return decode_pair(payload)
        except (ValueError, TypeError) as exc:
            raise JournalError(
                f"journal {self.path}: entry seq={seq} is unreadable: {exc}") from exc

    # -------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Close every connection (a claim's lease outlives it: see :meth:`claim`)."""
        self._db.close()

    @property
    def closed(self) -> bool:
        return self._db.closed

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PostgresJournal(Journal):
    """The journal in a PostgreSQL database shared by every replica (``postgresql://``)."""

    shared = True

    def __init__(self, url: str, *, clock: Callable[[], float] = time.time,
                 pool_size: int = POOL_SIZE) -> None:
        if not isinstance(url, str) or not url.startswith(POSTGRES_URLS):
            raise ConfigError("the PostgreSQL journal needs a postgresql:// URL",
                              field="journal.url")
        self._setup(open_postgres(url, pool_size), clock)


def open_journal(target: str | os.PathLike[str]) -> Journal:
    """A ``postgresql://`` URL's shared journal, else the SQLite file at ``target``."""
    if isinstance(target, str) and target.startswith(POSTGRES_URLS):
        return PostgresJournal(target)
    return Journal(target)
