"""What differs between the Milvus builds the store runs on (Milvus Lite, 2.3 and 2.4+ servers).

Found once when a store opens, from the server's version string, so the write path can take the
form that is correct on that build instead of assuming the newest.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any


def upsert_keeps_partition_key(version: str) -> bool:
    """False for Milvus 2.3 servers: they route an upsert's rows by the primary key's hash, not
    the partition key's, so a user's filtered reads miss most of them (measured on the PyPI
    ``milvus`` 2.3.5 server: 2 of 30 upserted rows found by their user, 30 of 30 inserted ones).
    Milvus Lite (``milvus_lite-...``) and 2.4+ servers route upserts correctly."""
    m = re.match(r"v?(\d+)\.(\d+)", version.strip())
    if m is None:  # Lite, or a build that names itself otherwise
        return True
    return (int(m.group(1)), int(m.group(2))) >= (2, 4)


def replace_rows(client: Any, collection: str, rows: Sequence[dict[str, Any]], *,
                 timeout: float) -> None:
    """An upsert as delete + insert (for builds whose upsert misroutes). Not atomic: a crash
    between the two loses the rows, which the journal then writes again (it marks an entry
    flushed only after this returns), and a concurrent read may miss a row being rewritten
    with the same content."""
    ids = ", ".join(str(int(r["id"])) for r in rows)
    client.delete(collection, filter=f"id in [{ids}]", timeout=timeout)
    client.insert(collection, list(rows), timeout=timeout)
