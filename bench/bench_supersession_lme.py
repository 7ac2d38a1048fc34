"""Supersession rules on the LongMemEval-format set: wording the rules were not written for.

``bench/bench_supersession.py`` measures the rules on the replay trace, whose templates they were
written against. This walks each question's haystack of the generated LongMemEval-format set
(``memroute.datasets.generate.longmemeval``: other phrasings, a statement and a question in one
turn, 40-50 sessions of filler) in time order, as the write path would store it, and runs every
pair through :func:`memroute.memory.supersession.marks_for` against that question's pairs so far.

Ground truth: a knowledge-update question's haystack (its abstention variant's too) holds two
planted pairs (``has_answer``),
the old value's and the new one's. A mark is right when the new planted pair supersedes the old
one; every other mark is false (a filler pair, or any pair of the other five question types,
where nothing is ever replaced); a miss is a knowledge update whose old pair stays current.
No model, no store: seconds.

    .venv/bin/python bench/bench_supersession_lme.py --seeds 0 1 --size default
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from memroute.datasets import load_longmemeval, lme_turn_pairs
from memroute.datasets.generate.longmemeval import generate_longmemeval, write_json
from memroute.memory import supersession
from memroute.memory.meaning import StatementSimilarity
from memroute.memory.supersession import Similarity, marks_for
from memroute.types import Memory, memory_of

KU = "knowledge-update"


def run(seed: int, size: str,
        similar: Similarity | None = None) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        path = write_json(generate_longmemeval(size=size, seed=seed), Path(tmp) / "lme.json")
        questions = load_longmemeval(path)
    right = false = missed = updates = pairs = 0
    false_types: Counter[str] = Counter()
    missed_keys: Counter[str] = Counter()
    spent = 0.0
    for q in questions:
        records = sorted(lme_turn_pairs(q), key=lambda r: (r.pair.session_time, r.pair.turn_index))
        planted = [r.pair for r in records if r.has_answer]
        # an abstention question of this type asks about something else, over the same update
        is_update = q.question_type == KU and len(planted) == 2
        old, new = (planted[0], planted[-1]) if is_update else (None, None)
        mine: dict[int, Memory] = {}
        for r in records:
            pair = r.pair
            mine[pair.id] = memory_of(pair)
            t0 = time.perf_counter()
            marks = marks_for([pair], mine.values(), similar)
            spent += time.perf_counter() - t0
            pairs += 1
            for old_id, (by, until) in marks.items():
                mine[old_id] = replace(mine[old_id], superseded_by=by, valid_until=until)
                if old is not None and new is not None and (old_id, by) == (old.id, new.id):
                    right += 1
                else:
                    false += 1
                    false_types[q.question_type] += 1
        if old is not None:
            updates += 1
            if not mine[old.id].superseded_by:
                missed += 1
                missed_keys[" ".join(new.user_text.split()[:7]) if new else "?"] += 1
    return {"seed": seed, "size": size, "questions": len(questions), "pairs": pairs,
            "updates": updates, "marked right": right, "false marks": false, "missed": missed,
            "precision": right / max(1, right + false), "recall": right / max(1, updates),
            "us per pair": 1e6 * spent / max(1, pairs), "false by type": dict(false_types),
            "missed by update": dict(missed_keys)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--size", default="default", help="small | default | s-like")
    ap.add_argument("--show-missed", action="store_true", help="list the missed updates")
    ap.add_argument("--meaning", action=argparse.BooleanOptionalAction, default=True,
                    help="rule 5: supersede by meaning (MiniLM) when the words find nothing")
    ap.add_argument("--meaning-min", type=float, default=supersession.MEANING_MIN)
    ap.add_argument("--meaning-margin", type=float, default=supersession.MEANING_MARGIN)
    args = ap.parse_args()
    supersession.MEANING_MIN, supersession.MEANING_MARGIN = args.meaning_min, args.meaning_margin
    similar = StatementSimilarity.from_asset() if args.meaning else None
    print("| seed | size | questions | pairs | knowledge updates | marked right | false marks "
          "| missed | precision | recall | us/pair |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for seed in args.seeds:
        r = run(seed, args.size, similar)
        print(f"| {seed} | {r['size']} | {r['questions']} | {r['pairs']} | {r['updates']} | "
              f"{r['marked right']} | {r['false marks']} | {r['missed']} | {r['precision']:.3f} | "
              f"{r['recall']:.3f} | {r['us per pair']:.0f} |")
        if r["false by type"]:
            print(f"<!-- false marks by question type: {r['false by type']} -->")
        if args.show_missed:
            for label, n in sorted(r["missed by update"].items(), key=lambda kv: -kv[1]):  # type: ignore[union-attr]
                print(f"<!-- missed x{n}: {label} -->")


if __name__ == "__main__":
    main()
