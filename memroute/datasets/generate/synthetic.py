"""Synthetic persistent-agent conversations in LoCoMo's JSON format.

Each sample is one user chatting with an assistant over several dated sessions (2024, weeks apart).
Facts nobody could guess (seeded, different per user) are planted among small talk, each in one
user turn that the assistant's reply restates, and each gets one probe question in the user's own
words. Fact types and the LoCoMo category they are filed under:

==========  ========  =====================================================================
fact_type   category  example
==========  ========  =====================================================================
name        4         "we named our beagle Biscuit" -> "What's my dog called again?"
number      4         apartment number, renovation budget, locker number, guest count
date        2         a flight / appointment / wedding date ("14 June 2024"): temporal
decision    4         "we went with Northwind Catering instead of Bluebell Catering"
code        4         an order id / error code / booking reference like "ZX-4471"
negative    4         "I never drink coffee" -> "Do I drink coffee?" -> "No"
correction  2         a value stated early and changed later; the answer is the new value,
                      ``stale_answer`` keeps the old one, evidence = [new turn, old turn]
==========  ========  =====================================================================

Word lists and sentence templates are data (``data/synthetic.json``); the functions drawing a
variant's values (:data:`VALUES`, by the variant's key) are code. QA records carry the extra keys
``fact_type`` (and ``stale_answer`` for corrections), which :func:`memroute.datasets.load_locomo`
reads. Output is deterministic for a seed.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memroute.datasets.generate._data import load
from memroute.errors import InvalidRequest

_DATA = load("synthetic")
_MONTHS: tuple[str, ...] = _DATA["months"]
FIRST_NAMES: tuple[str, ...] = _DATA["first_names"]
POOLS: dict[str, tuple[str, ...]] = _DATA["pools"]
BREEDS: tuple[str, ...] = _DATA["breeds"]
FOODS: tuple[str, ...] = _DATA["foods"]
HOBBIES: tuple[str, ...] = _DATA["hobbies"]
SHOWS: tuple[str, ...] = _DATA["shows"]
WEEKDAYS: tuple[str, ...] = _DATA["weekdays"]
# Small talk around the facts; several touch the same topics as the facts (pets, trips, budgets,
# errors, dates) so the planted turn is not the only one a probe's keywords match.
FILLER: tuple[tuple[str, str], ...] = _DATA["filler"]
GREETINGS: tuple[tuple[str, str], ...] = _DATA["greetings"]
CLOSINGS: tuple[tuple[str, str], ...] = _DATA["closings"]


# Date and time formats, shared by the fact templates and the LoCoMo session headers.
def fmt_date(d: datetime) -> str:
    return f"{d.day} {_MONTHS[d.month - 1]} {d.year}"


def fmt_time(h: int, m: int) -> str:
    return f"{(h - 1) % 12 + 1}:{m:02d} {'am' if h < 12 else 'pm'}"


def fmt_session(d: datetime) -> str:
    """LoCoMo's style: ``"2:15 pm on 3 March, 2024"``."""
    return f"{fmt_time(d.hour, d.minute)} on {d.day} {_MONTHS[d.month - 1]}, {d.year}"


# Value makers for the variants' ``values`` callables (numbers and codes in a fixed format).
def _code(rng: random.Random) -> str:
    letters = "ABCDEFGHJKLMNPQRSTUVWXYZ"
    return f"{rng.choice(letters)}{rng.choice(letters)}-{rng.randint(1000, 9999)}"


def _apartment(rng: random.Random) -> str:
    return f"{rng.randint(2, 19)}{rng.randint(1, 24):02d}"  # floor + unit


def _budget(rng: random.Random) -> str:
    return f"${rng.randint(12, 48)},{rng.choice(('000', '500'))}"


def _clock(rng: random.Random) -> str:
    return fmt_time(rng.randint(8, 16), rng.choice((0, 15, 30, 45)))


def _vendor_pair(d: _Draw, suffix: str) -> dict[str, str]:
    chosen, other = d.pick("vendor"), d.pick_distractor("vendor")
    return {"value": f"{chosen}{suffix}", "other": f"{other}{suffix}"}


