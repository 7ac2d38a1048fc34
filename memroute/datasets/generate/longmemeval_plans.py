"""What one LongMemEval-format question plants, by question type: the question, its answer,
the evidence exchanges (by session) and distractors, drawn from the seeded generator.

The templates and the functions drawing their values are :mod:`.longmemeval_values`; the
haystack the plan goes into is :mod:`.longmemeval_haystack`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memroute.datasets.generate.longmemeval_values import (
    EVENTS,
    KNOWLEDGE_UPDATE,
    MULTI_SESSION,
    PREFERENCE,
    SINGLE_ASSISTANT,
    SINGLE_USER,
    TEMPORAL,
    Event,
    Fact,
    Tally,
)

_SINGLE = {
    "single-session-user": SINGLE_USER,
    "single-session-assistant": SINGLE_ASSISTANT,
    "single-session-preference": PREFERENCE,
    "knowledge-update": KNOWLEDGE_UPDATE,
}


@dataclass
class Plan:
    """What one question plants: exchanges by session, and distractors for filler sessions."""

    question: str
    answer: str
    # (session index, user text, assistant text, the side holding the evidence)
    planted: list[tuple[int, str, str, str]] = field(default_factory=list)
    distract: list[tuple[str, str]] = field(default_factory=list)
    values: list[str] = field(default_factory=list)  # planted values filler must not mention
    stale: str | None = None  # knowledge updates: the answer the superseded value would give


def mentions(text: str, value: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text) is not None


class Gen:
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
                if not any(mentions(user + " " + asst, v) for v in values.values()):
                    out.append((user, asst))
                    break
        return out


def plan_single(g: Gen, qtype: str, n: int, abstain: bool) -> Plan:
    fact: Fact = g.variant(qtype + (":abs" if abstain else ""), [
        f for f in _SINGLE[qtype] if f.abs_question or not abstain
    ])
    key = f"{qtype}:{fact.key}"
    values = g.fresh(key, lambda: fact.values(g.rng), lambda v: fact.answer.format(**v))
    if abstain:
        plan = Plan(fact.abs_question.format(**values), fact.abs_answer.format(**values))
    else:
        plan = Plan(g.pick(fact.questions, values), fact.answer.format(**values))
    side = "assistant" if qtype == "single-session-assistant" else "user"
    if fact.old_user:  # knowledge update: the superseded value is told in an earlier session
        old, new = sorted(g.rng.sample(range(n), 2))
        plan.planted.append(
            (old, g.pick(fact.old_user, values), g.pick(fact.old_assistant, values), side)
        )
        if not abstain:
            plan.stale = fact.answer.format(**{**values, "new": values["old"]})
    else:
        new = g.rng.randrange(n)
    plan.planted.append((new, g.pick(fact.user, values), g.pick(fact.assistant, values), side))
    plan.distract = g.distractors(fact, values)
    plan.values = list(values.values())
    return plan


def plan_multi(g: Gen, n: int, abstain: bool) -> Plan:
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
        plan = Plan(tally.abs_question.format(**slots), tally.abs_answer.format(**slots))
    else:
        plan = Plan(g.pick(tally.questions, slots), tally.answer.format(**slots))
    for s, part in zip(sorted(g.rng.sample(range(n), k)), parts, strict=True):
        plan.planted.append((s, g.pick(tally.user, part), g.pick(tally.assistant, part), "user"))
    plan.values = [v for p in parts for key, v in p.items() if key != "n"]
    return plan


def _event_texts(g: Gen, event: Event) -> tuple[str, str]:
    values = event.values(g.rng)
    return g.pick(event.user, values), g.pick(event.assistant, values)


def plan_temporal(g: Gen, n: int, dates: list[datetime], qdate: datetime, abstain: bool) -> Plan:
    form = g.rng.choice(("between", "between", "first", "ago"))
    events: list[Event] = g.rng.sample(EVENTS, 3)
    a, b, c = events
    if abstain:  # C never happens in the haystack
        s = g.rng.randrange(n)
        plan = Plan(
            TEMPORAL["abs_question"].format(a=a.phrase, c=c.phrase),
            TEMPORAL["abs_answer"].format(a=a.noun, c=c.noun),
        )
        plan.planted.append((s, *_event_texts(g, a), "user"))
        return plan
    if form == "ago":
        s = g.rng.randrange(n)
        days = (qdate.date() - dates[s].date()).days
        plan = Plan(TEMPORAL["ago_question"].format(a=a.phrase), TEMPORAL["days_answer"].format(days=days))
        plan.planted.append((s, *_event_texts(g, a), "user"))
        return plan
    s1, s2 = sorted(g.rng.sample(range(n), 2))  # a happens first
    first, second = (a, b) if g.rng.random() < 0.5 else (b, a)  # order named in the question
    if form == "between":
        days = (dates[s2].date() - dates[s1].date()).days
        plan = Plan(
            TEMPORAL["between_question"].format(first=first.phrase, second=second.phrase),
            TEMPORAL["days_answer"].format(days=days),
        )
    else:
        plan = Plan(TEMPORAL["first_question"].format(first=first.noun, second=second.noun), a.noun)
    plan.planted.append((s1, *_event_texts(g, a), "user"))
    plan.planted.append((s2, *_event_texts(g, b), "user"))
    return plan


def plan_question(g: Gen, qtype: str, n: int, dates: list[datetime], qdate: datetime,
                  abstain: bool) -> Plan:
    """The plan of one question of ``qtype`` over ``n`` sessions at ``dates``, asked at ``qdate``."""
    if qtype == "multi-session":
        return plan_multi(g, n, abstain)
    if qtype == "temporal-reasoning":
        return plan_temporal(g, n, dates, qdate, abstain)
    return plan_single(g, qtype, n, abstain)
