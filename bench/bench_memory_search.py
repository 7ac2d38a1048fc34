"""Memory search latency (``POST /v1/memory/search``'s work, memroute.memory.search) on Milvus
Lite + MiniLM: one user with ``--facts`` active facts, ``--turns`` turn-pairs and ``--units``
atomic context units, with the keyword fallback and without it.

    python bench/bench_memory_search.py [--facts 1000] [--turns 1000] [--units 200]
                                        [--queries 200] [--top-k 5] [--seed 0]

Data: facts ``pref.item_NNNN`` with ~40-character values (SQLite fact store, through
``assert_fact``), turn-pairs of varied activities over ~100 sessions (``HybridRetriever.
remember``: embedded, upserted, flushed), units as self-contained sentences (``UnitIndex.add``:
embedded, deduplicated, upserted). Queries mix a fact's words, an activity, a unit's paraphrase
and words found nowhere.

The search is wired as the serving core wires it: turns through the journaled retriever
(read-your-writes; an empty journal here), the fallback over the retriever's in-process BM25
corpus plus the journal's pending pairs (``MemoryApi.fallback_turns``).

Measured, one client, sequential, after a warm-up (``--queries // 10`` searches, excluded; the
first search embeds every fact once, reported apart): ``search()`` with ``fallback_below=0``
(never: facts, units and turns ranked) and with ``fallback_below=1`` (always: the same, then the
keyword scan over all of the user's raw turns read from Milvus), plus the default config, where
the fallback runs only for the queries whose best score is below 0.3 (the share is printed).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import machine_info

from memroute import build
from memroute.assets.store import AssetStore
from memroute.config.schema import EmbedderConfig, MemoryConfig, RetrievalConfig
from memroute.config.search import SearchConfig
from memroute.config.serve import ServeConfig
from memroute.config.units import UnitsConfig
from memroute.journal import Journal, JournaledRetriever
from memroute.memory.facts import FactInput, FactStore
from memroute.memory.facts.extraction_schema import ExtractedUnit
from memroute.serving.memory_api import MemoryApi
from memroute.types import TurnPair

USER = "bench:alice"
T0 = 1683504000
ACTIVITIES = ["baking sourdough bread", "repainting the kitchen", "training for a half marathon",
              "learning Spanish verbs", "fixing my bicycle brakes", "planting tomatoes",
              "reading a mystery novel", "practising the violin", "building a bookshelf",
              "studying for a chemistry exam", "knitting a scarf", "organising the garage"]
PLACES = ["at home", "in the park", "at my office", "with my cousin", "at the community centre"]
THINGS = ["blue kettle", "road bike", "oak desk", "wool coat", "garden hose", "steel pan",
          "paper lamp", "glass vase", "leather bag", "cotton rug"]


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def load(args: argparse.Namespace, tmp: Path) -> tuple:
    rng = random.Random(args.seed)
    enc = build.encoder(EmbedderConfig(), AssetStore())
    mem = build.memory(None, MemoryConfig(uri=str(tmp / "milvus.db"), collection="bench"),
                       RetrievalConfig(), None, enc=enc, units=UnitsConfig())
    facts = FactStore(f"sqlite:///{tmp / 'facts.sqlite3'}")
    t = time.perf_counter()
    for i in range(args.facts):
        thing = THINGS[i % len(THINGS)]
        facts.assert_fact(USER, FactInput(f"pref.item_{i:04d}",
                                          f"{thing} number {i} from {rng.choice(PLACES)}",
                                          valid_from=T0 + i))
    t_facts = time.perf_counter() - t
    pairs = []
    for i in range(args.turns):
        act, place = ACTIVITIES[i % len(ACTIVITIES)], rng.choice(PLACES)
        pairs.append(TurnPair(USER, f"s{i // 10}", i, f"I spent the afternoon {act} {place}.",
                              f"Sounds good, {act} takes patience.", T0 + 86400 * (i // 10)))
    t = time.perf_counter()
    mem.retriever.remember(pairs)
    mem.store.flush()
    t_turns = time.perf_counter() - t
    units = [ExtractedUnit(f"On day {i} of 2023 Alice was {ACTIVITIES[i % len(ACTIVITIES)]} "
                           f"{PLACES[i % len(PLACES)]} with the {THINGS[i % len(THINGS)]} {i}.",
                           USER, f"s{i}", 0, T0 + 86400 * i) for i in range(args.units)]
    t = time.perf_counter()
    written = mem.units.add(USER, units).written if units else 0
    t_units = time.perf_counter() - t
    print(f"loaded {args.facts} facts in {t_facts:.1f}s, {args.turns} turns in {t_turns:.1f}s, "
          f"{written}/{args.units} units in {t_units:.1f}s")
    return mem, facts


def queries(n: int, rng: random.Random) -> list[str]:
    kinds = [lambda: f"where is my {rng.choice(THINGS)}",
             lambda: f"when was I {rng.choice(ACTIVITIES)}",
             lambda: f"what did Alice do {rng.choice(PLACES)}",
             lambda: rng.choice(["zebra crossing", "quantum tunnelling", "kitch", "violi"])]
    return [kinds[i % len(kinds)]() for i in range(n)]


def run(search, qs: list[str], top_k: int) -> tuple[list[float], int]:
    for q in qs[: max(1, len(qs) // 10)]:  # warm-up
        search.search(USER, q, top_k)
    times, fell_back = [], 0
    for q in qs:
        t = time.perf_counter()
        r = search.search(USER, q, top_k)
        times.append((time.perf_counter() - t) * 1000)
        fell_back += r.fallback
    return times, fell_back


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--facts", type=int, default=1000)
    ap.add_argument("--turns", type=int, default=1000)
    ap.add_argument("--units", type=int, default=200)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(json.dumps(machine_info(("torch", "pymilvus", "milvus-lite"))))
    with tempfile.TemporaryDirectory() as d:
        mem, facts = load(args, Path(d))
        journal = Journal(Path(d) / "journal.sqlite3")
        turns = JournaledRetriever(mem.retriever, journal)
        api = MemoryApi(ServeConfig(), facts=facts, journal=journal, store=mem.store, turns=turns,
                        units=mem.units, corpus=build.turn_corpus(mem.retriever, mem.store))
        qs = queries(args.queries, random.Random(args.seed))
        try:
            rows = []
            configs = [("no fallback (fallback_below=0)", SearchConfig(fallback_below=0.0)),
                       ("fallback always (fallback_below=1)", SearchConfig(fallback_below=1.0)),
                       ("default (fallback_below=0.3)", SearchConfig())]
            for label, cfg in configs:
                s = build.memory_search(cfg, facts, turns, RetrievalConfig(), enc=mem.encoder,
                                        units=mem.units, raw_turns=api.fallback_turns)
                t = time.perf_counter()
                s.search(USER, "first search", args.top_k)
                first = (time.perf_counter() - t) * 1000
                times, fell = run(s, qs, args.top_k)
                rows.append((label, first, times, fell))
            print(f"\n| memory search, 1 user: {args.facts} facts, {args.turns} turns, "
                  f"{args.units} units | first (ms) | p50 (ms) | p95 (ms) | p99 (ms) | fell back |")
            print("|---|---|---|---|---|---|")
            for label, first, times, fell in rows:
                print(f"| {label} | {first:.0f} | {statistics.median(times):.1f} | "
                      f"{pct(times, 95):.1f} | {pct(times, 99):.1f} | {fell}/{len(times)} |")
            t = time.perf_counter()
            n = len(mem.store.list_user(USER))
            print(f"\n(for scale: one store read of the user's {n} turn-pairs, list_user: "
                  f"{(time.perf_counter() - t) * 1000:.0f} ms; one MiniLM query embedding: ",
                  end="")
            t = time.perf_counter()
            mem.encoder.encode(["where is my blue kettle"])
            print(f"{(time.perf_counter() - t) * 1000:.0f} ms)")
        finally:
            journal.close()
            facts.close()
            mem.close()


if __name__ == "__main__":
    main()