Values = Callable[["_Draw", int], dict[str, str]]  # (draw, epoch of the planted session)

# The values of each variant (by its key in the data file), drawn when the fact is planted.
VALUES: dict[str, Values] = {
    # ---- name
    "dog": lambda d, t: {"value": d.pick("pet"), "breed": d.rng.choice(BREEDS)},
    "cat": lambda d, t: {"value": d.pick("pet")},
    "manager": lambda d, t: {"value": f"{d.pick('person')} {d.pick('surname')}"},
    "niece": lambda d, t: {"value": d.pick("person")},
    # ---- number
    "apartment": lambda d, t: {"value": d.fresh("number", _apartment)},
    "budget": lambda d, t: {"value": d.fresh("budget", _budget)},
    "locker": lambda d, t: {"value": d.fresh("number", lambda r: str(r.randint(100, 899)))},
    "guests": lambda d, t: {"value": d.fresh("number", lambda r: str(r.randint(23, 95)))},
    # ---- date
    "flight": lambda d, t: {"value": d.later_date(t, 10, 70), "city": d.pick("city")},
    "dentist": lambda d, t: {"value": d.later_date(t, 7, 40)},
    "wedding": lambda d, t: {"value": d.later_date(t, 30, 120), "cousin": d.pick("person")},
    "lease": lambda d, t: {"value": d.later_date(t, 40, 150)},
    # ---- decision
    "caterer": lambda d, t: _vendor_pair(d, " Catering"),
    "movers": lambda d, t: _vendor_pair(d, " Movers"),
    "crm": lambda d, t: _vendor_pair(d, " CRM"),
    # ---- code
    "order": lambda d, t: {"value": d.fresh("code", _code)},
    "error": lambda d, t: {"value": d.fresh("code", _code)},
    "booking": lambda d, t: {"value": d.fresh("code", _code)},
    # ---- negative
    "coffee": lambda d, t: {},
    "meat": lambda d, t: {},
    "car": lambda d, t: {},
    "smoke": lambda d, t: {},
    # ---- correction (answer = new value; stale_answer = old value)
    "city": lambda d, t: {"old": d.pick("city"), "value": d.pick("city")},
    "standup": lambda d, t: {"old": d.fresh("clock", _clock), "value": d.fresh("clock", _clock)},
    "team": lambda d, t: {"old": d.pick("team"), "value": d.pick("team")},
}


@dataclass(frozen=True)
class Variant:
    """One way a fact is planted: its statement, the assistant's restatement and probe questions."""

    fact_type: str
    key: str
    values: Values
    user: tuple[str, ...]
    assistant: tuple[str, ...]
    questions: tuple[str, ...]
    answer: str = "{value}"
    # corrections only: the first statement of the (later superseded) value, in {old}
    user_old: tuple[str, ...] = field(default=())
    assistant_old: tuple[str, ...] = field(default=())


def _variants(raw: tuple[dict[str, Any], ...]) -> tuple[Variant, ...]:
    keys = [v["key"] for v in raw]
    if sorted(keys) != sorted(VALUES) or len(set(keys)) != len(keys):
        raise RuntimeError(f"synthetic.json variants {keys} do not match VALUES {sorted(VALUES)}")
    return tuple(Variant(values=VALUES[v["key"]], **v) for v in raw)


VARIANTS: tuple[Variant, ...] = _variants(_DATA["variants"])


ASSISTANT = "Assistant"
# the data file's value pools hold enough distinct values for this many users
MAX_USERS = 12
FACT_TYPES = ("name", "number", "date", "decision", "code", "negative", "correction")
CATEGORY_BY_TYPE = {t: 2 if t in ("date", "correction") else 4 for t in FACT_TYPES}


