"""Retrieval latency and recall per strategy, and Milvus' own BM25 / hybrid_search, on one store.

    python bench/bench_retrieval_latency.py [--users 100] [--per-user 1000] [--queries 300]
                                            [--questions-per-user 3] [--db PATH] [--seed 0]

Data: seeded LongMemEval-format haystacks (memroute.datasets.generate.longmemeval); each user holds
``--questions-per-user`` question haystacks (~per-user turn-pairs in all), so every question has
gold turn-pairs among that user's memories (abstention questions are dropped). Everything goes
into one Milvus Lite file created with memory.bm25_function=true (so Milvus' BM25 and the
in-process index rank the same rows), flushed before any query.

Methods, per query, sequential, in rotating order so drift hits all alike:
  dense-plain        strategy=dense, the query as is (one filtered vector search: the floor)
  dense              strategy=dense with query focus (the default dense leg)
  bm25-inprocess*    strategy=bm25, in-process index (warm cache); -plain: unstemmed uni+bigrams
  bm25-milvus        strategy=bm25, bm25_backend=milvus (Milvus BM25 function, user filter)
  hybrid-rrf-plain   hybrid, rrf, no stemming / focus / context (the previous default)
  hybrid-inprocess   hybrid with the defaults (weighted, stemmed unigrams, focus, context)
  hybrid-milvus      the defaults with the Milvus BM25 leg (no stemming or focus there)
  hybrid-maxsim      the defaults + MaxSim rerank of the fused top 20 (token vectors computed live)
  builtin-hybrid     MilvusMemoryStore.hybrid_search_builtin: hybrid_search + RRFRanker (rrf_k)
Each hybrid uses candidate_k per leg and top_k results, the same for ours and the built-in.

Query embedding: query vectors are computed once; retrievers get an encoder that looks them up,
so "retrieval" times exclude embedding. Each query's own MiniLM embedding (a batch of one) is
timed separately, and "with embedding" = embed + retrieval of the same query (bm25-only
methods need no vector, so both columns are equal for them). The first ``--warmup`` queries run
every method and are excluded. In-process BM25 indexes are built for every user before timing
(cold build time reported apart); steady state is a warm cache.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info  # noqa: E402

from memroute import build  # noqa: E402
from memroute.config import AssetsConfig, EmbedderConfig  # noqa: E402
from memroute.config.schema import MemoryConfig, RetrievalConfig  # noqa: E402
from memroute.datasets.records import RetrievalCase  # noqa: E402
from memroute.eval.retrieval_eval import score_case  # noqa: E402
from memroute.types import RetrievalHit, TurnPair  # noqa: E402

if TYPE_CHECKING:
    from memroute.retrieval.retriever import HybridRetriever

PAIRS_PER_SESSION = 7  # turns_per_session (12, 16) -> 6-8 pairs


# ---------------------------------------------------------------------------- data
def build_dataset(
    users: int, per_user: int, questions_per_user: int, seed: int, work: Path
) -> tuple[list[TurnPair], list[RetrievalCase]]:
    """``users`` users, each the merged haystacks of ``questions_per_user`` generated questions."""
    from memroute.datasets import load_longmemeval, longmemeval_cases
    from memroute.datasets.generate.longmemeval import generate_longmemeval, write_json

    per_question = max(2 * PAIRS_PER_SESSION, per_user // questions_per_user)
    sessions = max(2, round(per_question / PAIRS_PER_SESSION))
    raw = generate_longmemeval(
        num_questions=users * questions_per_user,
        sessions_per_question=(max(2, round(sessions * 0.9)), max(2, round(sessions * 1.1))),
        turns_per_session=(12, 16),
        seed=seed,
    )
    questions = load_longmemeval(write_json(raw, work / "questions.json"))
    pairs, cases = longmemeval_cases(questions, user_of=lambda i, q: f"user-{i // questions_per_user:04d}")
    if len({p.id for p in pairs}) != len(pairs):
        raise SystemExit("duplicate turn-pair ids across merged haystacks; change --seed")
    return pairs, cases


class LookupEncoder:
    """The real encoder's vectors for known queries, looked up instead of computed; token vectors
    (the MaxSim rerank's query and candidates) are computed by the real encoder, inside the timing."""

    def __init__(self, dim: int, vectors: dict[str, np.ndarray], real=None) -> None:  # type: ignore[no-untyped-def]
        self.dim = dim
        self._vectors = vectors
        self._real = real

    def encode_tokens(self, texts: Sequence[str]) -> list[np.ndarray]:
        return self._real.encode_tokens(texts)  # type: ignore[no-any-return,union-attr]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._vectors[t] for t in texts]).astype(np.float32)

    def add(self, text: str, vector: np.ndarray) -> None:
        self._vectors[text] = vector


# ---------------------------------------------------------------------------- timing
@dataclass
class Method:
    name: str
    run: Callable[[RetrievalCase], list[RetrievalHit]]
    needs_vector: bool
    ms: list[float]
    recall: list[float]
    session_recall: list[float]
    first_ms: float | None = None


def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def ingest(store, encoder, pairs: list[TurnPair]) -> None:  # type: ignore[no-untyped-def]
    embed_s = write_s = 0.0
    for start in range(0, len(pairs), 1000):
        chunk = pairs[start : start + 1000]
        t = time.perf_counter()
        vecs = encoder.encode([p.text() for p in chunk])
        embed_s += time.perf_counter() - t
        t = time.perf_counter()
        store.upsert(chunk, vecs)
        write_s += time.perf_counter() - t
        done = start + len(chunk)
        if done % 10_000 == 0 or done == len(pairs):
            print(f"  {done}/{len(pairs)} stored (embed {embed_s:.0f}s, upsert {write_s:.0f}s)",
                  flush=True)
    t = time.perf_counter()
    store.flush()
    flush_s = time.perf_counter() - t
    print(f"ingest: embedding {len(pairs) / embed_s:.0f} rows/s, upsert incl. BM25 function "
          f"{len(pairs) / write_s:.0f} rows/s, flush {flush_s:.1f}s")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--users", type=int, default=100)
    ap.add_argument("--per-user", type=int, default=1000, help="turn-pairs per user (about)")
    ap.add_argument("--queries", type=int, default=300, help="timed queries (cases with gold)")
    ap.add_argument("--questions-per-user", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--writes", type=int, default=20, help="write-then-query rounds (0: skip)")
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--candidate-k", type=int, default=50)
    ap.add_argument("--rrf-k", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--db", type=Path, default=None,
                    help="Milvus Lite file to keep and reuse (default: a temporary one)")
    args = ap.parse_args(argv)

    info = machine_info(("torch", "pymilvus", "milvus-lite", "bm25s", "sentence-transformers"))
    print("machine:", ", ".join(f"{k}={v}" for k, v in info.items()))
    tmp = Path(tempfile.mkdtemp(prefix="bench_retrieval_"))
    db = args.db or tmp / "memories.db"
    try:
        t = time.perf_counter()
        pairs, cases = build_dataset(
            args.users, args.per_user, args.questions_per_user, args.seed, tmp
        )
        n_users = len({p.user_id for p in pairs})
        print(f"data: {n_users} users, {len(pairs)} turn-pairs "
              f"({len(pairs) / n_users:.0f} per user), {len(cases)} questions with gold "
              f"(generated in {time.perf_counter() - t:.1f}s)")

        encoder = build.encoder(EmbedderConfig(), build.asset_store(AssetsConfig()))
        store = build.store(
            MemoryConfig(uri=str(db), collection="bench_turns", bm25_function=True), encoder.dim
        )
        if store.count() < len(pairs):  # (write-then-query rounds add a few rows)
            ingest(store, encoder, pairs)
        else:
            print(f"reusing {db} ({store.count()} rows)")

        rng = np.random.default_rng(args.seed)
        order = rng.permutation(len(cases))
        timed = [cases[i] for i in order[: args.warmup + args.queries]]
        # Query embedding, one query at a time as a request would do it.
        embed_ms: dict[str, float] = {}
        vectors: dict[str, np.ndarray] = {}
        encoder.encode(["warm up the encoder"])
        for c in timed:
            t = time.perf_counter()
            vectors[c.query] = encoder.encode([c.query])[0]
            embed_ms[c.query] = 1000 * (time.perf_counter() - t)
        bench = Bench(args, store, LookupEncoder(encoder.dim, vectors, encoder), n_users)
        bench.warm_caches(sorted({c.user_id for c in timed}))
        for qi, case in enumerate(timed):
            shift = qi % len(bench.methods)
            for m in bench.methods[shift:] + bench.methods[:shift]:
                t = time.perf_counter()
                hits = m.run(case)
                ms = 1000 * (time.perf_counter() - t)
                if m.first_ms is None:
                    m.first_ms = ms
                if qi < args.warmup:
                    continue
                m.ms.append(ms)
                scores = score_case(hits, case, (args.top_k,))
                m.recall.append(scores[f"turn_recall@{args.top_k}"])
                m.session_recall.append(scores[f"session_recall@{args.top_k}"])
        report(args, info, bench, timed[args.warmup :], embed_ms)
        if args.writes:
            write_then_query(bench, encoder, timed[args.warmup :], args.writes)
        store.flush()  # else Milvus Lite writes the memtable at exit, after the cleanup below
        store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# The previous defaults: unstemmed unigrams + bigrams, no query focus, no session context.
PLAIN = {"ngram": 2, "stem": False, "query_focus": 1.0, "context_weight": 0.0}


class Bench:
    """The methods under test, all on one store; in-process BM25 caches shared between them."""

    def __init__(  # type: ignore[no-untyped-def]
        self, args, store, lookup: LookupEncoder, n_users: int
    ) -> None:
        from memroute.retrieval.bm25_cache import BM25Cache

        self.args, self.store, self.lookup = args, store, lookup
        self.base = RetrievalConfig(
            top_k=args.top_k, candidate_k=args.candidate_k, rrf_k=args.rrf_k
        )
        size = max(256, n_users + args.writes)
        # The defaults (stemmed unigrams) read the store; the "plain" variant (unstemmed uni+bigrams,
        # the previous default) is built from the memories the first cache loaded (no store reads).
        self.cache = BM25Cache.from_config(store.list_user, self.base, max_users=size)
        self.cache_plain = BM25Cache.from_config(
            lambda u: list(self.cache.get(u).memories.values()), replace(self.base, **PLAIN),
            max_users=size,
        )
        # retrieval.hot_vectors: the same indexes with each user's vectors (read with them)
        self.cache_hot = BM25Cache.from_config(store.list_user_vectors, self.base, max_users=size)
        self.retrievers: dict[str, HybridRetriever] = {}

        def method(name: str, **changes: object) -> Method:
            cfg = replace(self.base, **changes)  # type: ignore[arg-type]
            cache = self.cache_plain if (cfg.ngram, cfg.stem) != (self.base.ngram, self.base.stem) else self.cache
            cache = self.cache_hot if cfg.hot_vectors else cache
            r = self.retrievers[name] = build.retriever(lookup, store, cfg, bm25_cache=cache)
            return Method(name, lambda c: r.retrieve(c.user_id, c.query),
                          cfg.strategy != "bm25", [], [], [])

        self.methods = [
            method("dense-plain", strategy="dense", query_focus=1.0),
            method("dense", strategy="dense"),
            method("dense-hot", strategy="dense", hot_vectors=True),
            method("bm25-inprocess-plain", strategy="bm25", **PLAIN),
            method("bm25-inprocess", strategy="bm25"),
            method("bm25-milvus", strategy="bm25", bm25_backend="milvus"),
            method("hybrid-rrf-plain", strategy="hybrid", fusion="rrf", **PLAIN),
            method("hybrid-inprocess", strategy="hybrid"),
            method("hybrid-hot", strategy="hybrid", hot_vectors=True),
            method("hybrid-milvus", strategy="hybrid", bm25_backend="milvus"),
            method("hybrid-maxsim", strategy="hybrid", rerank="maxsim"),
            Method("builtin-hybrid", self.builtin, True, [], [], []),
        ]
        self.cold_ms: list[float] = []
        self.index_only_ms: list[float] = []
        self.cold_hot_ms: list[float] = []  # list_user_vectors + the index

    def builtin(self, c: RetrievalCase) -> list[RetrievalHit]:
        a = self.args
        hits = self.store.hybrid_search_builtin(
            c.user_id, self.lookup.encode([c.query])[0], c.query, a.top_k, a.candidate_k, a.rrf_k
        )
        return [RetrievalHit(m, s) for m, s in hits]

    def warm_caches(self, users: list[str]) -> None:
        """Cold builds: list_user + bm25s index (ngram 2), then index only (ngram 1)."""
        for user in users:
            t = time.perf_counter()
            self.cache.get(user)
            self.cold_ms.append(1000 * (time.perf_counter() - t))
            t = time.perf_counter()
            self.cache_plain.get(user)
            self.index_only_ms.append(1000 * (time.perf_counter() - t))
            t = time.perf_counter()
            self.cache_hot.get(user)
            self.cold_hot_ms.append(1000 * (time.perf_counter() - t))


def write_then_query(  # type: ignore[no-untyped-def]
    bench: Bench, encoder, cases: list[RetrievalCase], rounds: int
) -> None:
    """A chat turn stores its answer, then the same user asks again: the in-process index of that
    user is invalidated by the write and rebuilt on the query; Milvus sees the unflushed row."""
    names = ["dense", "hybrid-inprocess", "hybrid-milvus", "builtin-hybrid"]
    methods = {m.name: m for m in bench.methods if m.name in names}
    # Writes through a retriever sharing the in-process cache, as the router's remember() does.
    writer = build.retriever(encoder, bench.store, bench.base, bm25_cache=bench.cache)
    probe = "Lanterna bistro"
    bench.lookup.add(probe, encoder.encode([probe])[0])
    one_per_user = list({c.user_id: c for c in cases}.values())[:rounds]
    times: dict[str, list[float]] = {n: [] for n in names}
    found = {n: 0 for n in ("hybrid-inprocess", "hybrid-milvus")}
    for i, case in enumerate(one_per_user):
        pair = TurnPair(case.user_id, "bench-write", 0, "We booked a table at the Lanterna "
                        "bistro for Friday.", "Enjoy your dinner at Lanterna!", 1_700_000_000)
        writer.remember([pair])
        order = names[i % len(names):] + names[: i % len(names)]
        for name in order:
            t = time.perf_counter()
            methods[name].run(case)
            times[name].append(1000 * (time.perf_counter() - t))
        for name in found:
            hits = bench.retrievers[name].retrieve(case.user_id, probe)
            found[name] += any(h.memory.id == pair.id for h in hits)
    print(f"\n## write then query ({len(one_per_user)} users: remember one turn-pair, "
          "then the user's next question; unflushed)")
    print("| method | p50 ms | max ms |\n|---|---|---|")
    for name in names:
        print(f"| {name} | {pct(times[name], 50):.0f} | {max(times[name]):.0f} |")
    print(f"new memory in top-5 for {probe!r}: "
          + ", ".join(f"{n} {k}/{len(one_per_user)}" for n, k in found.items()))


def report(args, info, bench: Bench, cases, embed_ms) -> None:  # type: ignore[no-untyped-def]
    k = args.top_k
    emb = [embed_ms[c.query] for c in cases]
    print(f"\n## retrieval latency, {len(cases)} queries after {args.warmup} warm-up, top_k={k}, "
          f"candidate_k={args.candidate_k}, rrf_k={args.rrf_k}")
    print(f"query embedding (MiniLM, batch of 1): p50 {pct(emb, 50):.1f} ms, "
          f"p95 {pct(emb, 95):.1f} ms")
    cold, idx = bench.cold_ms, bench.index_only_ms
    print(f"in-process BM25 cold build per user ({len(cold)} users): list_user + index p50 "
          f"{pct(cold, 50):.0f} ms, p95 {pct(cold, 95):.0f} ms, total {sum(cold) / 1000:.1f} s; "
          f"index only (unigrams) p50 {pct(idx, 50):.0f} ms")
    hot = bench.cold_hot_ms
    print(f"hot_vectors cold build per user: list_user_vectors + index p50 {pct(hot, 50):.0f} ms, "
          f"p95 {pct(hot, 95):.0f} ms")
    print()
    print(f"| method | p50 ms | p95 ms | mean ms | p50 ms +embed | p95 ms +embed | "
          f"turn Recall@{k} | session Recall@{k} | first call ms |")
    print("|" + "---|" * 9)
    p95: dict[str, float] = {}
    p95e: dict[str, float] = {}
    p50: dict[str, float] = {}
    rec: dict[str, float] = {}
    for m in bench.methods:
        with_embed = [t + (embed_ms[c.query] if m.needs_vector else 0.0)
                      for t, c in zip(m.ms, cases)]
        p50[m.name], p95[m.name], p95e[m.name] = pct(m.ms, 50), pct(m.ms, 95), pct(with_embed, 95)
        rec[m.name] = statistics.fmean(m.recall)
        print(f"| {m.name} | {p50[m.name]:.1f} | {p95[m.name]:.1f} | "
              f"{statistics.fmean(m.ms):.1f} | {pct(with_embed, 50):.1f} | {p95e[m.name]:.1f} | "
              f"{rec[m.name]:.3f} | {statistics.fmean(m.session_recall):.3f} | "
              f"{m.first_ms:.0f} |")
    print()
    hybrids = [m.name for m in bench.methods if m.name.startswith(("hybrid", "builtin"))]
    for name in hybrids:
        print(f"{name}: p95 / dense-plain p95 = {p95[name] / p95['dense-plain']:.2f} "
              f"(with embedding {p95e[name] / p95e['dense-plain']:.2f}; target <= 1.2)")
    dense_ms = next(m.ms for m in bench.methods if m.name == "dense-plain")
    for m in bench.methods:
        if m.name in hybrids:  # paired per query: less sensitive to a noisy neighbour than p95s
            ratio = [h / d for h, d in zip(m.ms, dense_ms)]
            print(f"{m.name}: per-query latency / dense latency of the same query: "
                  f"p50 {pct(ratio, 50):.2f}, p95 {pct(ratio, 95):.2f}")
    for name in hybrids[:-1]:
        print(f"{name} vs builtin-hybrid: p50 {p50[name] / p50['builtin-hybrid']:.2f}x, "
              f"p95 {p95[name] / p95['builtin-hybrid']:.2f}x, "
              f"Recall@{k} {rec[name]:.3f} vs {rec['builtin-hybrid']:.3f}")
    print(f"\nload average (1 min) at start {info['load_avg_1m_at_start']}, "
          f"at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
