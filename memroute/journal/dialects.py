"""The journal's database, a SQLite file or a PostgreSQL URL: opening it, running a
transaction, and every place where the two dialects differ (the queries are written once, in
:mod:`memroute.journal.store` and :mod:`memroute.journal.idempotency`):

- **Durability.** SQLite: WAL with ``synchronous=FULL`` (the log fsync'd at every commit),
  checked writable and a memroute journal at open, so a wrong path fails at start-up naming
  ``journal.path``. PostgreSQL: ``COMMIT`` waits for the WAL flush (``synchronous_commit =
  on``); the seq identity must have ``CACHE 1`` (one global seq order).
- **Locking.** SQLite: writes ``BEGIN IMMEDIATE`` (one write lock serializes appends and
  erasures); this process's writers queue on a lock rather than poll the busy handler.
  PostgreSQL (READ COMMITTED): appends hold shared advisory locks of their users and tenants,
  an erasure the exclusive one of its target; deadlocks are retried.
- **Upserts**, the highest seq ever allocated, a user id's tenant and the clock, in SQL.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.elements import ColumnElement

from memroute.errors import ConfigError
from memroute.journal.records import JournalError
from memroute.journal.schema import (
    POSTGRES_PREFIX,
    SQLITE_PREFIX,
    JournalTables,
    journal_tables,
)
from memroute.namespace import SEPARATOR

log = logging.getLogger(__name__)

T = TypeVar("T")
SCHEMA_VERSION = 1  # SQLite user_version; columns and tables added since are added in place
BUSY_TIMEOUT_S = 10.0
POOL_SIZE = 4
DEADLOCK_RETRIES = 5
RETRY_SQLSTATES = frozenset({"40P01", "40001"})  # deadlock_detected, serialization_failure
SCHEMA_LOCK_KEY = 0x6D656D6A6F75726E  # "memjourn": one schema creator at a time
_LOCK_DOMAIN = b"memroute.journal.erasure\x1f"
_WRITE = "memroute_journal_write"  # SQLite: this transaction BEGINs IMMEDIATE
POSTGRES_URLS = ("postgresql://", "postgresql+psycopg://")
_CLAIM_COLUMNS = {"claimed_by": "TEXT", "lease_until": "REAL", "claimed_seq": "INTEGER"}


def scope_lock_key(scope: str, target: str) -> int:
    """The advisory lock of erasure scope ``scope`` (``user`` / ``tenant``) of ``target``."""
    data = _LOCK_DOMAIN + scope.encode() + b"\x1f" + target.encode("utf-8")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big", signed=True)


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


class Database:
    """An engine on the journal's database and its dialect's rules (module doc). Thread-safe:
    pooled connections, one per transaction."""

    def __init__(self, engine: Engine, tables: JournalTables, path: Path | str) -> None:
        # path: the SQLite file, or the URL without its password (errors, stats, the config)
        self.engine, self.tables, self.path, self.name = engine, tables, path, str(path)
        self.is_sqlite = engine.dialect.name == "sqlite"
        # SQLite's one write lock, taken in this process first (see the module doc)
        self._write_lock = threading.Lock() if self.is_sqlite else contextlib.nullcontext()
        self._reader = engine if self.is_sqlite else engine.execution_options(
            isolation_level="AUTOCOMMIT")  # PostgreSQL reads: one statement, no BEGIN/COMMIT
        self.closed = False

    # ------------------------------------------------------------ transactions
    def transact(self, what: str, fn: Callable[[Connection], T]) -> T:
        """``fn(conn)`` in one write transaction, committed when this returns; retried on a
        PostgreSQL deadlock (the whole transaction was rolled back); errors -> JournalError."""
        for attempt in range(1, DEADLOCK_RETRIES + 1):
            self.check_open()
            try:
                with self._write_lock, self.engine.execution_options(
                        **{_WRITE: True}).begin() as conn:
                    return fn(conn)
            except sa.exc.DBAPIError as exc:
                state = getattr(exc.orig, "sqlstate", None)
                if state in RETRY_SQLSTATES and attempt < DEADLOCK_RETRIES:
                    log.info("journal %s: %s hit %s, retrying (%d)", self.name, what, state,
                             attempt)
                    time.sleep(0.01 * attempt)
                    continue
                raise self.error(f"{what} failed", exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def read(self, stmt: sa.Executable) -> list[tuple[Any, ...]]:
        self.check_open()
        try:
            with self._reader.connect() as conn:
                return [tuple(r) for r in conn.execute(stmt).all()]
        except sa.exc.DBAPIError as exc:
            raise self.error("read failed", exc) from exc

    def error(self, what: str, exc: sa.exc.DBAPIError) -> JournalError:
        cause = exc.orig if exc.orig is not None else exc
        return JournalError(f"journal {self.name}: {what}: {type(cause).__name__}: {cause}")

    def check_open(self) -> None:
        if self.closed:
            raise JournalError(f"journal {self.name} is closed")

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.engine.dispose()

    # -------------------------------------------------------- dialect differences
    def insert(self, table: sa.Table) -> Any:
        """The dialect's ``INSERT`` (``on_conflict_do_nothing`` / ``_do_update``, ``excluded``)."""
        return (sqlite if self.is_sqlite else postgresql).insert(table)

    def tenant_of(self, user_id: ColumnElement[str]) -> ColumnElement[str]:
        """The text before the first ':' ('' or NULL without one: no tenant matches it)."""
        if self.is_sqlite:  # substr(x, 1, -1) is ''
            return sa.func.substr(user_id, 1, sa.func.instr(user_id, SEPARATOR) - 1)
        return sa.case((sa.func.strpos(user_id, SEPARATOR) > 0,
                        sa.func.split_part(user_id, SEPARATOR, 1)))

    def now(self) -> ColumnElement[float]:
        """The database's clock in epoch seconds: replicas with skewed clocks agree on leases."""
        if self.is_sqlite:
            return sa.literal_column("((julianday('now') - 2440587.5) * 86400.0)")
        return sa.literal_column("extract(epoch FROM statement_timestamp())::float8")

    def last_allocated_seq(self, conn: Connection) -> int:
        """The highest seq ever allocated, deleted rows included (0: none)."""
        if self.is_sqlite:  # AUTOINCREMENT's high-water mark
            row = conn.execute(sa.text("SELECT seq FROM sqlite_sequence WHERE name = :t"),
                               {"t": self.tables.entries.name}).first()
            return int(row[0]) if row else 0
        return int(conn.execute(sa.text(
            "SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence(:t, 'seq')"
            "::regclass), 0)"), {"t": self.tables.entries.name}).scalar_one())

    def lock_users(self, conn: Connection, user_ids: Iterable[str]) -> None:
        """An append: an erasure of any of these users or tenants waits for it, or it waits."""
        if not self.is_sqlite:  # SQLite: BEGIN IMMEDIATE serialized us with erasures already
            for key in erasure_lock_keys(user_ids):
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock_shared(key)))

    def lock_erasure(self, conn: Connection, scope: str, target: str) -> None:
        """An erasure: appends of the target in flight commit first; later ones wait for us."""
        if not self.is_sqlite:
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(scope_lock_key(scope, target))))


