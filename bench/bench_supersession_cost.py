"""What one change statement costs on the write path, against a user's history of N pairs.

With rule 5 (supersession by meaning) on, ``HybridRetriever.supersede`` checks each change
statement against the cached user's whole history instead of 256 BM25 candidates, and embeds the
statements of the older pairs that hold a replaced value (cached afterwards). This times
:func:`memroute.memory.supersession.marks_for` for the change statements of one generated user's
trace against the N pairs before them: words only, and with MiniLM, cold (empty vector cache)
and warm (a second pass). No store: the rules and the encoder alone.

    .venv/bin/python bench/bench_supersession_cost.py --history 100 1000 5000
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench_supersession import as_pair

from memroute.config.make_trace import MakeTraceConfig
from memroute.datasets.generate.trace_sources import generate_trace
from memroute.memory.meaning import StatementSimilarity
from memroute.memory.supersession import as_update, marks_for
from memroute.types import TurnPair, memory_of

UPDATES = 20  # change statements timed per history size


def user_pairs(n: int, seed: int) -> list[TurnPair]:
    cfg = MakeTraceConfig(seed=seed, num_users=1, num_requests=n, update_share=0.4, progress=False)
    return [as_pair(seq, req) for seq, req in enumerate(generate_trace(cfg))]


def timed(updates, history, similar) -> list[float]:
    spent = []
    for pair in updates:
        t0 = time.perf_counter()
        marks_for([pair], history, similar)
        spent.append(1e3 * (time.perf_counter() - t0))
    return spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--history", type=int, nargs="+", default=[100, 1000, 5000])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    encoder = StatementSimilarity.from_asset().encoder
    print("| history pairs | updates timed | words only ms (median / max) | + rule 5, cold ms "
          "| + rule 5, warm ms | texts embedded (cold) |")
    print("|---|---|---|---|---|---|")
    for n in args.history:
        pairs = user_pairs(n + 400, args.seed)
        history = [memory_of(p) for p in pairs[:n]]
        updates = [p for p in pairs[n:] if as_update(p.user_text) is not None][:UPDATES]
        words = timed(updates, history, None)
        similar = StatementSimilarity(encoder)
        cold = timed(updates, history, similar)
        embedded = similar.encoded
        warm = timed(updates, history, similar)

        def fmt(xs: list[float]) -> str:
            return f"{statistics.median(xs):.1f} / {max(xs):.1f}"

        print(f"| {n} | {len(updates)} | {fmt(words)} | {fmt(cold)} | {fmt(warm)} | {embedded} |")


if __name__ == "__main__":
    main()
