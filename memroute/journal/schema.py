"""The journal's one relational schema (SQLAlchemy Core), compiled for SQLite and PostgreSQL.

Tables (``prefix`` + name; see :func:`journal_tables`):

- ``entries``: one row per ``TurnPair.id``. ``seq`` is never reused (SQLite ``AUTOINCREMENT``,
  PostgreSQL ``IDENTITY`` with ``CACHE 1``, so seqs come out in one global order across
  sessions, which the erasure boundary relies on). ``claimed_by`` / ``lease_until`` /
  ``claimed_seq``: a flusher's lease on the entry (several flushers on a shared journal).
- ``erasures``: one tombstone per erased user or tenant; entries of the target with
  ``seq <= erasures.seq`` are erased data. ``erasure_audit``: who erased what, when and how
  many rows, never content; ``completed_at`` stays NULL until every store was erased.
- ``idempotency``: ``Idempotency-Key`` claims and first answers, one row per (tenant, key), in
  the journal's database so a retry finds the answer on any replica
  (:mod:`memroute.journal.idempotency`); ``idempotency_users``: the namespace each key's request
  belongs to (erasure), deleted with its key.

Why two prefixes: the SQLite file is the journal's own and keeps the names it always had
(files written by earlier versions open as they are); in PostgreSQL the journal may share a
database with the fact store, whose ``erasures`` table is another thing, hence ``journal_``.
``user_id`` and ``target`` use the bytewise ``C`` collation on PostgreSQL (SQLite compares bytes
already), so ``tenant:`` .. ``tenant;`` is exactly a tenant's users whatever the locale.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.sql.elements import ColumnElement

SQLITE_PREFIX, POSTGRES_PREFIX = "", "journal_"
IN_PROGRESS, COMPLETED = "in_progress", "completed"
PENDING_SQL = "flushed_at IS NULL AND failed_at IS NULL"  # a literal: partial indexes match it

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # SQLite: a rowid alias
_TEXT_ID = sa.String(128).with_variant(sa.String(128, collation="C"), "postgresql")
_TIME = sa.Double()
_SCOPE_CHECK = "scope IN ('user', 'tenant')"


@dataclass(frozen=True)
class JournalTables:
    metadata: sa.MetaData
    entries: sa.Table
    erasures: sa.Table
    erasure_audit: sa.Table
    idempotency: sa.Table
    idempotency_users: sa.Table

    @property
    def all(self) -> list[sa.Table]:
        return [self.entries, self.erasures, self.erasure_audit, self.idempotency,
                self.idempotency_users]


def journal_tables(prefix: str) -> JournalTables:
    """The tables, named ``prefix + name`` (:data:`SQLITE_PREFIX`, :data:`POSTGRES_PREFIX`)."""
    md = sa.MetaData()
    pending = sa.text(PENDING_SQL)
    entries = sa.Table(
        f"{prefix}entries", md,
        sa.Column("seq", _ID, sa.Identity(always=True, cache=1), primary_key=True),
        sa.Column("pair_id", sa.BigInteger(), nullable=False, unique=True),
        sa.Column("user_id", _TEXT_ID, nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("appended_at", _TIME, nullable=False),
        sa.Column("flushed_at", _TIME),
        sa.Column("failed_at", _TIME),
        sa.Column("error", sa.Text()),
        sa.Column("claimed_by", sa.Text()),
        sa.Column("lease_until", _TIME),
        sa.Column("claimed_seq", sa.BigInteger()),
        sqlite_autoincrement=True,
    )
    c = entries.c

    def index(name: str, *cols: sa.Column, where: sa.TextClause | None = None) -> None:
        sa.Index(f"{prefix}entries_{name}", *cols, sqlite_where=where, postgresql_where=where)

    index("pending", c.seq, where=pending)
    index("pending_user", c.user_id, c.seq, where=pending)
    index("user", c.user_id)  # erasure of a user (equality) or a tenant (a range)
    index("claimed", c.claimed_seq, where=sa.text("claimed_seq IS NOT NULL"))
    index("flushed", c.flushed_at, where=sa.text("flushed_at IS NOT NULL"))
    index("failed", c.seq, where=sa.text("failed_at IS NOT NULL"))
    erasures = sa.Table(
        f"{prefix}erasures", md,
        sa.Column("scope", sa.Text(), primary_key=True),
        sa.Column("target", _TEXT_ID, primary_key=True),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("at", _TIME, nullable=False),
        sa.CheckConstraint(_SCOPE_CHECK),
        sqlite_with_rowid=False,
    )
    audit = sa.Table(
        f"{prefix}erasure_audit", md,
        sa.Column("id", _ID, sa.Identity(always=True), primary_key=True),
        sa.Column("at", _TIME, nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("target", _TEXT_ID, nullable=False),
        sa.Column("boundary_seq", sa.BigInteger(), nullable=False),
        sa.Column("store_rows", sa.BigInteger()),
        sa.Column("journal_rows", sa.BigInteger(), nullable=False),
        sa.Column("idempotency_rows", sa.BigInteger()),
        sa.Column("completed_at", _TIME),
        sa.CheckConstraint(_SCOPE_CHECK),
        sqlite_autoincrement=True,
    )
    sa.Index(f"{prefix}erasure_audit_target", audit.c.target, audit.c.id)
    idem = sa.Table(
        f"{prefix}idempotency", md,
        sa.Column("tenant", sa.Text(), primary_key=True),
        sa.Column("key", sa.Text(), primary_key=True),
        sa.Column("body_hash", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("response", sa.Text()),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("updated_at", _TIME, nullable=False),
        sa.CheckConstraint(f"state IN ('{IN_PROGRESS}', '{COMPLETED}')"),
        sqlite_with_rowid=False,
    )
    sa.Index(f"{prefix}idempotency_created", idem.c.created_at)
    # Deleted with its key (every path that drops one: forget, TTL, dead claims, erasure).
    users = sa.Table(
        f"{prefix}idempotency_users", md,
        sa.Column("tenant", sa.Text(), primary_key=True),
        sa.Column("key", sa.Text(), primary_key=True),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["tenant", "key"], [idem.c.tenant, idem.c.key],
                                ondelete="CASCADE"),
        sqlite_with_rowid=False,
    )
    sa.Index(f"{prefix}idempotency_users_user", users.c.user_id)
    return JournalTables(md, entries, erasures, audit, idem, users)


def pending(t: JournalTables) -> ColumnElement[bool]:
    return sa.and_(t.entries.c.flushed_at.is_(None), t.entries.c.failed_at.is_(None))


def not_erased(t: JournalTables,
               tenant_of: Callable[[ColumnElement[str]], ColumnElement[str]]
               ) -> ColumnElement[bool]:
    """An entry the journal may hand out: above its user's and its tenant's tombstone
    (``tenant_of``: the dialect's text before the first ':', NULL or '' when there is none)."""
    e = t.entries.c
    by_user, by_tenant = t.erasures.alias("xu"), t.erasures.alias("xt")
    return sa.and_(
        ~sa.exists().where(by_user.c.scope == "user", by_user.c.target == e.user_id,
                           e.seq <= by_user.c.seq),
        ~sa.exists().where(by_tenant.c.scope == "tenant",
                           by_tenant.c.target == tenant_of(e.user_id),
                           e.seq <= by_tenant.c.seq),
    )