# ------------------------------------------------------------------------------ opening
def open_database(target: str | os.PathLike[str], *, pool_size: int = POOL_SIZE) -> Database:
    """The journal's database: a ``postgresql://`` URL, else a SQLite file path (created with
    its folder if missing); its schema created or checked (ConfigError when unusable)."""
    if isinstance(target, str) and target.startswith(POSTGRES_URLS):
        return open_postgres(target, pool_size)
    return open_sqlite(target, pool_size)


def open_postgres(url: str, pool_size: int = POOL_SIZE) -> Database:
    sa_url = sa.engine.make_url("postgresql+psycopg://" + url.partition("://")[2])
    engine = sa.create_engine(sa_url, pool_pre_ping=True, pool_size=pool_size,
                              max_overflow=2 * pool_size)
    # shown in errors, stats and JournalConfig.path (the flusher's check): no password
    db = Database(engine, journal_tables(POSTGRES_PREFIX),
                  sa_url.render_as_string(hide_password=True))
    try:
        db.transact("open the journal", lambda conn: _postgres_schema(conn, db))
    except BaseException:
        db.close()
        raise
    return db


def _postgres_schema(conn: Connection, db: Database) -> None:
    t = db.tables
    conn.execute(sa.select(sa.func.pg_advisory_xact_lock(SCHEMA_LOCK_KEY)))
    t.metadata.create_all(conn, checkfirst=True)  # the missing tables (with their indexes)
    found = {c["name"] for c in sa.inspect(conn).get_columns(t.entries.name)}
    missing = sorted(set(t.entries.c.keys()) - found)
    if missing:
        raise ConfigError(
            f"{db.name} already has a '{t.entries.name}' table that is not a memroute "
            f"journal's (missing columns {missing}); choose another database",
            field="journal.url")
    for table in t.all:
        for index in table.indexes:
            index.create(conn, checkfirst=True)
    cache = conn.execute(sa.text(
        "SELECT s.seqcache FROM pg_sequence s "
        "WHERE s.seqrelid = pg_get_serial_sequence(:t, 'seq')::regclass"),
        {"t": t.entries.name}).scalar()
    if cache != 1:  # seqs must come out in one global order (see the erasure rule)
        raise ConfigError(
            f"{db.name}: the sequence of {t.entries.name}.seq has CACHE {cache}; the journal "
            f"needs CACHE 1 (ALTER TABLE {t.entries.name} ALTER seq SET CACHE 1)",
            field="journal.url")


