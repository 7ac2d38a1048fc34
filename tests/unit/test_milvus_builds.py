"""Which Milvus builds get a real upsert, the delete + insert form the others get, and the
requests each write mode sends."""

from __future__ import annotations

import pytest

from memroute.memory.milvus_builds import replace_rows, upsert_keeps_partition_key
from memroute.memory.milvus_writes import WRITE_BATCH, write_rows


@pytest.mark.parametrize("version, ok", [
    ("v2.3.5-lite", False),  # the PyPI `milvus` server: upserts misrouted by partition key
    ("v2.3.21", False),
    ("2.2.16", False),
    ("v2.4.0", True),
    ("v2.5.12", True),
    ("v3.0.0-beta", True),
    ("milvus_lite-3.2.2", True),  # Milvus Lite routes upserts right
    ("", True),
])
def test_upsert_is_used_where_the_build_routes_it_by_partition_key(version, ok):
    assert upsert_keeps_partition_key(version) is ok


class Client:
    def __init__(self):
        self.calls = []

    def delete(self, collection, *, filter, timeout):
        self.calls.append(("delete", collection, filter, timeout))

    def insert(self, collection, rows, *, timeout):
        self.calls.append(("insert", collection, [r["id"] for r in rows], timeout))

    def upsert(self, collection, rows, *, timeout):
        self.calls.append(("upsert", collection, [r["id"] for r in rows], timeout))


def test_replace_rows_deletes_the_ids_then_inserts_the_rows():
    client = Client()
    replace_rows(client, "c", [{"id": 5, "v": 1}, {"id": -7, "v": 2}], timeout=3.0)
    assert client.calls == [("delete", "c", "id in [5, -7]", 3.0), ("insert", "c", [5, -7], 3.0)]


@pytest.mark.parametrize("mode, requests", [
    ("insert", ["insert", "insert"]),  # known-new rows: no delete at all
    ("upsert", ["upsert", "upsert"]),
    ("replace", ["delete", "insert", "delete", "insert"]),
])
def test_write_rows_sends_the_mode_s_requests_in_batches(mode, requests):
    client = Client()
    rows = [{"id": i} for i in range(WRITE_BATCH + 1)]
    write_rows(client, "c", rows, mode=mode, timeout=2.0)
    assert [c[0] for c in client.calls] == requests
    written = [c[2] for c in client.calls if c[0] != "delete"]
    assert [len(w) for w in written] == [WRITE_BATCH, 1] and sum(written, []) == list(range(WRITE_BATCH + 1))


def test_an_unknown_write_mode_is_refused_before_any_request():
    client = Client()
    with pytest.raises(ValueError, match="write mode"):
        write_rows(client, "c", [{"id": 1}], mode="merge", timeout=1.0)
    assert client.calls == []
