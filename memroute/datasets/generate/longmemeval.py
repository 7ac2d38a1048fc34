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

Word lists and sentence templates are data (``data/longmemeval.json``); the functions drawing
their values are code (:mod:`.longmemeval_values`).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memroute.datasets.generate.longmemeval_values import (
    CLOSERS,
    EVENTS,
    FOLLOW_UPS,
    KNOWLEDGE_UPDATE,
    MULTI_SESSION,
    OPENERS,
    PREFERENCE,
    SINGLE_ASSISTANT,
    SINGLE_USER,
    TEMPORAL,
    TOPICS,
    Event,
    Fact,
    Tally,
    filler_slots,
)
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
_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_SINGLE = {
    "single-session-user": SINGLE_USER,
    "single-session-assistant": SINGLE_ASSISTANT,
    "single-session-preference": PREFERENCE,
    "knowledge-update": KNOWLEDGE_UPDATE,
}


def fmt_lme_date(d: datetime) -> str:
    """LongMemEval's style: ``"2023/05/20 (Sat) 02:21"``."""
    return f"{d:%Y/%m/%d} ({_WEEKDAYS[d.weekday()]}) {d:%H:%M}"


@dataclass
class _Plan:
    """What one question plants: exchanges by session, and distractors for filler sessions."""

    question: str
    answer: str
    # (session index, user text, assistant text, the side holding the evidence)
    planted: list[tuple[int, str, str, str]] = field(default_factory=list)
    distract: list[tuple[str, str]] = field(default_factory=list)
    values: list[str] = field(default_factory=list)  # planted values filler must not mention


def _mentions(text: str, value: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text) is not None


class _Gen:
    """One generation run: the seeded source, variant rotation and answers used so far."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.queues: dict[str, list[Any]] = {}
        self.answers: dict[str, set[str]] = {}

    def variant(self, key: str, pool: Sequence[Any]) -> Any:
        """Round-robin over a shuffled pool, so every variant is used before any repeats."""
        queue = self.queues.setdefault(key, [])
        if not queue:
            queue.extend(self.rng.sample(list(pool), len(pool)))
        return queue.pop()

    def fresh(
        self,
        key: str,
        draw: Callable[[], dict[str, str]],
        answer_of: Callable[[dict[str, str]], str],
    ) -> dict[str, str]:
        """Draw values whose answer no earlier question of this kind had (when the pool allows)."""
        used = self.answers.setdefault(key, set())
        for _ in range(30):
            values = draw()
            answer = answer_of(values)
            if answer not in used:
                break
        used.add(answer)
        return values

    def pick(self, options: Sequence[str], values: dict[str, str]) -> str:
        return self.rng.choice(options).format(**values)

    def distractors(self, fact: Fact, values: dict[str, str]) -> list[tuple[str, str]]:
        """The fact's distractor exchanges with other values (none naming a planted value)."""
        out = []
        for user_t, asst_t in fact.distract:
            for _ in range(10):
                other = fact.values(self.rng)
                user, asst = user_t.format(**other), asst_t.format(**other)
                if not any(_mentions(user + " " + asst, v) for v in values.values()):
                    out.append((user, asst))
                    break
        return out


def _single(g: _Gen, qtype: str, n: int, abstain: bool) -> _Plan:
    fact: Fact = g.variant(qtype + (":abs" if abstain else ""), [
        f for f in _SINGLE[qtype] if f.abs_question or not abstain
    ])
    key = f"{qtype}:{fact.key}"
    values = g.fresh(key, lambda: fact.values(g.rng), lambda v: fact.answer.format(**v))
    if abstain:
        plan = _Plan(fact.abs_question.format(**values), fact.abs_answer.format(**values))
    else:
        plan = _Plan(g.pick(fact.questions, values), fact.answer.format(**values))
    side = "assistant" if qtype == "single-session-assistant" else "user"
    if fact.old_user:  # knowledge update: the superseded value is told in an earlier session
        old, new = sorted(g.rng.sample(range(n), 2))
        plan.planted.append(
            (old, g.pick(fact.old_user, values), g.pick(fact.old_assistant, values), side)
        )
    else:
        new = g.rng.randrange(n)
    plan.planted.append((new, g.pick(fact.user, values), g.pick(fact.assistant, values), side))
    plan.distract = g.distractors(fact, values)
    plan.values = list(values.values())
    return plan