def open_sqlite(target: str | os.PathLike[str], pool_size: int = POOL_SIZE) -> Database:
    path = Path(target).expanduser().resolve()

    def bad(why: str) -> ConfigError:
        return ConfigError(f"cannot use {path} as the journal: {why}", field="journal.path")

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise bad("a part of its folder path is a file, not a folder") from exc
    except OSError as exc:
        raise bad(f"cannot create its folder ({exc.strerror or exc})") from exc
    if path.is_dir():
        raise bad("it is a directory")
    engine = sa.create_engine(f"sqlite:///{path}", connect_args={
        "timeout": BUSY_TIMEOUT_S, "check_same_thread": False},
        pool_size=pool_size, max_overflow=2 * pool_size)
    sa.event.listen(engine, "connect", _sqlite_connect)
    sa.event.listen(engine, "begin", _sqlite_begin)
    db = Database(engine, journal_tables(SQLITE_PREFIX), path)
    try:
        # BEGIN IMMEDIATE takes the write lock: a read-only file fails here, not on append.
        db.transact("open the journal", lambda conn: _sqlite_schema(conn, db, bad))
    except (JournalError, sa.exc.DBAPIError, sqlite3.Error) as exc:
        db.close()
        raise bad(f"{exc.__cause__ or exc} (not a writable SQLite journal; move it away or "
                  "choose another path)") from exc
    except BaseException:
        db.close()
        raise
    _fsync_dir(path.parent)  # the new file's directory entry must survive a crash too
    return db


def _sqlite_connect(dbapi_conn: Any, _record: object) -> None:
    # SQLAlchemy's recipe for pysqlite: the driver emits no BEGIN of its own (_sqlite_begin does)
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    try:
        mode = cur.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise JournalError(f"SQLite could not switch it to WAL mode (got {mode!r})")
        cur.execute("PRAGMA synchronous = FULL")  # in WAL mode: the log fsync'd at every commit
        cur.execute("PRAGMA foreign_keys = ON")  # idempotency_users goes with its key
    finally:
        cur.close()


def _sqlite_begin(conn: Connection) -> None:
    # Writers take the write lock up front, so a read-then-write never deadlocks.
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_WRITE)
                         else "BEGIN")


def _sqlite_schema(conn: Connection, db: Database, bad: Callable[[str], ConfigError]) -> None:
    t = db.tables
    version = conn.exec_driver_sql("PRAGMA user_version").scalar()
    tables = set(sa.inspect(conn).get_table_names())
    if version == 0 and not tables:
        conn.exec_driver_sql(f"PRAGMA user_version = {SCHEMA_VERSION}")
    elif version != SCHEMA_VERSION or t.entries.name not in tables:
        raise bad(f"it is a SQLite file but not a memroute journal (user_version={version}, "
                  f"tables={sorted(tables)})")
    else:  # a file of an earlier version: the lease columns came later (no rewrite needed)
        found = {c["name"] for c in sa.inspect(conn).get_columns(t.entries.name)}
        for name, kind in _CLAIM_COLUMNS.items():
            if name not in found:
                conn.exec_driver_sql(f"ALTER TABLE {t.entries.name} ADD COLUMN {name} {kind}")
    t.metadata.create_all(conn, checkfirst=True)
    for table in t.all:
        for index in table.indexes:
            index.create(conn, checkfirst=True)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # not supported on this platform/filesystem
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
