"""A throwaway PostgreSQL server for integration tests, and its pytest fixtures.

:class:`PostgresServer` runs ``initdb`` and ``pg_ctl`` from ``MEMROUTE_PG_BIN`` (default
``/usr/lib/postgresql/15/bin``) in a fresh folder under /tmp, listening on 127.0.0.1 only (a
free port, its unix socket in that folder), trust authentication, fsync on (the server's
default: what is tested is what runs). ``initdb`` refuses root, so as root both run as the
``postgres`` user (``runuser``), in a folder chowned to it. Stopped with ``pg_ctl stop -m fast``
and the folder removed at teardown.

Use from a test module::

    from tests.integration.postgres import postgres_server, postgres_url  # noqa: F401

``postgres_server`` is session-scoped (one server per test run, started on first use);
``postgres_url`` is a fresh, empty database per test
(``postgresql+psycopg://postgres@127.0.0.1:PORT/DB``). Both skip, saying why, when the
binaries or the unprivileged user are missing.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

PG_BIN = Path(os.environ.get("MEMROUTE_PG_BIN", "/usr/lib/postgresql/15/bin"))
SUPERUSER = "postgres"
START_TIMEOUT_S = 10.0
_names = itertools.count(1)


class PostgresUnavailable(Exception):
    """This machine cannot run a throwaway server (the reason is the message): tests skip."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One throwaway server: :meth:`start` (timed in ``start_s``), :meth:`create_database`,
    :meth:`stop`."""

    def __init__(self, bin_dir: Path = PG_BIN) -> None:
        self.bin_dir = Path(bin_dir)
        self.dir: Path | None = None
        self.port: int | None = None
        self.start_s: float | None = None
        self._as_user: list[str] = []

    # -- setup ------------------------------------------------------------------------------

    def _check_machine(self) -> None:
        for tool in ("initdb", "pg_ctl", "postgres"):
            if not (self.bin_dir / tool).is_file():
                raise PostgresUnavailable(f"PostgreSQL binaries not found: no {self.bin_dir / tool}"
                                          " (set MEMROUTE_PG_BIN to the bin folder)")
        if os.geteuid() == 0:  # initdb and postgres refuse to run as root
            try:
                pwd.getpwnam(SUPERUSER)
            except KeyError as exc:
                raise PostgresUnavailable(
                    f"running as root and there is no unprivileged {SUPERUSER!r} user to run "
                    "initdb and the server as") from exc
            runuser = shutil.which("runuser")
            if runuser is None:
                raise PostgresUnavailable("running as root and runuser is not installed")
            self._as_user = [runuser, "-u", SUPERUSER, "--"]

    def _run(self, tool: str, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        cmd = [*self._as_user, str(self.bin_dir / tool), *args]
        done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "LC_ALL": "C.UTF-8"})
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr or done.stdout}")
        return done

    def start(self, timeout_s: float = START_TIMEOUT_S) -> PostgresServer:
        self._check_machine()
        began = time.perf_counter()
        self.dir = Path(tempfile.mkdtemp(prefix="memroute-pg-", dir="/tmp"))
        if self._as_user:
            entry = pwd.getpwnam(SUPERUSER)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        os.chmod(self.dir, 0o700)
        data = self.dir / "data"
        try:
            self._run("initdb", "-D", str(data), "-U", SUPERUSER, "--auth=trust",
                      "--encoding=UTF8", "--locale=C.UTF-8")
            for attempt in range(3):  # a free port can be taken before the server binds it
                self.port = _free_port()
                try:
                    self._run("pg_ctl", "-D", str(data), "-l", str(self.dir / "server.log"),
                              "-W", "-o", f"-c listen_addresses=127.0.0.1 -p {self.port} "
                              f"-k {self.dir}", "start")
                    self._wait_ready(timeout_s)
                    break
                except RuntimeError:
                    self._stop_server()
                    if attempt == 2:
                        raise
        except BaseException:
            self.stop()
            raise
        self.start_s = time.perf_counter() - began
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        import psycopg

        began = time.monotonic()
        pid_file = self.dir / "data" / "postmaster.pid"
        while True:
            try:
                with psycopg.connect(self.dsn("postgres"), connect_timeout=2):
                    return
            except psycopg.OperationalError as exc:
                waited = time.monotonic() - began
                # postmaster.pid goes when the server exits (its port was taken, say)
                if waited > timeout_s or (waited > 1.0 and not pid_file.exists()):
                    raise RuntimeError(
                        f"PostgreSQL did not accept connections after {waited:.1f} s: {exc}\n"
                        f"{self.log_tail()}") from exc
                time.sleep(0.05)

    # -- use --------------------------------------------------------------------------------

    def dsn(self, database: str) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def url(self, database: str) -> str:
        """The SQLAlchemy URL (psycopg 3)."""
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; its SQLAlchemy URL."""
        import psycopg

        name = name or f"t{os.getpid()}_{next(_names)}"
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        import psycopg

        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def log_tail(self, lines: int = 20) -> str:
        log = self.dir / "server.log" if self.dir else None
        if log is None or not log.exists():
            return "(no server log)"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])

    # -- teardown ---------------------------------------------------------------------------

    def _stop_server(self) -> None:
        if self.dir is None or not (self.dir / "data" / "postmaster.pid").exists():
            return
        cmd = [*self._as_user, str(self.bin_dir / "pg_ctl"), "-D", str(self.dir / "data"),
               "stop", "-m", "fast", "-w"]
        subprocess.run(cmd, check=False, capture_output=True, timeout=60)

    def stop(self) -> None:
        try:
            self._stop_server()
        finally:
            if self.dir is not None:
                shutil.rmtree(self.dir, ignore_errors=True)
                self.dir = None


@pytest.fixture(scope="session")
def postgres_server():
    """A running throwaway server for the whole session (skips when it cannot run here)."""
    server = PostgresServer()
    try:
        server.start()
    except PostgresUnavailable as exc:
        pytest.skip(f"no throwaway PostgreSQL: {exc}")
    print(f"\nthrowaway PostgreSQL on 127.0.0.1:{server.port} started in {server.start_s:.2f} s")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server):
    """A fresh empty database on the session's server, dropped after the test."""
    url = postgres_server.create_database()
    yield url
    postgres_server.drop_database(url)
