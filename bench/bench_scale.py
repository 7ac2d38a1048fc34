"""Scale: users x memories per user on a local Milvus server, ingested through the Ray Data
pipeline, then dense and hybrid retrieval latency, recall on planted facts, and the ingress's
memory with the BM25 cache cap on and off.

    python bench/bench_scale.py --users 1000 --per-user 1000      # 1M rows (issue 16)
    python bench/bench_scale.py --users 100 --per-user 1000       # 100k rows
    python bench/bench_scale.py --users 20 --per-user 100 --queries 40   # a smoke run

Data (seeded): each memory is one turn-pair whose user text joins five slots (activity, place,
companion, object, time: 396,000 sentences) after its session's date (42 days per user). Users
draw their sentences from a shared pool (``--sentence-pool``, default 6,000: users say the same
things, on their own dates), so 1M rows hold ~250k distinct texts and the first run embeds those
once (~25 min on 2 cores instead of ~100); ``--sentence-pool 0`` draws every sentence afresh
(nearly all 1M texts distinct). Each user also holds 3 planted facts with a value of its own (a
locker code, a pet's name, a city), asked later by a paraphrased question.

Embedding: ``embedder.vector_cache`` (default ``.memroute/vector_cache``): the first run embeds
every text (1M texts: ~100 min on 2 cores) and caches the vectors by text hash; re-runs read them,
so their ingest figure is the pipeline and the writes without the encoder. The figures say which.

Server: PyPI ``milvus`` 2.3.5 through ``infra/milvus_loopback.py`` (``make milvus-server``), or
``--uri`` for one already running. 2.3 has no BM25 function: the hybrid's BM25 leg is in-process.
Queries: ``--queries`` planted questions of random users, sequential; each user's first hybrid
query builds its in-process BM25 index (reads the user's rows: "cold"), the next ones hit it.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from machine import machine_info  # noqa: E402

from memroute import build  # noqa: E402
from memroute.config import DatasetConfig, IngestConfig, MemoryConfig, TrackingConfig  # noqa: E402
from memroute.config.schema import EmbedderConfig, RetrievalConfig  # noqa: E402
from memroute.namespace import namespaced_user_id  # noqa: E402
from memroute.types import TurnPair  # noqa: E402

T0 = 1704067200  # 1 Jan 2024
ACTIVITIES = ["baked sourdough", "repainted the hallway", "ran ten kilometres", "studied Spanish verbs",
              "fixed the bicycle brakes", "planted tomatoes", "read a mystery novel", "practised violin",
              "built a bookshelf", "revised for a chemistry exam", "knitted a scarf", "cleaned the garage",
              "cooked a lentil curry", "watched a documentary", "sorted old photos", "wrote a short story",
              "went bouldering", "tuned the piano", "repotted the ferns", "walked along the river"]
PLACES = ["at home", "in the park", "at the office", "at the library", "on the balcony", "downtown",
          "at the community centre", "by the lake", "in the garden", "at my parents' place",
          "at the gym", "on the train", "at a cafe", "in the workshop", "at the beach"]
PEOPLE = ["with my sister", "with a colleague", "alone", "with my neighbour", "with two friends",
          "with my cousin", "with the kids", "with my partner", "with an old classmate", "with my uncle"]
OBJECTS = ["a new notebook", "my old headphones", "a borrowed ladder", "a thermos of tea",
           "a map of the city", "a rented kayak", "my grandfather's watch", "a box of chalk",
           "a second-hand camera", "a bag of apples", "a folding chair", "a paper kite"]
TIMES = ["this morning", "last night", "on Sunday", "after lunch", "before dawn", "on my day off",
         "during the storm", "at sunset", "over the weekend", "on Tuesday evening", "yesterday"]
PETS = ["Biscuit", "Pepper", "Marble", "Juniper", "Waffles", "Clover", "Ziggy", "Noodle", "Maple"]
CITIES = ["Lisbon", "Porto", "Kyoto", "Oslo", "Tallinn", "Valencia", "Ghent", "Bergen", "Lyon"]


def filler(rng: random.Random) -> str:
    return (f"I {rng.choice(ACTIVITIES)} {rng.choice(PLACES)} {rng.choice(PEOPLE)} "
            f"{rng.choice(TIMES)}, and I had {rng.choice(OBJECTS)} with me.")


def planted(k: int, rng: random.Random) -> list[tuple[str, str, str]]:
    """(statement, answer, question) x 3 with values of user ``k``'s own."""
    code = f"{rng.choice('QXZKV')}{rng.choice('QXZKV')}-{k:04d}{rng.randrange(10)}"
    pet, city = f"{rng.choice(PETS)}{k}", f"{rng.choice(CITIES)}"
    return [(f"The code for my gym locker is {code}.", f"Noted: locker code {code}.",
             "What was the code of my gym locker?"),
            (f"We adopted a puppy and named her {pet}.", f"{pet} is a lovely name!",
             "What did we call the puppy we adopted?"),
            (f"My brother just moved to {city} for a teaching job.", f"{city}, how exciting!",
             "Which city did my brother move to for work?")]


