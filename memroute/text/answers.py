"""Comparing short answers: token-overlap agreement (LoCoMo's normalization and F1), and the
terms a value is compared by (numbers in any format, kept words, codes).

Here, below the evaluation and the serving path, because both use them: the evaluation scores
an answer against its reference, the serving path's shadow judge compares two tiers' answers,
and its grounding gate checks an answer against its sources by the same terms the replay's
``value %`` checks it against the reference.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache

from memroute.errors import ConfigError
from memroute.text.dates import DAY_NUM, MONTH, MONTH_NAMES
from memroute.text.tokenize import unigrams

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")


def normalize_answer(text: object) -> str:
    """LoCoMo's normalization: ``"The cat, and a Dog!"`` -> ``"cat dog"``."""
    s = str(text).replace(",", "").lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


@lru_cache(maxsize=1)
def _porter_stem() -> Callable[[str], str]:
    try:
        from nltk.stem import PorterStemmer
    except ImportError:
        raise ConfigError(
            "stem=True needs the nltk package (LoCoMo's Porter stemmer), which is not installed; "
            "install nltk or score with stem=False",
            field="stem",
        ) from None
    return PorterStemmer().stem


def answer_tokens(text: object, *, stem: bool = False) -> list[str]:
    tokens = normalize_answer(text).split()
    if stem:
        stemmer = _porter_stem()
        tokens = [stemmer(t) for t in tokens]
    return tokens


def f1_score(prediction: object, reference: object, *, stem: bool = False) -> float:
    """Plain token-overlap F1 (LoCoMo ``f1_score``); 0.0 when nothing overlaps."""
    pred = answer_tokens(prediction, stem=stem)
    ref = answer_tokens(reference, stem=stem)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision = same / len(pred)
    recall = same / len(ref)
    return 2 * precision * recall / (precision + recall)


_NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?!\d)|\d+")
_MONTHS = {m[:3]: m for m in MONTH_NAMES}
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")
_FORMAT_WORDS = frozenset({"pm"})  # a time's suffix ("am" is a stopword already)
# A code: hyphen-joined letters and digits ("NJ-1391", "WB-2984"). Compared whole: its number
# alone let the 0.5B's "NQ-1391" pass as read from "NJ-1391" (seed 17).
_CODE = re.compile(r"(?<![\w-])[a-z0-9]+(?:-[a-z0-9]+)+(?![\w-])", re.I)


_MONTH = rf"(?:{MONTH})\b\.?"  # "May", "Sept." (not "markets")


def _dates(year: str) -> re.Pattern[str]:
    """Dates that name a day and a month, followed by ``year`` (a pattern), or in ISO form."""
    return re.compile(rf"\b{DAY_NUM}\s+(?:of\s+)?{_MONTH}{year}|\b{_MONTH}\s+{DAY_NUM}\b{year}"
                      r"|\b\d{4}-\d{2}-\d{2}\b", re.I)


_FULL_DATE = _dates(r",?\s+\d{4}\b")  # "9 May 2024", "9th of May, 2024", "May 9, 2024", ISO
_DAY_DATE = _dates(r"(?:,?\s+\d{4}\b)?")  # the same, or with no year: "9 May", "May 9"
_YEAR = re.compile(r"[12]\d{3}")


def is_year(term: str) -> bool:
    """``term`` (one of :func:`terms`) is a year: "2024"."""
    return bool(_YEAR.fullmatch(term))


def without_dated_days(text: str) -> str:
    """``text`` with its dates that name a day (and a month) cut out."""
    return _DAY_DATE.sub(" ", text)


def only_a_month(kept: frozenset[str]) -> bool:
    """The terms (:func:`terms`) are a month, or a month and a year: no day."""
    months = kept & frozenset(MONTH_NAMES)
    return bool(months) and all(t in months or is_year(t) for t in kept)


def without_full_dates(text: str) -> str:
    """``text`` with its full dates (a day, a month and a year) cut out."""
    return _FULL_DATE.sub(" ", text)


def only_a_year(kept: frozenset[str]) -> bool:
    """The terms (:func:`terms`) are one four-digit number: a year, or a number like one."""
    return len(kept) == 1 and is_year(next(iter(kept)))


def codes(text: str) -> frozenset[str]:
    """The codes of ``text``, lower-cased: hyphen-joined tokens with a letter and a digit."""
    return frozenset(c.lower() for c in _CODE.findall(text)
                     if any(ch.isdigit() for ch in c) and any(ch.isalpha() for ch in c))


def terms(text: str) -> frozenset[str]:
    """What an answer is compared by: its numbers as digit strings, whatever their format
    ("$38,000" and "38000", "20th" and "20", "10:45am" and "10:45", "05" and "5"), and its other
    kept words, month abbreviations spelt out ("Oct" is "october"), its ISO dates spelt out
    ("2024-04-09" is "9 april 2024": the 0.5B's "2024-04-09" for a memory's "9 April 2024" was
    ungrounded, and escalated, 3 times in one replay of seed 31), and its codes whole."""
    text = _ISO_DATE.sub(_spelt, text)
    numbers = {n.replace(",", "").lstrip("0") or "0" for n in _NUMBER.findall(text)}
    words = {_MONTHS.get(w, w) for w in unigrams(text) if not any(c.isdigit() for c in w)}
    return frozenset(numbers | (words - _FORMAT_WORDS) | codes(text))


def _spelt(m: re.Match[str]) -> str:
    year, month, day = (int(g) for g in m.groups())
    if 1 <= month <= 12 and 1 <= day <= 31:
        return f"{day} {MONTH_NAMES[month - 1]} {year}"
    return m.group(0)


def holds_value(answer: str, references: Sequence[str]) -> bool | None:
    """Whether ``answer`` holds every term of one reference (:func:`terms`); None when no
    reference has a term. An answer listing several values holds each, hence beside F1, not
    instead of it."""
    wanted = [t for t in map(terms, references) if t]
    if not wanted:
        return None
    said = terms(answer)
    return any(t <= said for t in wanted)
