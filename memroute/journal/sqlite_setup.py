"""The journal's SQLite file: opened in WAL mode with ``synchronous=FULL``, schema, transactions.

``synchronous=FULL`` in WAL mode fsyncs the write-ahead log on every commit, so a committed
transaction survives a crash or power loss. Opening checks that the file is writable (it takes
the write lock once) and is a memroute journal, so a wrong path fails at start-up with a
:class:`ConfigError` naming ``journal.path``, not on the first request.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

from memroute.errors import ConfigError, MemrouteError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 10.0
PENDING = "flushed_at IS NULL AND failed_at IS NULL"
# AUTOINCREMENT: a seq is never reused, even after the newest row was deleted (see Journal).
SCHEMA = f"""
CREATE TABLE entries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    pair_id INTEGER NOT NULL UNIQUE,
    user_id TEXT NOT NULL,
    payload TEXT NOT NULL,
    appended_at REAL NOT NULL,
    flushed_at REAL,
    failed_at REAL,
    error TEXT
);
CREATE INDEX entries_pending ON entries(seq) WHERE {PENDING};
CREATE INDEX entries_pending_user ON entries(user_id, seq) WHERE {PENDING};
PRAGMA user_version = {SCHEMA_VERSION};
"""
# Erasure (added without a version bump, like the idempotency table: ``IF NOT EXISTS`` on every
# open, and older code that ignores them still reads the file). ``erasures`` holds one tombstone
# per erased user or tenant: entries of that target with ``seq <= erasures.seq`` are erased data
# (see memroute.journal.sqlite_journal). ``erasure_audit`` records who erased what, when and how
# many rows, never any content; ``completed_at`` stays NULL until every store was erased.
ERASURE_SCHEMA = """
CREATE TABLE IF NOT EXISTS erasures (
    scope TEXT NOT NULL CHECK (scope IN ('user', 'tenant')),
    target TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (scope, target)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS erasure_audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    actor TEXT NOT NULL,
    scope TEXT NOT NULL CHECK (scope IN ('user', 'tenant')),
    target TEXT NOT NULL,
    boundary_seq INTEGER NOT NULL,
    store_rows INTEGER,
    journal_rows INTEGER NOT NULL,
    idempotency_rows INTEGER,
    completed_at REAL
);
CREATE INDEX IF NOT EXISTS erasure_audit_target ON erasure_audit(target, id)
"""
# An entry the journal never hands out again: at or below its user's or its tenant's tombstone
# (the tenant of ``tenant:user`` is the text before the first ':').
NOT_ERASED = (
    "NOT EXISTS (SELECT 1 FROM erasures e WHERE e.scope = 'user' AND e.target = entries.user_id "
    "AND entries.seq <= e.seq) AND NOT EXISTS (SELECT 1 FROM erasures e WHERE e.scope = 'tenant' "
    "AND e.target = substr(entries.user_id, 1, instr(entries.user_id, ':') - 1) "
    "AND entries.seq <= e.seq)"
)


class JournalError(MemrouteError):
    """The journal could not be read or written (disk full, I/O error, corrupt page)."""

    status = 500
    code = "journal_error"


def open_journal_db(path: Path) -> sqlite3.Connection:
    """A connection to ``path`` (created if missing), shareable across threads under a lock."""

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
    conn = None
    try:
        conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_S
        )
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise bad(f"SQLite could not switch it to WAL mode (got {mode!r})")
        conn.execute("PRAGMA synchronous=FULL")
        # BEGIN IMMEDIATE takes the write lock: a read-only file fails here, not on append.
        with write_transaction(conn, path):
            _create_or_check_schema(conn, bad)
    except (sqlite3.DatabaseError, JournalError) as exc:
        if conn is not None:
            conn.close()
        cause = exc.__cause__ or exc
        raise bad(
            f"{cause} (not a writable SQLite journal; move it away or choose another path)"
        ) from exc
    except BaseException:
        if conn is not None:
            conn.close()
        raise
    fsync_dir(path.parent)  # the new file's directory entry must survive a crash too
    return conn


def _create_or_check_schema(
    conn: sqlite3.Connection, bad: Callable[[str], ConfigError]
) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if version == 0 and not tables:
        # One statement at a time: executescript() would COMMIT the open transaction.
        for stmt in filter(str.strip, SCHEMA.split(";")):
            conn.execute(stmt)
    elif version != SCHEMA_VERSION or "entries" not in tables:
        raise bad(
            f"it is a SQLite file but not a memroute journal (user_version={version}, "
            f"tables={sorted(tables)})"
        )
    for stmt in filter(str.strip, ERASURE_SCHEMA.split(";")):
        conn.execute(stmt)


@contextlib.contextmanager
def write_transaction(conn: sqlite3.Connection, path: Path) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` .. ``COMMIT`` (the fsync); rolled back on any error.

    SQLite errors become :class:`JournalError`. The caller serializes use of ``conn``.
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise JournalError(f"journal {path}: cannot start a write: {exc}") from exc
    try:
        yield conn
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        _rollback(conn, path)
        raise JournalError(f"journal {path}: write failed: {exc}") from exc
    except BaseException:
        _rollback(conn, path)
        raise


def _rollback(conn: sqlite3.Connection, path: Path) -> None:
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except sqlite3.Error:
        log.exception("journal %s: rollback failed", path)


def fsync_dir(path: Path) -> None:
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