def dataset(users: int, per_user: int, seed: int, sentence_pool: int = 0):
    """Turn-pairs (filler and planted, interleaved) and the planted (user, pair id, question)."""
    rng = random.Random(seed)
    pool = [filler(rng) for _ in range(sentence_pool)]
    pairs, gold = [], []
    for k in range(users):
        uid = namespaced_user_id("scale", f"u{k:05d}")
        facts = planted(k, rng)
        slots = set(rng.sample(range(per_user), len(facts)))
        f = iter(facts)
        for i in range(per_user):
            if i in slots:
                text, answer, question = next(f)
            else:
                text = rng.choice(pool) if pool else filler(rng)
                answer, question = "Sounds good.", None
            p = TurnPair(uid, f"s{i // 20}", i, text, answer, T0 + 3600 * i, created_at=T0 + i)
            pairs.append(p)
            if question:
                gold.append((uid, p.id, question))
    return pairs, gold


def pct(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def summary_ms(values):
    return {"p50": round(pct(values, 50) * 1e3, 2), "p95": round(pct(values, 95) * 1e3, 2),
            "p99": round(pct(values, 99) * 1e3, 2), "n": len(values)}


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_now_mb() -> float:
    """Resident memory now (the peak above is set by loading torch and the encoder)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


def wait_indexed(store, timeout_s: float) -> float:
    """Seconds until the server's index covers every row (growing segments are brute-forced)."""
    t0 = time.perf_counter()
    last, since = -1, time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        done, pending, finished = store.index_progress()
        if finished and not pending:
            break
        if done != last:
            last, since = done, time.perf_counter()
        elif time.perf_counter() - since > 120:  # no progress: small segments stay unindexed
            break
        time.sleep(2)
    return time.perf_counter() - t0


def embed_distinct(pairs, args) -> dict:
    """Fill the vector cache with every distinct text, once, in this process: the ingest's
    embedding actors then only read it (two actors missing the same text would embed it twice)."""
    from tqdm import tqdm

    enc = build.encoder(EmbedderConfig(vector_cache=args.vector_cache),
                        build.asset_store(IngestConfig().assets))
    texts = sorted({p.text() for p in pairs}, key=len)  # similar lengths per batch pad less
    todo = [t for t in texts if t not in enc]
    t0 = time.perf_counter()
    for i in tqdm(range(0, len(todo), 4096), desc="embedding distinct texts", unit="batch"):
        enc.encode(todo[i:i + 4096])
    seconds = time.perf_counter() - t0
    return {"distinct": len(texts), "embedded": len(todo), "seconds": round(seconds, 1),
            "texts_per_s": round(len(todo) / seconds, 1) if todo else None}


def ingest(pairs, args, uri: str, collection: str) -> dict:
    import ray

    from pipelines.ingest import ingest_pairs
    from serve.loopback import runtime_env

    cfg = IngestConfig(
        dataset=DatasetConfig(name="synthetic"),
        embedder=EmbedderConfig(vector_cache=args.vector_cache),
        memory=MemoryConfig(uri=uri, collection=collection, index_type=args.index),
        tracking=TrackingConfig(enabled=False), work_dir=str(args.work / "ingest"),
        progress=True)  # skip_existing: the new collection is empty, so its rows are inserted
    cfg.write.batch_size = 1000

    def ensure_ray():
        if not ray.is_initialized():
            ray.init(address="local", num_cpus=2, include_dashboard=False,
                     logging_level=logging.WARNING, runtime_env=runtime_env())

    t0 = time.perf_counter()
    summary = ingest_pairs(pairs, cfg, ensure_ray=ensure_ray)
    seconds = time.perf_counter() - t0
    ray.shutdown()
    return {"rows": summary.written, "errors": summary.errors, "seconds": round(seconds, 1),
            "rows_per_s": round(summary.written / seconds, 1)}


def query(args, uri: str, collection: str, gold, cap_mb: float, hot: bool = False) -> dict:
    enc = build.encoder(EmbedderConfig(), build.asset_store(IngestConfig().assets))
    store = build.store(MemoryConfig(uri=uri, collection=collection, index_type=args.index,
                                     timeout_s=60.0), enc.dim)
    indexed_s = wait_indexed(store, args.index_wait_s)
    indexed, pending, _ = store.index_progress()  # what the index covered when queries began
    retriever = build.retriever(enc, store, RetrievalConfig(top_k=5, bm25_cache_mb=cap_mb,
                                                                hot_vectors=hot))
    rng = random.Random(args.seed + 1)
    asked = [rng.choice(gold) for _ in range(args.queries)]
    # dense_e2e = embed + dense search: what the hybrid's end-to-end time compares with
    times = {"embed": [], "dense": [], "dense_e2e": [], "hybrid_cold": [], "hybrid_warm": []}
    found = {"dense": 0, "hybrid": 0}
    seen = set()
    for uid, pid, question in asked:
        t = time.perf_counter()
        vec = enc.encode([question])[0]
        times["embed"].append(time.perf_counter() - t)
        t = time.perf_counter()
        dense = store.search(uid, vec, 5)
        times["dense"].append(time.perf_counter() - t)
        times["dense_e2e"].append(times["embed"][-1] + times["dense"][-1])
        found["dense"] += pid in {m.id for m, _ in dense}
        t = time.perf_counter()
        hits = retriever.retrieve(uid, question, strategy="hybrid")  # embeds again: end to end
        times["hybrid_cold" if uid not in seen else "hybrid_warm"].append(time.perf_counter() - t)
        seen.add(uid)
        found["hybrid"] += pid in {h.memory.id for h in hits}
    stats = retriever.bm25.stats()
    store.close()
    return {"index_wait_s": round(indexed_s, 1), "indexed_rows_at_start": indexed,
            "pending_index_rows_at_start": pending,
            **{k: summary_ms(v) for k, v in times.items() if v},
            "recall@5": {k: round(v / len(asked), 3) for k, v in found.items()},
            "bm25_cache": {"cap_mb": cap_mb, "hot_vectors": hot, "users": stats.users,
                           "mb": round(stats.bytes / 2**20, 1),
                           "evictions": stats.evictions},
            "max_rss_mb": round(rss_mb()), "rss_end_mb": round(rss_now_mb())}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--per-user", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sentence-pool", type=int, default=6000,
                    help="filler sentences shared by all users (0: each drawn afresh)")
    ap.add_argument("--uri", default="", help="a running Milvus server (default: start one)")
    ap.add_argument("--vector-cache", default=str(ROOT / ".memroute" / "vector_cache"))
    ap.add_argument("--work", type=Path, default=Path(tempfile.mkdtemp(prefix="mr-scale-")))
    ap.add_argument("--out", type=Path, default=ROOT / ".memroute" / "bench" / "scale.json")
    ap.add_argument("--cap-mb", type=float, nargs=2, default=(64.0, 0.0),
                    help="BM25 cache caps to compare (0: no cap)")
    ap.add_argument("--index", default="HNSW", help="memory.index_type (conf/memory/server.yaml: HNSW)")
    ap.add_argument("--hot-vectors-mb", type=float, default=256.0,
                    help="also query with retrieval.hot_vectors under this cache cap (0: skip)")
    ap.add_argument("--index-wait-s", type=float, default=3600.0,
                    help="wait at most this long for the server's index before querying")
    ap.add_argument("--embed-only", action="store_true", help="fill the vector cache and stop")
    ap.add_argument("--only-query", default="", help=argparse.SUPPRESS)  # the per-cap subprocess
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.only_query:  # uri, collection, cap, gold file: one query phase, in its own process
        uri, collection, cap, hot, gold_file = args.only_query.split("|")
        gold = [tuple(g) for g in json.loads(Path(gold_file).read_text())]
        print(json.dumps(query(args, uri, collection, gold, float(cap), hot == "hot")))
        return

    t0 = time.perf_counter()
    pairs, gold = dataset(args.users, args.per_user, args.seed, args.sentence_pool)
    print(f"{len(pairs):,} turn-pairs for {args.users} users generated in "
          f"{time.perf_counter() - t0:.0f} s")
    embedding = embed_distinct(pairs, args)
    print("embedding:", embedding)
    if args.embed_only:
        return
    server = None
    uri = args.uri
    if not uri:
        sys.path.insert(0, str(ROOT / "tests" / "integration"))
        from milvus_server import LoopbackMilvus  # the tests' launcher of infra/milvus_loopback.py

        server = LoopbackMilvus(args.work / "milvus")
        print(f"Milvus 2.3 server ready in {server.start():.0f} s at {server.uri}")
        uri = server.uri
    collection = f"scale_{args.users}x{args.per_user}_{args.index.lower()}"
    try:
        result = {"machine": machine_info(), "users": args.users, "per_user": args.per_user,
                  "rows": len(pairs), "sentence_pool": args.sentence_pool, "index": args.index,
                  "embedding": embedding, "ingest": ingest(pairs, args, uri, collection)}
        print("ingest:", result["ingest"])
        gold_file = args.work / "gold.json"
        gold_file.write_text(json.dumps(gold))
        result["query"] = {}
        phases = [(cap, "") for cap in args.cap_mb]
        if args.hot_vectors_mb:
            phases.append((args.hot_vectors_mb, "hot"))
        for cap, hot in phases:  # a process each: peak RSS is per process
            run = subprocess.run([sys.executable, __file__, "--queries", str(args.queries),
                                  "--seed", str(args.seed), "--index", args.index,
                                  "--index-wait-s", str(args.index_wait_s),
                                  "--only-query", f"{uri}|{collection}|{cap}|{hot}|{gold_file}"],
                                 capture_output=True, text=True, check=True)
            name = f"cap_{cap:g}mb" + ("_hot_vectors" if hot else "")
            result["query"][name] = json.loads(run.stdout.strip().splitlines()[-1])
            print(f"queries, {name}:", result["query"][name])
    finally:
        if server is not None:
            server.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
