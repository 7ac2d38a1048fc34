"""What a Milvus server read costs at each consistency level: the store's dense search on the
local 2.3 server (infra/milvus_loopback.py), one user of ``--users`` x ``--per-user`` rows,
``--reads`` searches per level, the levels interleaved round by round so load drifts hit all.

    python bench/bench_read_consistency.py                 # 20 x 500 rows, 200 reads per level

A Strong read waits until the query nodes have seen a time tick newer than the request (one
every 200 ms); Session waits for this process's own writes only (memory.read_consistency).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from machine import machine_info  # noqa: E402
from milvus_server import LoopbackMilvus  # noqa: E402 - the tests' launcher of the server

from memroute.config.schema import MemoryConfig  # noqa: E402
from memroute.memory import MilvusMemoryStore  # noqa: E402
from memroute.memory.milvus_rows import CONSISTENCY_LEVELS  # noqa: E402
from memroute.types import TurnPair  # noqa: E402

DIM = 384


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--per-user", type=int, default=500)
    ap.add_argument("--reads", type=int, default=200)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    server = LoopbackMilvus(Path(tempfile.mkdtemp(prefix="mr-consistency-")) / "milvus")
    print(f"Milvus 2.3 server ready in {server.start():.0f} s")
    try:
        stores = {lvl: MilvusMemoryStore(MemoryConfig(uri=server.uri, collection="consistency",
                                                      index_type="HNSW", read_consistency=lvl), DIM)
                  for lvl in CONSISTENCY_LEVELS}
        writer = stores["Strong"]
        for u in range(args.users):
            pairs = [TurnPair(f"u{u}", "s", i, f"memory {i} of user {u}", "ok", 0)
                     for i in range(args.per_user)]
            vecs = rng.standard_normal((len(pairs), DIM)).astype(np.float32)
            writer.upsert(pairs, vecs / np.linalg.norm(vecs, axis=1, keepdims=True))
        writer.flush()
        times: dict[str, list[float]] = {lvl: [] for lvl in CONSISTENCY_LEVELS}
        for r in range(args.reads):
            query = rng.standard_normal(DIM).astype(np.float32)
            for lvl, store in stores.items():
                t = time.perf_counter()
                store.search(f"u{r % args.users}", query, 5)
                times[lvl].append((time.perf_counter() - t) * 1e3)
        result = {"machine": machine_info(), "rows": args.users * args.per_user,
                  "reads_per_level": args.reads,
                  "ms": {lvl: {"p50": round(pct(v, 50), 2), "p95": round(pct(v, 95), 2),
                               "mean": round(statistics.fmean(v), 2)} for lvl, v in times.items()}}
        for store in stores.values():
            store.close()
    finally:
        server.stop()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
