"""Synthetic LongMemEval-format questions (same JSON schema as ``longmemeval_s.json``).

Every question is one user's history: a haystack of dated everyday-assistant chat sessions
(cooking, travel, code, money, ...) with the evidence planted, as one exchange among the small
talk, in 1-3 of them. Question types, in the real set's proportions (70/56/30/133/133/78 of 500):

=========================  ==============================================================
single-session-user        the user stated a fact ("we stayed at the Juniper Inn")
single-session-assistant   the assistant said something specific (a recommendation)
single-session-preference  the user revealed a taste; the answer describes the preference
multi-session              2-3 sessions each add a part; the answer is a sum or a count
temporal-reasoning         events told "today" in dated sessions: days between / which first /
                           days ago (relative to ``question_date``)
knowledge-update           a value stated early and changed later; the answer is the new one
=========================  ==============================================================

About 6% are abstention questions (id ending ``_abs``): they ask about something the haystack
only comes near ("which hotel did I stay at in Porto?" when the user only told of Lisbon); their
answer says the information is not enough, and ``answer_session_ids`` names the near-miss
sessions. Planted turns carry ``has_answer: true``. Output is deterministic for a seed.

This module picks the mix (types, abstentions, sizes) and writes the file; what a question of
each type plants is :mod:`.longmemeval_plans`, its sessions and record :mod:`.longmemeval_haystack`.
Word lists and sentence templates are data (``data/longmemeval.json``); the functions drawing
their values are code (:mod:`.longmemeval_values`).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from memroute.datasets.generate.longmemeval_haystack import question_record
from memroute.datasets.generate.longmemeval_plans import Gen
from memroute.datasets.longmemeval import QUESTION_TYPES
from memroute.errors import InvalidRequest

# Question counts per type in LongMemEval (500 questions), abstention included.
REAL_COUNTS: dict[str, int] = {
    "single-session-user": 70,
    "single-session-assistant": 56,
    "single-session-preference": 30,
    "multi-session": 133,
    "temporal-reasoning": 133,
    "knowledge-update": 78,
}
ABSTENTION_SHARE = 30 / 500
SIZES: dict[str, dict[str, Any]] = {
    "default": {"num_questions": 30, "sessions_per_question": (40, 50),
                "turns_per_session": (4, 10)},
    "small": {"num_questions": 12, "sessions_per_question": (8, 12),
              "turns_per_session": (4, 8)},
    # LongMemEval-S: ~48 sessions and ~245 turn-pairs per question
    "s-like": {"num_questions": 500, "sessions_per_question": (40, 50),
               "turns_per_session": (8, 14)},
}


def type_counts(num_questions: int) -> dict[str, int]:
    """Questions per type in the real proportions (largest remainder); each type gets at least
    one when there are six or more questions."""
    total = sum(REAL_COUNTS.values())
    exact = {t: num_questions * c / total for t, c in REAL_COUNTS.items()}
    counts = {t: int(x) for t, x in exact.items()}
    by_remainder = sorted(exact, key=lambda t: (counts[t] - exact[t], QUESTION_TYPES.index(t)))
    for t in by_remainder[: num_questions - sum(counts.values())]:
        counts[t] += 1
    if num_questions >= len(REAL_COUNTS):
        for t in QUESTION_TYPES:
            if counts[t] == 0:
                counts[max(counts, key=lambda k: counts[k])] -= 1
                counts[t] = 1
    return counts


def _plan_questions(rng: random.Random, num_questions: int) -> list[tuple[str, bool]]:
    slots = [t for t, c in type_counts(num_questions).items() for _ in range(c)]
    rng.shuffle(slots)
    n_abs = round(num_questions * ABSTENTION_SHARE)
    if num_questions >= 7:
        n_abs = max(1, n_abs)
    remaining = {t: slots.count(t) for t in set(slots)}
    abstain = [False] * len(slots)
    for i in rng.sample(range(len(slots)), len(slots)):
        t = slots[i]
        # preferences have no abstention form; every type keeps a non-abstention question
        if n_abs and t != "single-session-preference" and remaining[t] > 1:
            abstain[i] = True
            remaining[t] -= 1
            n_abs -= 1
    return list(zip(slots, abstain, strict=True))


def _check_range(value: Any, name: str, minimum: int) -> tuple[int, int]:
    ok = (
        isinstance(value, (tuple, list)) and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        and minimum <= value[0] <= value[1]
    )
    if not ok:
        raise InvalidRequest(
            f"{name} must be a (low, high) pair of integers with {minimum} <= low <= high, "
            f"got {value!r}",
            field=name,
        )
    return int(value[0]), int(value[1])


def generate_longmemeval(
    *,
    num_questions: int | None = None,
    sessions_per_question: tuple[int, int] | None = None,
    turns_per_session: tuple[int, int] | None = None,
    seed: int = 0,
    size: str | None = None,
) -> list[dict[str, Any]]:
    """LongMemEval-format question records, deterministic for ``seed``.

    ``size`` picks a preset (``"small"``: 12 questions of 8-12 sessions, for tests;
    ``"s-like"``: 500 questions of 40-50 sessions, like LongMemEval-S); arguments given
    explicitly override it. Without a size: 30 questions, 40-50 sessions of 4-10 turns.
    """
    if size is not None and size not in SIZES:
        raise InvalidRequest(
            f"unknown size {size!r}. Available: {', '.join(SIZES)}", field="size"
        )
    preset = SIZES[size or "default"]
    nq = preset["num_questions"] if num_questions is None else num_questions
    if isinstance(nq, bool) or not isinstance(nq, int) or nq < 1:
        raise InvalidRequest(
            f"num_questions must be a positive integer, got {nq!r}", field="num_questions"
        )
    spq = _check_range(
        preset["sessions_per_question"] if sessions_per_question is None
        else sessions_per_question,
        "sessions_per_question", 2,  # knowledge updates and temporal pairs span two sessions
    )
    tps = _check_range(
        preset["turns_per_session"] if turns_per_session is None else turns_per_session,
        "turns_per_session", 2,
    )
    if (tps[0] + 1) // 2 > tps[1] // 2:
        raise InvalidRequest(
            f"turns_per_session {tps} holds no even number of turns (sessions are "
            "user/assistant exchanges)",
            field="turns_per_session",
        )
    g = Gen(seed)
    out = []
    ids: set[str] = set()
    for qtype, abstain in _plan_questions(g.rng, nq):
        qid = f"{g.rng.getrandbits(32):08x}"
        while qid in ids:
            qid = f"{g.rng.getrandbits(32):08x}"
        ids.add(qid)
        out.append(question_record(g, qtype, abstain, qid + ("_abs" if abstain else ""), spq, tps))
    return out


def write_json(questions: list[dict[str, Any]], path: str | Path) -> Path:
    """Write questions as a LongMemEval-format JSON file (parent folders are created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(questions, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Write a synthetic LongMemEval-format dataset.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", choices=sorted(SIZES), default="default")
    parser.add_argument("--questions", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    questions = generate_longmemeval(num_questions=args.questions, seed=args.seed, size=args.size)
    print(write_json(questions, args.out))


if __name__ == "__main__":
    main()
