"""Supersession rules against a generated trace's ground truth: precision, recall, false marks.

Walks a synthetic trace (``python -m jobs.make_trace`` settings) user by user as the replay
would store it: every request becomes a turn-pair (statements and updates answered "Noted.",
questions answered with their reference, as a correct model would), and every pair runs through
:func:`memroute.memory.supersession.marks_for` against that user's pairs so far, exactly as
``HybridRetriever.supersede`` does on the write path (without the BM25 candidate cut). The trace
knows which fact each request is about, so a mark is right when the superseded pair is about the
update's fact, and false otherwise; a miss is an older current pair of the updated fact left
unmarked. No model, no store: seconds per trace.

    .venv/bin/python bench/bench_supersession.py --seeds 0 1 --update-share 0.2 0.4
"""

from __future__ import annotations

import argparse
import time
from collections import Counter, defaultdict
from dataclasses import replace

from memroute.config.make_trace import MakeTraceConfig
from memroute.datasets.generate.trace_sources import generate_trace
from memroute.memory import supersession
from memroute.memory.meaning import StatementSimilarity
from memroute.memory.supersession import Similarity, marks_for
from memroute.types import Memory, TurnPair, memory_of


def as_pair(seq: int, req) -> TurnPair:
    """The turn-pair a correct model leaves for trace request ``req``: a statement or update
    answered "Noted.", a question answered with its reference."""
    answer = req.references[0] if req.references and req.kind not in ("statement", "update") \
        else "Noted."
    return TurnPair(req.user_id, req.session_id, seq, req.messages[-1].content, answer,
                    int(req.ts), created_at=req.ts)


def run(seed: int, update_share: float, users: int, requests: int,
        similar: Similarity | None = None) -> dict[str, object]:
    cfg = MakeTraceConfig(seed=seed, update_share=update_share, num_users=users,
                          num_requests=requests, progress=False)
    memories: dict[str, dict[int, Memory]] = defaultdict(dict)
    fact_of: dict[int, str] = {}
    kind_of: dict[int, str] = {}
    right = false = missed = updates = 0
    false_kinds: Counter[str] = Counter()
    spent = 0.0
    for seq, req in enumerate(generate_trace(cfg)):
        pair = as_pair(seq, req)
        mine = memories[req.user_id]
        mine[pair.id] = memory_of(pair)
        fact_of[pair.id], kind_of[pair.id] = req.fact_id or "", req.kind or ""
        t0 = time.perf_counter()
        marks = marks_for([pair], mine.values(), similar)
        spent += time.perf_counter() - t0
        for old_id, (by, until) in marks.items():
            mine[old_id] = replace(mine[old_id], superseded_by=by, valid_until=until)
            if fact_of[old_id] == fact_of[pair.id] and req.kind == "update":
                right += 1
            else:
                false += 1
                false_kinds[f"{req.kind} -> {kind_of[old_id]}"] += 1
        if req.kind == "update":
            updates += 1
            missed += sum(1 for m in mine.values() if m.id != pair.id and not m.superseded_by
                          and fact_of[m.id] == fact_of[pair.id])
    return {"seed": seed, "update_share": update_share, "requests": seq + 1, "updates": updates,
            "marked right": right, "false marks": false, "missed": missed,
            "precision": right / max(1, right + false), "recall": right / max(1, right + missed),
            "us per pair": 1e6 * spent / (seq + 1), "false by kind": dict(false_kinds)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--update-share", type=float, nargs="+", default=[0.2, 0.4])
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--meaning", action=argparse.BooleanOptionalAction, default=True,
                    help="rule 5: supersede by meaning (MiniLM) when the words find nothing")
    ap.add_argument("--meaning-min", type=float, default=supersession.MEANING_MIN)
    ap.add_argument("--meaning-margin", type=float, default=supersession.MEANING_MARGIN)
    args = ap.parse_args()
    supersession.MEANING_MIN, supersession.MEANING_MARGIN = args.meaning_min, args.meaning_margin
    similar = StatementSimilarity.from_asset() if args.meaning else None
    print("| seed | update share | requests | updates | pairs marked right | false marks | missed "
          "| precision | recall | us/pair |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for seed in args.seeds:
        for share in args.update_share:
            r = run(seed, share, args.users, args.requests, similar)
            print(f"| {seed} | {share} | {r['requests']} | {r['updates']} | {r['marked right']} | "
                  f"{r['false marks']} | {r['missed']} | {r['precision']:.3f} | {r['recall']:.3f} | "
                  f"{r['us per pair']:.0f} |")
            if r["false by kind"]:
                print(f"<!-- false marks by kind: {r['false by kind']} -->")


if __name__ == "__main__":
    main()