def _multi(g: _Gen, n: int, abstain: bool) -> _Plan:
    tally: Tally = g.variant("multi-session", MULTI_SESSION)
    shared = tally.shared(g.rng)
    k = g.rng.randint(2, min(3, n))
    parts: list[dict[str, str]] = []
    for _ in range(100):  # distinct parts: "how many different countries" must stay true
        part = {**shared, **tally.part(g.rng, shared)}
        named = {v for key, v in part.items() if key in ("country", "title")}
        if all(part != p and not named & set(p.values()) for p in parts):
            parts.append(part)
        if len(parts) == k:
            break
    else:
        raise RuntimeError(f"could not draw {k} distinct parts for {tally.key!r}")
    total = sum(int(p["n"]) for p in parts)
    slots = {**shared, "total": f"{total:,}", "count": str(k)}
    if abstain:
        plan = _Plan(tally.abs_question.format(**slots), tally.abs_answer.format(**slots))
    else:
        plan = _Plan(g.pick(tally.questions, slots), tally.answer.format(**slots))
    for s, part in zip(sorted(g.rng.sample(range(n), k)), parts, strict=True):
        plan.planted.append((s, g.pick(tally.user, part), g.pick(tally.assistant, part), "user"))
    plan.values = [v for p in parts for key, v in p.items() if key != "n"]
    return plan


def _event_texts(g: _Gen, event: Event) -> tuple[str, str]:
    values = event.values(g.rng)
    return g.pick(event.user, values), g.pick(event.assistant, values)


def _temporal(g: _Gen, n: int, dates: list[datetime], qdate: datetime, abstain: bool) -> _Plan:
    form = g.rng.choice(("between", "between", "first", "ago"))
    events: list[Event] = g.rng.sample(EVENTS, 3)
    a, b, c = events
    if abstain:  # C never happens in the haystack
        s = g.rng.randrange(n)
        plan = _Plan(
            TEMPORAL["abs_question"].format(a=a.phrase, c=c.phrase),
            TEMPORAL["abs_answer"].format(a=a.noun, c=c.noun),
        )
        plan.planted.append((s, *_event_texts(g, a), "user"))
        return plan
    if form == "ago":
        s = g.rng.randrange(n)
        days = (qdate.date() - dates[s].date()).days
        plan = _Plan(TEMPORAL["ago_question"].format(a=a.phrase), TEMPORAL["days_answer"].format(days=days))
        plan.planted.append((s, *_event_texts(g, a), "user"))
        return plan
    s1, s2 = sorted(g.rng.sample(range(n), 2))  # a happens first
    first, second = (a, b) if g.rng.random() < 0.5 else (b, a)  # order named in the question
    if form == "between":
        days = (dates[s2].date() - dates[s1].date()).days
        plan = _Plan(
            TEMPORAL["between_question"].format(first=first.phrase, second=second.phrase),
            TEMPORAL["days_answer"].format(days=days),
        )
    else:
        plan = _Plan(TEMPORAL["first_question"].format(first=first.noun, second=second.noun), a.noun)
    plan.planted.append((s1, *_event_texts(g, a), "user"))
    plan.planted.append((s2, *_event_texts(g, b), "user"))
    return plan


def _session_dates(rng: random.Random, n: int) -> list[datetime]:
    """Increasing session times a day to a week and a half apart, starting in 2023."""
    day = datetime(2023, 1, 2, tzinfo=UTC) + timedelta(days=rng.randint(0, 150))
    out = []
    for _ in range(n):
        out.append(day.replace(hour=rng.randint(0, 23), minute=rng.randint(0, 59)))
        day += timedelta(days=rng.randint(1, 10))
    return out


def _filler(g: _Gen, pairs: int, avoid: list[str]) -> list[tuple[str, str, str | None]]:
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


def _question(g: _Gen, qtype: str, abstain: bool, qid: str, spq: tuple[int, int],
              tps: tuple[int, int]) -> dict[str, Any]:
    rng = g.rng
    n = rng.randint(*spq)
    dates = _session_dates(rng, n)
    qdate = dates[-1] + timedelta(days=rng.randint(1, 14), hours=rng.randint(0, 6))
    if qtype == "multi-session":
        plan = _multi(g, n, abstain)
    elif qtype == "temporal-reasoning":
        plan = _temporal(g, n, dates, qdate, abstain)
    else:
        plan = _single(g, qtype, n, abstain)

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
    return {
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
    g = _Gen(seed)
    out = []
    ids: set[str] = set()
    for qtype, abstain in _plan_questions(g.rng, nq):
        qid = f"{g.rng.getrandbits(32):08x}"
        while qid in ids:
            qid = f"{g.rng.getrandbits(32):08x}"
        ids.add(qid)
        out.append(_question(g, qtype, abstain, qid + ("_abs" if abstain else ""), spq, tps))
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
