"""A real Milvus server (PyPI ``milvus`` 2.3, installed by ``make milvus-server`` in
``.venv-milvus``) on 127.0.0.1 for the server suites, through ``infra/milvus_loopback.py``.

One server per test session: its first start takes ~10 s (it unpacks its binaries), and each test
uses collections of its own, so tests never see each other's rows.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.integration import serving

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "infra" / "milvus_loopback.py"
BINARY = Path(os.environ.get("MEMROUTE_MILVUS_SERVER", ROOT / ".venv-milvus" / "bin" / "milvus-server"))


class LoopbackMilvus:
    """The launcher as a child process: ``start`` returns once the server answers on ``uri``."""

    def __init__(self, data: Path, port: int | None = None) -> None:
        self.data = data
        self.port = port or serving.free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 180.0) -> float:
        if not BINARY.is_file():
            pytest.fail(f"{BINARY} is missing: `make milvus-server` installs the Milvus server "
                        "(or set MEMROUTE_MILVUS_SERVER)", pytrace=False)
        self.data.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, str(LAUNCHER), "--data", str(self.data), "--port", str(self.port),
             "--milvus-server", str(BINARY)],
            stdout=subprocess.PIPE, stderr=open(self.data / "launcher.log", "ab"), text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # "ready ..." or EOF when the launcher gave up
        if not line.startswith("ready"):
            self.proc.wait(timeout_s)
            log = (self.data / "launcher.log").read_text()[-2000:]
            pytest.fail(f"the Milvus server did not start:\n{log}", pytrace=False)
        return time.perf_counter() - t0

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory):
    server = LoopbackMilvus(tmp_path_factory.mktemp("milvus-server"))
    server.start()
    yield server
    server.stop()


def collection_name(prefix: str = "t") -> str:
    """A collection of the test's own on the shared server."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"