class _Draw:
    """Seeded value source: pool values are never reused across users (so no model can know
    them), and every value given to a user is remembered so small talk can avoid it."""

    def __init__(self, rng: random.Random, used: dict[str, set[str]]) -> None:
        self.rng = rng
        self.used = used
        self.reserved: list[str] = []

    def pick(self, pool: str) -> str:
        free = [v for v in POOLS[pool] if v not in self.used.setdefault(pool, set())]
        if not free:
            raise InvalidRequest(
                f"the synthetic '{pool}' value pool ran out; use at most {MAX_USERS} users",
                field="num_users",
            )
        value = self.rng.choice(free)
        self.used[pool].add(value)
        self.reserved.append(value)
        return value

    def pick_distractor(self, pool: str) -> str:
        """A pool value this user has not been given; other users may share it (it is never an
        answer), which keeps the pools large enough."""
        value = self.rng.choice([v for v in POOLS[pool] if v not in self.reserved])
        self.reserved.append(value)
        return value

    def fresh(self, kind: str, make: Callable[[random.Random], str]) -> str:
        seen = self.used.setdefault(kind, set())
        for _ in range(1000):
            value = make(self.rng)
            # nor may it be mentioned in, or mention, this user's other values
            clash = any(_mentioned(value, r) or _mentioned(r, value) for r in self.reserved)
            if value not in seen and not clash:
                seen.add(value)
                self.reserved.append(value)
                return value
        raise InvalidRequest(f"could not draw a fresh '{kind}' value", field="num_users")

    def later_date(self, epoch: int, lo: int, hi: int) -> str:
        """A date ``lo``-``hi`` days after the session (plans are made ahead), unused so far."""
        start = datetime.fromtimestamp(epoch, tz=UTC)
        return self.fresh("date", lambda r: fmt_date(start + timedelta(days=r.randint(lo, hi))))


def _mentioned(needle: str, haystack: str) -> bool:
    """Whole-mention test: "45" is in "45 guests" but not in "$45,000"; "818" not in "XY-8181"."""
    pattern = rf"(?<![\w$-])(?<!\d[,.:]){re.escape(needle)}(?![\w-])(?![,.:]\d)"
    return re.search(pattern, haystack) is not None


@dataclass
class _Plant:
    variant: Variant
    session: int  # 0-based
    old_session: int | None = None  # corrections
    values: dict[str, str] = field(default_factory=dict)
    dia_id: str = ""
    old_dia_id: str = ""


