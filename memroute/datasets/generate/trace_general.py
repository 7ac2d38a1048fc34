"""General-knowledge questions of generated traces: problems whose reference answer is computed.

These stand for what the large model is better at and memory cannot know in advance; once one is
answered, its repeats and paraphrases can be served from memory by the small model -- where a
replay sees escalations amortize. Wordings are data (``data/trace.json``, ``general``); each
problem maker draws the slots and computes the answer.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import date, timedelta

from memroute.datasets.generate._data import load
from memroute.datasets.generate.synthetic import WEEKDAYS, fmt_date

_DATA = load("trace")
UNITS: tuple[tuple[str, str, int], ...] = _DATA["units"]

Problem = Callable[[random.Random], tuple[dict[str, str], str]]  # rng -> (slots, answer)


def _multiply(rng: random.Random) -> tuple[dict[str, str], str]:
    a, b = rng.randint(12, 99), rng.randint(12, 99)
    return {"a": str(a), "b": str(b)}, str(a * b)


def _add(rng: random.Random) -> tuple[dict[str, str], str]:
    a, b = rng.randint(100, 9999), rng.randint(100, 9999)
    return {"a": str(a), "b": str(b)}, str(a + b)


def _percent(rng: random.Random) -> tuple[dict[str, str], str]:
    p, n = rng.choice((5, 10, 15, 20, 25, 30, 40, 60, 75)), 20 * rng.randint(2, 50)
    return {"p": str(p), "n": str(n)}, str(p * n // 100)  # p * n is a multiple of 100


def _square(rng: random.Random) -> tuple[dict[str, str], str]:
    n = rng.randint(11, 99)
    return {"n": str(n)}, str(n * n)


def _convert(rng: random.Random) -> tuple[dict[str, str], str]:
    big, small, factor = rng.choice(UNITS)
    n = rng.randint(2, 250)
    return {"n": str(n), "big": big, "small": small}, str(n * factor)


def _weekday(rng: random.Random) -> tuple[dict[str, str], str]:
    d = date(1950, 1, 1) + timedelta(days=rng.randint(0, 85 * 365))
    return {"date": fmt_date(d)}, WEEKDAYS[d.weekday()]  # type: ignore[arg-type]


def _days_between(rng: random.Random) -> tuple[dict[str, str], str]:
    d1 = date(2000, 1, 1) + timedelta(days=rng.randint(0, 30 * 365))
    span = rng.randint(2, 300)
    d2 = d1 + timedelta(days=span)
    return {"d1": fmt_date(d1), "d2": fmt_date(d2)}, str(span)  # type: ignore[arg-type]


PROBLEMS: dict[str, Problem] = {
    "multiply": _multiply,
    "add": _add,
    "percent": _percent,
    "square": _square,
    "convert": _convert,
    "weekday": _weekday,
    "days_between": _days_between,
}


def _templates() -> tuple[tuple[str, tuple[str, ...]], ...]:
    raw = _DATA["general"]
    keys = [g["key"] for g in raw]
    if sorted(keys) != sorted(PROBLEMS):
        raise RuntimeError(f"trace.json general keys {keys} do not match PROBLEMS {sorted(PROBLEMS)}")
    return tuple((g["key"], g["questions"]) for g in raw)


GENERAL: tuple[tuple[str, tuple[str, ...]], ...] = _templates()


def draw_problem(rng: random.Random) -> tuple[tuple[str, ...], dict[str, str], str]:
    """A fresh problem: (question templates, slots, reference answer)."""
    key, questions = rng.choice(GENERAL)
    slots, answer = PROBLEMS[key](rng)
    return questions, slots, answer
