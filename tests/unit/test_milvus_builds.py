"""Which Milvus builds get a real upsert, and the delete + insert form the others get."""

from __future__ import annotations

import pytest

from memroute.memory.milvus_builds import replace_rows, upsert_keeps_partition_key


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


def test_replace_rows_deletes_the_ids_then_inserts_the_rows():
    calls = []

    class Client:
        def delete(self, collection, *, filter, timeout):
            calls.append(("delete", collection, filter, timeout))

        def insert(self, collection, rows, *, timeout):
            calls.append(("insert", collection, [r["id"] for r in rows], timeout))

    replace_rows(Client(), "c", [{"id": 5, "v": 1}, {"id": -7, "v": 2}], timeout=3.0)
    assert calls == [("delete", "c", "id in [5, -7]", 3.0), ("insert", "c", [5, -7], 3.0)]
