"""A Milvus Lite session stays quiet while it idles: the client's keepalive never earns a GOAWAY
"too_many_pings" from Lite's in-process gRPC server (pymilvus pings every 10 s, between calls
too; grpcio's server defaults refuse that and print an error line per GOAWAY), while a server
URI keeps pymilvus' pings."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memroute.memory.milvus_rows import LITE_GRPC_OPTIONS, client_options

ROOT = Path(__file__).resolve().parents[2]
# grpcio's server sends GOAWAY on the third ping too early (two strikes allowed); pymilvus'
# first ping, 10 s in, is not early, so with its defaults the GOAWAY comes ~40 s into an idle.
IDLE_S = 60

SESSION = textwrap.dedent("""
    import sys, time
    import numpy as np
    from memroute.config.schema import MemoryConfig
    from memroute.memory.milvus_store import MilvusMemoryStore
    from memroute.types import TurnPair

    pairs = [TurnPair("acme::alice", "s", i, f"q{i}", f"a{i}", 1_700_000_000) for i in range(4)]
    with MilvusMemoryStore(MemoryConfig(uri=sys.argv[1]), 4) as store:
        store.upsert(pairs, np.eye(4, dtype=np.float32))
        for idle_s in (float(sys.argv[2]), 5.0):  # long idle, a call, a short one, a call
            time.sleep(idle_s)
            print("count", store.count("acme::alice"), flush=True)
""")


def test_a_lite_file_gets_the_quiet_keepalive_and_a_server_pymilvus_default():
    opts = client_options("/tmp/m/milvus.db")["grpc_options"]
    assert opts == LITE_GRPC_OPTIONS and opts["grpc.keepalive_permit_without_calls"] == 0
    assert opts["grpc.keepalive_time_ms"] >= 300_000  # grpcio's server minimum during calls
    assert client_options("http://127.0.0.1:19530") == {}
    assert client_options("unix:/run/milvus.sock") == {}


def test_the_store_passes_the_options_to_its_client(tmp_path, monkeypatch):
    import pymilvus

    from memroute.config.schema import MemoryConfig
    from memroute.memory.milvus_store import MilvusMemoryStore

    seen = {}

    class Refused(Exception):
        pass

    def client(**kwargs):
        seen.update(kwargs)
        raise Refused

    monkeypatch.setattr(pymilvus, "MilvusClient", client)
    with pytest.raises(Refused):
        MilvusMemoryStore(MemoryConfig(uri=str(tmp_path / "m.db")), 4)
    assert seen["grpc_options"] == LITE_GRPC_OPTIONS


def test_an_idle_lite_session_prints_no_goaway(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", SESSION, str(tmp_path / "milvus.db"), str(IDLE_S)],
        cwd=ROOT, capture_output=True, text=True, timeout=IDLE_S + 300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["count", "4", "count", "4"]
    assert "GOAWAY" not in proc.stderr and "too_many_pings" not in proc.stderr, proc.stderr[-3000:]
