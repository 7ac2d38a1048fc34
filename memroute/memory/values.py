"""Value-shaped spans of a text: codes, numbers, times, dates, money, quoted titles, names.

What supersession compares (an update replaces an older pair when both state a value of the
same kind and the older one is not among the new ones) and what the memory view checks a
model's reply against (a reply that adds a value to the user's own statement is not shown).
No language model: regular expressions, so it is cheap enough to run per injected memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memroute.text.dates import MONTH, MONTH_NAMES, WEEKDAY_NAMES

SHORT_ANSWER_WORDS = 4  # up to this many words, an answer's first capitalised word is a name

_MONTH = rf"(?:{MONTH})"
_MONTHS_WORDS = frozenset(MONTH_NAMES + WEEKDAY_NAMES)
_QUOTES = "'\"\u2018\u2019\u201c\u201d"
# (kind, pattern); earlier kinds claim their span first.
_VALUE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("money", re.compile(r"[$€£]\s?\d[\d,]*(?:\.\d+)?(?:\s?[kKmM]\b)?")),
    ("date", re.compile(rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}\b(?:,?\s+\d{{4}})?"
                        rf"|\b{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?\b(?:,?\s+\d{{4}})?"
                        r"|\b\d{4}-\d{1,2}-\d{1,2}\b", re.I)),  # the 0.5B's "2024-05-17"
    ("time", re.compile(r"\b\d{1,2}(?::\d{2})?\s?(?:am|pm|a\.m\.|p\.m\.)(?!\w)"
                        r"|\b\d{1,2}:\d{2}\b", re.I)),
    # A quoted title: 'The Silent Archive', "Dune" (before codes: a title may hold a number).
    ("title", re.compile(r"(?<!\w)['\"\u2018\u201c][A-Z][^'\"\u2019\u201d\n]{0,60}?['\"\u2019\u201d](?!\w)")),
    ("code", re.compile(r"\b[\w-]*\d[\w-]*\b")),
    # Capitalised words inside a sentence (not the first word of one): names, places, vendors.
    ("name", re.compile(r"(?<=[\w,;:)] )[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*")),
)


# Capitalised words that open a reply or a clause without naming anything.
_NOT_NAMES = frozenset("""i q a noted yes no sure ok okay got thanks thank great sounds it its
    your you the that this we our my an of cool nice lovely what done perfect understood alright
    of course hello hi hey well so""".split())


@dataclass(frozen=True)
class Value:
    kind: str  # money | date | time | title | code | name
    norm: str  # lower-cased, spaces collapsed


def values(text: str) -> tuple[tuple[Value, ...], str]:
    """The value-shaped spans of ``text`` and the text with them cut out."""
    found: list[Value] = []
    rest = text
    for kind, pattern in _VALUE_PATTERNS:
        for m in pattern.finditer(rest):
            span = m.group().strip().strip(_QUOTES)
            if kind == "name":
                span = " ".join(w for w in span.split() if w.lower() not in _MONTHS_WORDS)
                if not span or span.split()[0].lower().strip("'") in _NOT_NAMES:
                    continue
            found.append(Value(kind, " ".join(span.lower().split())))
        rest = pattern.sub(" ", rest)
    return tuple(found), rest


def reply_text(answer: str) -> str:
    """A short answer's leading capital is a name ("Wombat.", "Clover, since May"): prefixed
    so that :func:`values` reads it as inside a sentence; a long one's opens a sentence
    ("Housing is the main cost ...")."""
    return f"A: {answer}" if len(answer.split()) <= SHORT_ANSWER_WORDS else answer
