"""One LongMemEval-format question record: dated sessions of everyday chat (filler), the
question's plan (:mod:`.longmemeval_plans`) planted in them, distractors in the others, and the
record in the real file's JSON shape.
"""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from memroute.datasets.generate.longmemeval_plans import Gen, plan_question
from memroute.datasets.generate.longmemeval_values import (
    CLOSERS,
    FOLLOW_UPS,
    OPENERS,
    TOPICS,
    filler_slots,
)

_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def fmt_lme_date(d: datetime) -> str:
    """LongMemEval's style: ``"2023/05/20 (Sat) 02:21"``."""
    return f"{d:%Y/%m/%d} ({_WEEKDAYS[d.weekday()]}) {d:%H:%M}"


def _session_dates(rng: random.Random, n: int) -> list[datetime]:
    """Increasing session times a day to a week and a half apart, starting in 2023."""
    day = datetime(2023, 1, 2, tzinfo=UTC) + timedelta(days=rng.randint(0, 150))
    out = []
    for _ in range(n):
        out.append(day.replace(hour=rng.randint(0, 23), minute=rng.randint(0, 59)))
        day += timedelta(days=rng.randint(1, 10))
    return out


def _filler(g: Gen, pairs: int, avoid: list[str]) -> list[tuple[str, str, str | None]]:
    """One session of everyday chat: a topic, drifting to a second one when the first runs out,
    then generic follow-ups."""
    rng = g.rng
    first, second = rng.sample(TOPICS, 2)
    for _ in range(5):
        slots = filler_slots(rng)
        if not any(v in avoid for v in slots.values()):
            break
    chosen = [(t, first) for t in rng.sample(first.exchanges, min(pairs, len(first.exchanges)))]
    if len(chosen) < pairs:
        more = rng.sample(second.exchanges, min(pairs - len(chosen), len(second.exchanges)))
        chosen += [(t, second) for t in more]
    chosen += [(rng.choice(FOLLOW_UPS), first) for _ in range(pairs - len(chosen))]
    out: list[tuple[str, str, str | None]] = []
    for (user_t, asst_t), topic in chosen:
        asst = asst_t.format(**slots)
        if rng.random() < 0.5:
            asst = f"{asst} {rng.choice(topic.tips)}"
        user = user_t.format(**slots)
        if rng.random() < 0.4:
            user = f"{rng.choice(OPENERS)}{user}{rng.choice(CLOSERS)}"
        out.append((user, asst, None))
    return out


def question_record(g: Gen, qtype: str, abstain: bool, qid: str, spq: tuple[int, int],
                    tps: tuple[int, int]) -> dict[str, Any]:
    """One question with its haystack: ``spq`` sessions of ``tps`` turns (ranges)."""
    rng = g.rng
    n = rng.randint(*spq)
    dates = _session_dates(rng, n)
    qdate = dates[-1] + timedelta(days=rng.randint(1, 14), hours=rng.randint(0, 6))
    plan = plan_question(g, qtype, n, dates, qdate, abstain)

    pairs_lo, pairs_hi = (tps[0] + 1) // 2, tps[1] // 2
    sessions = [_filler(g, rng.randint(pairs_lo, pairs_hi), plan.values) for _ in range(n)]
    # Planted exchanges replace filler ones (turn counts stay in range); distractors go to
    # sessions without evidence.
    for s, user, asst, side in plan.planted:
        free = [i for i, ex in enumerate(sessions[s]) if ex[2] is None]
        if free:
            sessions[s][rng.choice(free)] = (user, asst, side)
        else:
            sessions[s].append((user, asst, side))
    answer_sessions = sorted({p[0] for p in plan.planted})
    others = [i for i in range(n) if i not in answer_sessions]
    for user, asst in plan.distract:
        if others:
            s = rng.choice(others)
            sessions[s][rng.randrange(len(sessions[s]))] = (user, asst, None)

    session_ids = []
    used: set[str] = set()
    for i in range(n):
        if i in answer_sessions:
            sid = f"answer_{qid.removesuffix('_abs')}_{answer_sessions.index(i) + 1}"
        else:
            while True:
                if rng.random() < 0.6:
                    sid = f"sharegpt_{rng.getrandbits(40):010x}_{rng.randint(0, 4)}"
                else:
                    sid = f"ultrachat_{rng.randint(100000, 999999)}"
                if sid not in used:
                    break
        used.add(sid)
        session_ids.append(sid)

    haystack = []
    for exchanges in sessions:
        turns = []
        for user, asst, side in exchanges:
            u: dict[str, Any] = {"role": "user", "content": user}
            a: dict[str, Any] = {"role": "assistant", "content": asst}
            if side is not None:
                (u if side == "user" else a)["has_answer"] = True
            turns += [u, a]
        haystack.append(turns)
    answer: str | int = plan.answer
    if re.fullmatch(r"\d+", plan.answer):  # the real file stores counts as numbers
        answer = int(plan.answer)
    record: dict[str, Any] = {
        "question_id": qid,
        "question_type": qtype,
        "question": plan.question,
        "answer": answer,
        "question_date": fmt_lme_date(qdate),
        "haystack_session_ids": session_ids,
        "haystack_dates": [fmt_lme_date(d) for d in dates],
        "haystack_sessions": haystack,
        "answer_session_ids": [session_ids[i] for i in answer_sessions],
    }
    if plan.stale is not None:  # memroute's extension (real files lack it): scores stale answers
        record["stale_answer"] = plan.stale
    return record