def _session_dates(rng: random.Random, n: int) -> list[datetime]:
    hi = max(2, min(13, 300 // n))  # weeks apart, and (for <= 23 sessions) all within 2024
    lo = min(5, hi)
    day = datetime(2024, 1, 8, tzinfo=UTC) + timedelta(days=rng.randint(0, 50))
    out = []
    for _ in range(n):
        out.append(day.replace(hour=rng.randint(8, 21), minute=rng.randint(0, 59)))
        day += timedelta(days=rng.randint(lo, hi))
    return out


def _choose_variants(rng: random.Random) -> list[Variant]:
    by_type: dict[str, list[Variant]] = {}
    for v in VARIANTS:
        by_type.setdefault(v.fact_type, []).append(v)
    chosen = [rng.choice(by_type[t]) for t in FACT_TYPES]
    rest = [v for v in VARIANTS if v not in chosen and v.fact_type != "correction"]
    return chosen + rng.sample(rest, rng.randint(1, 3))


def _fill(template: str, slots: dict[str, str]) -> str:
    return template.format(**slots)


def _filler_slots(d: _Draw) -> dict[str, str]:
    reserved = set(d.reserved)
    return {
        "friend": d.rng.choice([p for p in POOLS["person"] if p not in reserved]),
        "city": d.rng.choice([c for c in POOLS["city"] if c not in reserved]),
        "food": d.rng.choice(FOODS),
        "hobby": d.rng.choice(HOBBIES),
        "show": d.rng.choice(SHOWS),
        "weekday": d.rng.choice(WEEKDAYS),
        "n": str(d.rng.randint(5, 14)),
    }


def _generate_user(index: int, name: str, sessions: int, seed: int, rng: random.Random,
                   used: dict[str, set[str]]) -> dict[str, Any]:
    draw = _Draw(rng, used)
    dates = _session_dates(rng, sessions)
    plants: list[_Plant] = []
    for variant in _choose_variants(rng):
        if variant.fact_type == "correction":
            old = rng.randrange(0, max(1, sessions // 2))
            plant = _Plant(variant, rng.randrange(max(old + 1, sessions // 2), sessions), old)
        else:
            plant = _Plant(variant, rng.randrange(sessions))
        plant.values = variant.values(draw, int(dates[plant.session].timestamp()))
        plants.append(plant)

    conversation: dict[str, Any] = {"speaker_a": name, "speaker_b": ASSISTANT}
    me = {"name": name}
    for s in range(sessions):
        # (user text, assistant text, plant, is_old_statement)
        items: list[tuple[str, str, _Plant | None, bool]] = []
        n_filler = rng.randint(9, 14)
        for user_t, asst_t in rng.sample(FILLER, n_filler):
            slots = _filler_slots(draw)
            items.append((_fill(user_t, slots), _fill(asst_t, slots), None, False))
        for plant in plants:
            v, vals = plant.variant, plant.values
            if plant.old_session == s:
                said = _fill(rng.choice(v.user_old), vals)
                reply = _fill(rng.choice(v.assistant_old), vals)
                items.insert(rng.randint(0, len(items)), (said, reply, plant, True))
            if plant.session == s:
                said = _fill(rng.choice(v.user), vals)
                reply = _fill(rng.choice(v.assistant), vals)
                items.insert(rng.randint(0, len(items)), (said, reply, plant, False))
        greeting = rng.choice(GREETINGS)
        items.insert(0, (greeting[0], _fill(greeting[1], me), None, False))
        if rng.random() < 0.5:
            closing = rng.choice(CLOSINGS)
            items.append((closing[0], _fill(closing[1], me), None, False))

        turns = []
        for user_text, asst_text, plant, is_old in items:
            dia_id = f"D{s + 1}:{len(turns) + 1}"
            if plant is not None:
                if is_old:
                    plant.old_dia_id = dia_id
                else:
                    plant.dia_id = dia_id
            turns.append({"speaker": name, "dia_id": dia_id, "text": user_text})
            turns.append({"speaker": ASSISTANT, "dia_id": f"D{s + 1}:{len(turns) + 1}",
                          "text": asst_text})
        conversation[f"session_{s + 1}_date_time"] = fmt_session(dates[s])
        conversation[f"session_{s + 1}"] = turns

    qa = []
    for plant in plants:
        v = plant.variant
        record: dict[str, Any] = {
            "question": _fill(rng.choice(v.questions), plant.values),
            "answer": _fill(v.answer, plant.values),
            "evidence": [plant.dia_id] + ([plant.old_dia_id] if plant.old_dia_id else []),
            "category": CATEGORY_BY_TYPE[v.fact_type],
            "fact_type": v.fact_type,
        }
        if v.fact_type == "correction":
            record["stale_answer"] = plant.values["old"]
        qa.append(record)
    rng.shuffle(qa)
    return {"sample_id": f"synth{seed}-u{index + 1:02d}", "conversation": conversation, "qa": qa}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def generate(
    *, num_users: int = 4, sessions_per_user: int = 6, seed: int = 0
) -> list[dict[str, Any]]:
    """LoCoMo-format samples, one per user, deterministic for ``seed``."""
    if not _is_int(num_users) or not 1 <= num_users <= MAX_USERS:
        raise InvalidRequest(
            f"num_users must be 1-{MAX_USERS}, got {num_users!r}", field="num_users"
        )
    if not _is_int(sessions_per_user) or sessions_per_user < 2:
        raise InvalidRequest(
            f"sessions_per_user must be an integer >= 2 (corrections span two sessions), "
            f"got {sessions_per_user!r}",
            field="sessions_per_user",
        )
    rng = random.Random(seed)
    used: dict[str, set[str]] = {}
    names = rng.sample(FIRST_NAMES, num_users)
    return [
        _generate_user(i, name, sessions_per_user, seed, rng, used)
        for i, name in enumerate(names)
    ]


def write_json(samples: list[dict[str, Any]], path: str | Path) -> Path:
    """Write samples as a LoCoMo-format JSON file (parent folders are created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(samples, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Write a synthetic LoCoMo-format dataset.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    samples = generate(num_users=args.users, sessions_per_user=args.sessions, seed=args.seed)
    print(write_json(samples, args.out))


if __name__ == "__main__":
    main()
