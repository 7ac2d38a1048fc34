"""The reliability suite's mock-tier app in a process of its own, to be killed with SIGKILL.

    python tests/reliability/mock_server.py STATE_DIR PORT [RAY_TEMP_DIR] [MEMORY_URI]
    python tests/reliability/mock_server.py milvus DATA_DIR PORT    # milvus-lite server alone

Deploys ``serving.mock_serve_config`` (the conftest's keys and tier-0 rules; Milvus Lite and the
journal under STATE_DIR, or the Milvus at MEMORY_URI) on a loopback Ray node of its own whose
session files live under RAY_TEMP_DIR (so every process of that node names it in its command
line and a test can find them all), prints ``READY <url>`` once /healthz answers, then blocks.
SIGTERM / SIGINT shut Serve and Ray down in order; SIGKILL is what the crash tests send. If
the parent (the test) goes away, the process group is killed with it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for `tests.*`

from tests.integration import serving
from tests.reliability.conftest import ADMIN, KEYS, TIER0_RULES


def build_config(state: Path, port: int, memory_uri: str | None):
    from memroute.config.journal import JournalConfig
    from memroute.config.schema import MemoryConfig

    extra = {}
    if memory_uri:
        extra["memory"] = MemoryConfig(uri=memory_uri, collection="memroute_mock")
    # max_backoff_s 1: a store that answers again is written to within a second or so
    journal = JournalConfig(path=str(state / "journal.sqlite3"), max_backoff_s=1.0)
    return serving.mock_serve_config(state, port, keys=KEYS, admin_keys=[ADMIN],
                                     tier0_rules=TIER0_RULES, journal=journal, **extra)


def die_with_parent() -> None:
    """If the test process goes (killed, crashed), take this whole process group with it."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()


def milvus(data_dir: str, port: int) -> None:
    """``milvus-lite server --host 127.0.0.1`` (blocks), for the store-process faults."""
    from milvus_lite.adapter.grpc.server import run_server

    run_server(data_dir, host="127.0.0.1", port=port)


def main(argv: list[str]) -> None:
    die_with_parent()
    if argv[1] == "milvus":
        milvus(argv[2], int(argv[3]))
        return
    state, port = Path(argv[1]), int(argv[2])
    ray_tmp = argv[3] if len(argv) > 3 and argv[3] else None
    memory_uri = argv[4] if len(argv) > 4 and argv[4] else None
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray
    from ray import serve

    from serve.app import build_app

    cfg = build_config(state, port, memory_uri)
    from serve.loopback import runtime_env

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING",
             _temp_dir=ray_tmp, runtime_env=runtime_env())
    serve.start(http_options={"host": "127.0.0.1", "port": port},
                logging_config={"enable_access_log": False})
    serve.run(build_app(cfg), name=cfg.name, route_prefix="/", blocking=False)
    url = f"http://127.0.0.1:{port}"
    serving.wait_healthy(url)
    print(f"READY {url}", flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    serve.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main(sys.argv)
