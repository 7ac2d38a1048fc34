"""The fact store's one relational schema (SQLAlchemy Core) and how each back end is opened.

Tables:

- ``facts``: every fact ever asserted, one row per (user, key, value change). Integer ids
  (SQLite ``AUTOINCREMENT``, PostgreSQL ``IDENTITY``): they grow in insertion order, so they
  break ``recorded_at`` ties in a timeline, keep the indexes narrow, and are never reused, not
  even after an erasure removed the newest rows. An id alone grants nothing: every read and
  :func:`~memroute.memory.facts.lifecycle.retract` also match the user.
- ``fact_locks`` (SQLite only): the per-user extraction lock as a lease row. PostgreSQL uses a
  session advisory lock instead (:mod:`memroute.memory.facts.locks`).
- ``fact_versions``: one row per user with a random token that every change of the user's
  facts replaces in the same transaction; a replica's cached session start is valid while the
  token it was built under is still there (:mod:`memroute.memory.facts.versions`).
- ``recent_turns``: the newest turn-pairs of each user (``facts.recent_turns`` of them), written
  by the background lane, so session start reads them with one indexed ``LIMIT`` query instead
  of listing the user's memories in the vector store.
- ``erasures``: one row per erasure of a user or a tenant, holding only a digest of the id
  (no identifier outlives the erasure). An extraction notes the newest row before it reads its
  turns and refuses to write if a row for its user came after: a run that was reading while
  the user was erased cannot bring facts back (:mod:`memroute.memory.facts.erasures`).
- ``extraction_queue``: turn-pairs stored but not yet extracted, with their token counts: the
  background lane's durable, shared work list (:mod:`memroute.memory.facts.queue`). Every
  replica enqueues here, so a user's threshold counts all their turns whichever replica
  answered them, and a restart loses none.
- ``fact_keys``: open-vocabulary keys (``extraction.keys=open``): the value-free description
  each key of a user was first proposed with, so a later proposal is compared with the key's
  words and description (:mod:`memroute.memory.facts.key_registry`). Erased with the facts.

Indexes:

- ``facts_active``: UNIQUE ``(user_id, key) WHERE status = 'active'``. At most one active row
  per user and key, enforced by the database whatever the writer; and session start
  (``active(user)``) is one range scan of it that already comes out in key order.
- ``facts_user_key``: ``(user_id, key, recorded_at, id)``: a key's timeline and ``as_of`` read
  in order; erasure of a user (equality) or a tenant (a ``user_id`` range) uses its prefix.

Enumerations and lifecycle rules are CHECK constraints, so a bad row cannot be written by any
client: an active row has no end, an ended row has both ends, only ephemeral rows expire, only
retracted rows have ``retracted_at``, and neither axis runs backwards.

``user_id`` and ``key`` use the bytewise ``C`` collation on PostgreSQL (SQLite compares bytes
already): keys sort alike on both back ends, and ``tenant:`` .. ``tenant;`` is exactly a
tenant's users whatever the database's locale.
"""

from __future__ import annotations

import logging
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from memroute.errors import ConfigError
from memroute.memory.facts.types import CATEGORIES, EPHEMERAL, FACT_FIELDS, SOURCES, STATUSES

log = logging.getLogger(__name__)

WRITE_OPTION = "memroute_facts_write"  # SQLite: this connection's transactions BEGIN IMMEDIATE
SCHEMA_LOCK_KEY = 0x6D656D726F757465  # PostgreSQL: serializes concurrent create_all ("memroute")

metadata = sa.MetaData()

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # SQLite: a rowid alias
_TEXT_ID = sa.String(128).with_variant(sa.String(128, collation="C"), "postgresql")
_KEY = sa.String(128).with_variant(sa.String(128, collation="C"), "postgresql")
ACTIVE_SQL = "status = 'active'"  # a literal, so both planners can match the partial index


def _one_of(column: str, names: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(n) for n in names)})"


facts = sa.Table(
    "facts",
    metadata,
    sa.Column("id", _ID, sa.Identity(), primary_key=True),
    sa.Column("user_id", _TEXT_ID, nullable=False),
    sa.Column("key", _KEY, nullable=False),
    sa.Column("value", sa.Text(), nullable=False),
    sa.Column("category", sa.String(16), nullable=False),
    sa.Column("source", sa.String(16), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("valid_from", sa.Double(), nullable=False),
    sa.Column("valid_until", sa.Double()),
    sa.Column("recorded_at", sa.Double(), nullable=False),
    sa.Column("ended_at", sa.Double()),
    sa.Column("expires_at", sa.Double()),
    sa.Column("retracted_at", sa.Double()),
    sa.Column("superseded_by", _ID, sa.ForeignKey("facts.id", name="facts_superseded_by_fk")),
    sa.Column("turn_id", sa.BigInteger()),
    sa.CheckConstraint(_one_of("category", CATEGORIES), name="facts_category"),
    sa.CheckConstraint(_one_of("source", SOURCES), name="facts_source"),
    sa.CheckConstraint(_one_of("status", STATUSES), name="facts_status"),
    sa.CheckConstraint("length(value) > 0", name="facts_value"),
    sa.CheckConstraint(
        "(status = 'active' AND valid_until IS NULL AND ended_at IS NULL AND superseded_by IS NULL)"
        " OR (status <> 'active' AND valid_until IS NOT NULL AND ended_at IS NOT NULL)",
        name="facts_lifecycle",
    ),
    sa.CheckConstraint(
        "(status = 'retracted' AND retracted_at IS NOT NULL) "
        "OR (status <> 'retracted' AND retracted_at IS NULL)",
        name="facts_retraction",
    ),
    sa.CheckConstraint(
        f"(category = '{EPHEMERAL}' AND expires_at IS NOT NULL) "
        f"OR (category <> '{EPHEMERAL}' AND expires_at IS NULL)",
        name="facts_expiry",
    ),
    sa.CheckConstraint(
        "(valid_until IS NULL OR valid_until >= valid_from) "
        "AND (ended_at IS NULL OR ended_at >= recorded_at) "
        "AND (retracted_at IS NULL OR retracted_at >= recorded_at)",
        name="facts_time_order",
    ),
    sqlite_autoincrement=True,
)
sa.Index(
    "facts_active", facts.c.user_id, facts.c.key, unique=True,
    sqlite_where=sa.text(ACTIVE_SQL), postgresql_where=sa.text(ACTIVE_SQL),
)
sa.Index("facts_user_key", facts.c.user_id, facts.c.key, facts.c.recorded_at, facts.c.id)

fact_locks = sa.Table(
    "fact_locks",
    metadata,
    sa.Column("user_id", sa.String(128), primary_key=True),
    sa.Column("owner", sa.String(200), nullable=False),
    sa.Column("expires_at", sa.Double(), nullable=False),
    sqlite_with_rowid=False,
)

fact_versions = sa.Table(
    "fact_versions",
    metadata,
    sa.Column("user_id", _TEXT_ID, primary_key=True),
    sa.Column("token", sa.BigInteger(), nullable=False),
)

recent_turns = sa.Table(
    "recent_turns",
    metadata,
    sa.Column("user_id", _TEXT_ID, primary_key=True),
    sa.Column("turn_id", sa.BigInteger(), primary_key=True),  # TurnPair.id
    sa.Column("session_id", sa.String(256), nullable=False),
    sa.Column("turn_index", sa.Integer(), nullable=False),
    sa.Column("session_time", sa.BigInteger(), nullable=False),
    sa.Column("created_at", sa.Double(), nullable=False),
    sa.Column("source_model", sa.String(200), nullable=False),
    sa.Column("text", sa.Text(), nullable=False),
)
sa.Index("recent_turns_order", recent_turns.c.user_id, recent_turns.c.session_time,
         recent_turns.c.created_at)

erasures = sa.Table(
    "erasures",
    metadata,
    sa.Column("id", _ID, sa.Identity(), primary_key=True),
    sa.Column("digest", sa.String(64), nullable=False),  # sha256 of the user id or tenant
    sa.Column("erased_at", sa.Double(), nullable=False),
    sqlite_autoincrement=True,
)
sa.Index("erasures_digest", erasures.c.digest, erasures.c.id)

extraction_queue = sa.Table(
    "extraction_queue",
    metadata,
    sa.Column("user_id", _TEXT_ID, primary_key=True),
    sa.Column("turn_id", sa.BigInteger(), primary_key=True),  # TurnPair.id
    sa.Column("tokens", sa.Integer(), nullable=False),
    sa.Column("session_time", sa.BigInteger(), nullable=False),
    sa.Column("created_at", sa.Double(), nullable=False),
    sa.Column("pair", sa.Text(), nullable=False),  # the TurnPair as JSON (journal codec)
)

fact_keys = sa.Table(
    "fact_keys",
    metadata,
    sa.Column("user_id", _TEXT_ID, primary_key=True),
    sa.Column("key", _KEY, primary_key=True),
    sa.Column("description", sa.String(160), nullable=False),
    sa.Column("recorded_at", sa.Double(), nullable=False),
)

# The columns in Fact's field order: a row is Fact(*row).
FACT_COLUMNS = tuple(facts.c[name] for name in FACT_FIELDS)
IS_ACTIVE = sa.text(ACTIVE_SQL)


def engine_url(url: str, backend: str) -> str:
    """The SQLAlchemy URL: ``postgresql://`` means psycopg 3 (psycopg2 is not installed)."""
    if backend == "postgresql" and url.startswith("postgresql://"):
        return "postgresql+psycopg://" + url[len("postgresql://"):]
    return url


def open_engine(url: str, backend: str, *, busy_timeout_s: float, pool_size: int) -> Engine:
    """A pooled engine; for SQLite every connection is set up as the journal's is."""
    if backend == "postgresql":
        return sa.create_engine(engine_url(url, backend), pool_pre_ping=True,
                                pool_size=pool_size, max_overflow=2 * pool_size)
    return _sqlite_engine(url, busy_timeout_s, pool_size)


def _sqlite_engine(url: str, busy_timeout_s: float, pool_size: int) -> Engine:
    target = sa.engine.make_url(url)
    path = Path(target.database or "")
    if path.is_dir():
        raise ConfigError(f"cannot use {path} for facts: it is a directory", field="facts.url")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the folder of {path}: {exc.strerror or exc}",
                          field="facts.url") from exc
    engine = sa.create_engine(
        target, connect_args={"timeout": busy_timeout_s}, pool_size=pool_size,
        max_overflow=2 * pool_size,
    )
    busy_ms = int(busy_timeout_s * 1000)

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_conn, _record) -> None:
        # SQLAlchemy's recipe for pysqlite: the driver emits no BEGIN of its own ...
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout = {busy_ms}")
            mode = cur.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise ConfigError(f"SQLite could not switch {path} to WAL mode (got {mode!r})",
                                  field="facts.url")
            # In WAL mode FULL fsyncs the log at every commit: a committed fact survives a crash.
            cur.execute("PRAGMA synchronous = FULL")
            cur.execute("PRAGMA foreign_keys = ON")
        finally:
            cur.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(conn) -> None:
        # ... and the begin hook emits it: writers take the write lock up front (BEGIN
        # IMMEDIATE, waiting busy_timeout for it), so a read-then-write never deadlocks.
        write = conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def create_schema(write_engine: Engine, backend: str) -> None:
    """Create what is missing (idempotent, safe when several stores start at once) and check
    that an existing ``facts`` table is ours."""
    tables = [facts, fact_versions, recent_turns, extraction_queue, erasures, fact_keys]
    if backend == "sqlite":
        tables.append(fact_locks)
    with write_engine.begin() as conn:
        if backend == "postgresql":  # DDL is transactional there; one creator at a time
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(SCHEMA_LOCK_KEY)))
        metadata.create_all(conn, tables=tables, checkfirst=True)
        found = {c["name"] for c in sa.inspect(conn).get_columns("facts")}
    missing = sorted(set(facts.c.keys()) - found)
    if missing:
        raise ConfigError(
            f"the database already has a 'facts' table that is not the fact store's (missing "
            f"columns {missing}); choose another database or file",
            field="facts.url",
        )


__all__ = [
    "ACTIVE_SQL",
    "FACT_COLUMNS",
    "IS_ACTIVE",
    "WRITE_OPTION",
    "create_schema",
    "engine_url",
    "extraction_queue",
    "fact_keys",
    "fact_locks",
    "fact_versions",
    "facts",
    "metadata",
    "open_engine",
    "recent_turns",
]
