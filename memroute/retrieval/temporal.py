"""Date expressions in questions -> a window of session time the answer's memories lie in.

"What did I buy in May 2023?", "... last month", "... two weeks ago", "... yesterday": dateparser
(``search.search_dates``, English only, relative to the question time, past dates preferred)
finds the expression and its point in time; its granularity (day, week, month, year) is read
off the matched words here (dateparser's own ``add_period`` says "time" for "now 1 week ago"),
and so is the window around the point, with few rules:

- an explicit or named period is taken whole: "in May 2023", "last month" -> that calendar month,
  "in 2022", "last year" -> that calendar year, "last week" -> its day +-7 days;
- "N units ago" is approximate: its day +-1 day / +-7 days (weeks) / +-15 days (months) /
  +-182 days (years);
- a day ("on 8 May 2023", "yesterday", "on Tuesday") gets a day of slack either side, because
  session dates are coarse;
- "since"/"after"/"from" X runs from X to the question day, "before" X ends where X starts.

search_dates fires on many words that are not dates ("May I ask", "now", "second", numbers, a
person called June). A match counts only if it holds a strong date word ("ago", "yesterday",
"last month", a weekday, 2023-05-08) or a month name / bare year in date position: next to a
day number, or after "in", "on", "of", "during", "since"... Present words ("now", "today",
"currently") never count: they describe the state asked about, not when a memory was made.

Cost: a cheap regex skips dateparser for questions with no date word (most of them: ~0.01 ms);
dateparser reads only the clauses holding one, each date phrase set off by a semicolon (its
chunking otherwise glues neighbouring words on). Measured on 2 shared cores: 1-2 ms warm per
dated question, 0.2-0.8 s for the first call of a process (dateparser's import and data).

LongMemEval-style questions start with ``[Current date: 2023/05/30 (Tue) 14:00]``: that prefix
is the question time (it wins over the caller's), never the window.

Times are epoch seconds, UTC; a window's ``end`` is inclusive (the last second of its day).
"""

from __future__ import annotations

import inspect
import logging
import math
import numbers
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, NamedTuple

from memroute.errors import InvalidRequest
from memroute.text.dates import DAY_NUM as _DAY_NUM
from memroute.text.dates import MONTH as _MONTH
from memroute.text.dates import WEEKDAY as _WEEKDAY
from memroute.types import RetrievalHit

log = logging.getLogger(__name__)

DAY_S = 86400
MAX_PARSE_CHARS = 1000  # dateparser's cost grows with the text; questions are short
# Question times dateparser's arithmetic can take (years 1900-9000).
MIN_TIME, MAX_TIME = -2208988800, 221845392000
OPEN_START = -(2**62)  # "before X": no lower bound (still an INT64 literal for Milvus)

_PREFIX_RE = re.compile(r"^\s*\[current date:\s*([^\]]*)\]\s*", re.IGNORECASE)
_PREFIX_DATE_RE = re.compile(r"(\d{4})[/-](\d{1,2})[/-](\d{1,2})(?:\D+?(\d{1,2}):(\d{2}))?")

_UNIT = r"days?|weeks?|months?|years?"
# Enough on its own: relative words and numeric dates.
_STRONG_RE = re.compile(
    rf"\b(?:ago|yesterday|(?:last|past|previous|this)\s+(?:{_UNIT}|weekend)|{_WEEKDAY})\b"
    r"|\b\d{4}[-/.]\d{1,2}(?:[-/.]\d{1,2})?\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b",
    re.IGNORECASE,
)
# Month names and bare years: dates only in date position (see _anchored).
_WEAK_RE = re.compile(rf"\b(?:{_MONTH}|(?:19|20)\d{{2}})\b", re.IGNORECASE)
_MONTH_RE = re.compile(rf"^(?:{_MONTH})$", re.IGNORECASE)
_YEAR_RE = re.compile(r"^(?:19|20)\d{2}$")
_MONTH_WITH_NUMBER_RE = re.compile(
    rf"\b(?:{_MONTH})\.?\s+(?:{_DAY_NUM}|(?:19|20)\d{{2}})\b|\b{_DAY_NUM}\s+(?:of\s+)?(?:{_MONTH})\b",
    re.IGNORECASE,
)
_WORD_RE = re.compile(r"[A-Za-z0-9']+")
# Date phrases set off by a semicolon (a comma is not enough) before dateparser sees them: its
# chunking otherwise glues the words around them on ("per month in August 2023" parses as
# nothing, "in now 3 weeks ago" as "in 3 weeks", a future date).
_ABBR_DOT_RE = re.compile(r"\b(jan|feb|mar|apr|jun|jul|aug|sept?|oct|nov|dec)\.", re.IGNORECASE)
_CLAUSE_RE = re.compile(r"\s*[;?!]+(?:\s+|$)")  # not ".": "Jan. 5"
_COUNT = r"\d+|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a few|several"
_AGO_PHRASE_RE = re.compile(rf"\s+((?:{_COUNT})\s+(?:{_UNIT})\s+ago)\b", re.IGNORECASE)
_ANCHORED_PHRASE_RE = re.compile(
    rf"\s+((?:in|on|during|since|until|before|after|from)\s+(?:the\s+)?"
    rf"(?:{_DAY_NUM}\s+(?:of\s+)?)?(?:{_MONTH}|(?:19|20)\d{{2}})\b)",
    re.IGNORECASE,
)
# Granularity of a match (see granularity): unit words first, then the shape of the date.
_UNIT_WORD_RE = re.compile(rf"\b(?:{_UNIT}|weekends?|yesterday|{_WEEKDAY})\b", re.IGNORECASE)
_WEEKDAY_RE = re.compile(rf"^(?:{_WEEKDAY})$")
_FULL_NUMERIC_RE = re.compile(r"\b\d{4}[-/.]\d{1,2}[-/.]\d{1,2}\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b")
_MONTH_NUMERIC_RE = re.compile(r"\b\d{4}[-/.]\d{1,2}\b")
_MONTH_DAY_RE = re.compile(
    rf"\b(?:{_MONTH})\.?\s+{_DAY_NUM}(?!\d)\b|\b{_DAY_NUM}\s+(?:of\s+)?(?:{_MONTH})\b", re.IGNORECASE
)
_MONTH_IN_RE = re.compile(rf"\b(?:{_MONTH})\b", re.IGNORECASE)
_YEAR_IN_RE = re.compile(r"\b(?:19|20)\d{2}\b")
# Words that put a following month name or year in date position.
ANCHORS = frozenset({
    "in", "on", "of", "during", "since", "until", "till", "by", "before", "after", "early", "mid",
    "late", "from", "through", "throughout", "around", "between", "last", "this", "next",
})
SINCE = frozenset({"since", "after", "from"})
BEFORE = frozenset({"before"})
_AGO_SLACK_DAYS = {"week": 7, "month": 15, "year": 182}  # "N units ago": +- this many days


class TimeWindow(NamedTuple):
    """Session times ``start <= t <= end`` (epoch seconds, both inclusive); a plain tuple, so
    the memory layer can take it without importing this module."""

    start: int
    end: int

    def __contains__(self, t: object) -> bool:  # type: ignore[override]
        return isinstance(t, numbers.Real) and self.start <= t <= self.end


def split_question(query: object, question_time: object) -> tuple[str, float]:
    """(the question without a ``[Current date: ...]`` prefix, the question time: the prefix's
    date when it has one, else ``question_time``). Raises :class:`InvalidRequest` naming
    ``query`` / ``question_time``."""
    if not isinstance(query, str):
        raise InvalidRequest(f"query must be a string, got {type(query).__name__}", field="query")
    qt = check_question_time(question_time)
    m = _PREFIX_RE.match(query)
    if not m:
        return query, qt
    d = _PREFIX_DATE_RE.search(m.group(1))
    if d:
        try:
            year, month, day = int(d[1]), int(d[2]), int(d[3])
            hour, minute = (int(d[4]), int(d[5])) if d[4] else (0, 0)
            qt = datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp()
        except ValueError:  # 2023/02/30: keep the caller's time
            pass
    return query[m.end():], qt


def check_question_time(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidRequest(
            f"question_time must be epoch seconds (a number), got {type(value).__name__}",
            field="question_time",
        )
    t = float(value)
    if not math.isfinite(t) or not MIN_TIME <= t <= MAX_TIME:
        raise InvalidRequest(
            "question_time must be finite epoch seconds between the years 1900 and 9000",
            field="question_time",
        )
    return t


def time_window(query: object, question_time: object) -> TimeWindow | None:
    """The session-time window a question's date expressions point to, or None (no date, or only
    words that merely look like one). ``question_time``: epoch seconds the question is asked at
    (a ``[Current date: ...]`` prefix of ``query`` overrides it)."""
    text, qt = split_question(query, question_time)
    text = text[:MAX_PARSE_CHARS]
    if not (_STRONG_RE.search(text) or _WEAK_RE.search(text)):
        return None  # the common case: no dateparser call at all
    base = datetime.fromtimestamp(qt, UTC).replace(tzinfo=None, second=0, microsecond=0)
    text = _ABBR_DOT_RE.sub(r"\1", text)  # dateparser reads "Jan. 5" as January and a stray 5
    text = _ANCHORED_PHRASE_RE.sub(r"; \1", _AGO_PHRASE_RE.sub(r"; \1", text))
    # dateparser's cost grows with the text: it reads only the clauses with a date word.
    text = "; ".join(c for c in _CLAUSE_RE.split(text) if _STRONG_RE.search(c) or _WEAK_RE.search(c))
    found = _search(text, base)
    windows: list[TimeWindow] = []
    pos = 0
    for match, point, period in found:
        at = text.find(match, pos)
        at = at if at >= 0 else text.find(match)
        pos = at + len(match) if at >= 0 else pos
        before = _word_before(text, at) if at >= 0 else ""
        words = [w.lower() for w in _WORD_RE.findall(match)]
        lead = words[0] if words and words[0] in ANCHORS else before
        if not _counts(match, words, before, bool(windows)):
            continue
        w = _window(point, granularity(match, period), "ago" in words)
        if lead in SINCE:
            w = TimeWindow(w.start, max(w.end, _day_end(base)))
        elif lead in BEFORE:
            w = TimeWindow(OPEN_START, w.start - 1)
        if w.start > _day_end(base):
            continue  # wholly after the question: no memory can be from then
        windows.append(w)
    if not windows:
        return None
    return TimeWindow(min(w.start for w in windows), max(w.end for w in windows))


def _counts(match: str, words: list[str], before: str, after_date: bool) -> bool:
    """Whether a dateparser match is a date expression (see the module doc)."""
    if _STRONG_RE.search(match):
        return True
    if not _WEAK_RE.search(match):
        return False  # "now", "second", "3", "today at 3pm": no date word
    if _MONTH_WITH_NUMBER_RE.search(match):
        return True
    if len(words) == 1 and _YEAR_RE.match(words[0]) and _MONTH_RE.match(before):
        return False  # "May 2023" split in two: the month match already carries the year
    anchored = before in ANCHORS or (after_date and before in ("and", "or"))
    return anchored or (len(words) > 1 and words[0] in ANCHORS)


def granularity(match: str, fallback: str = "day") -> str:
    """day | week | month | year of a matched date expression, from its words; ``fallback``
    (dateparser's period) when they say nothing."""
    unit = _UNIT_WORD_RE.search(match)
    if unit:
        word = unit.group(0).lower()
        return "day" if word == "yesterday" or _WEEKDAY_RE.match(word) else word.rstrip("s").replace("weekend", "week")
    if _FULL_NUMERIC_RE.search(match) or _MONTH_DAY_RE.search(match):
        return "day"
    if _MONTH_NUMERIC_RE.search(match) or _MONTH_IN_RE.search(match):
        return "month"
    if _YEAR_IN_RE.search(match):
        return "year"
    return fallback if fallback in ("day", "week", "month", "year") else "day"


def _window(point: datetime, period: str, ago: bool) -> TimeWindow:
    day = point.replace(hour=0, minute=0, second=0, microsecond=0)
    if ago and period in _AGO_SLACK_DAYS:
        slack = timedelta(days=_AGO_SLACK_DAYS[period])
        return _span(day - slack, day + slack)
    if period == "week":
        return _span(day - timedelta(days=7), day + timedelta(days=7))
    if period == "month":
        first = day.replace(day=1)
        return _span(first, _next_month(first) - timedelta(days=1))
    if period == "year":
        return _span(day.replace(month=1, day=1), day.replace(month=12, day=31))
    # day, time, part_of_day: the day with a day of slack either side
    return _span(day - timedelta(days=1), day + timedelta(days=1))


def _span(first_day: datetime, last_day: datetime) -> TimeWindow:
    """From the start of ``first_day`` to the last second of ``last_day`` (naive UTC)."""
    start = int(first_day.replace(tzinfo=UTC).timestamp())
    return TimeWindow(start, _day_end(last_day))


def _day_end(d: datetime) -> int:
    midnight = d.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=UTC)
    return int(midnight.timestamp()) + DAY_S - 1


def _next_month(first: datetime) -> datetime:
    return first.replace(year=first.year + 1, month=1) if first.month == 12 else first.replace(month=first.month + 1)


def _word_before(text: str, at: int) -> str:
    words = _WORD_RE.findall(text[max(0, at - 40):at])
    return words[-1].lower() if words else ""


def _search(text: str, base: datetime) -> list[tuple[str, datetime, str]]:
    """dateparser's matches (text, point, period); [] when it finds none or fails."""
    from dateparser.search import search_dates  # ~0.15 s to import: only when a date word shows

    try:
        found = search_dates(text, languages=["en"], settings=_settings(base), add_period=True)
    except Exception as exc:  # noqa: BLE001 - any parser bug
        # A parser failure must never fail retrieval: the question is served unfiltered.
        log.debug("dateparser failed on %r: %s", text[:80], exc)
        return []
    return [(m, p, str(period)) for m, p, period in found or []]


@lru_cache(maxsize=256)
def _settings(base: datetime) -> Any:
    """dateparser's Settings for one question time (built once: each build copies ~30 keys)."""
    from dateparser.conf import settings

    mod = {
        "RELATIVE_BASE": base,
        "PREFER_DATES_FROM": "past",
        "RETURN_TIME_AS_PERIOD": True,
        "TIMEZONE": "UTC",
        "RETURN_AS_TIMEZONE_AWARE": False,
    }
    return settings.replace(mod_settings=mod, **mod)


# ----------------------------------------------------------- helpers of the retriever
def question_times(times: Sequence[object] | None, n: int, now: float) -> list[float]:
    """One question time per query: the caller's (validated), else ``now``."""
    if times is None:
        return [now] * n
    if isinstance(times, (str, bytes)) or not isinstance(times, Sequence):
        raise InvalidRequest("question_times must be a list of epoch seconds", field="question_times")
    if len(times) != n:
        raise InvalidRequest(f"{len(times)} question times for {n} queries", field="question_times")
    return [check_question_time(t) for t in times]


def takes_keyword(fn: object, name: str) -> bool:
    """Whether ``fn`` takes the keyword ``name`` (a store's ``search`` ``time_window``, a loader
    ``fresh``); a callable without a signature is called plainly."""
    try:
        return name in inspect.signature(fn).parameters  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def takes_time_window(search: object) -> bool:
    """Whether a store's ``search`` takes ``time_window`` (the Milvus store does)."""
    return takes_keyword(search, "time_window")


def in_window(hits: Sequence[tuple[Any, float]], window: TimeWindow) -> list[tuple[Any, float]]:
    """The (memory, score) hits whose memory's session time lies in ``window``."""
    return [(m, s) for m, s in hits if m.session_time in window]


def fill_from(filtered: list[RetrievalHit], unfiltered: Sequence[RetrievalHit], top_k: int) -> list[RetrievalHit]:
    """The window's hits first, then the unfiltered ranking's others up to ``top_k`` (a misparsed
    date never leaves the model with nothing). A filler's score is capped at the slot above it,
    so scores stay descending and the list order is the ranking."""
    out = list(filtered[:top_k])
    seen = {h.memory.id for h in out}
    for h in unfiltered:
        if len(out) >= top_k:
            break
        if h.memory.id in seen:
            continue
        if out and h.score > out[-1].score:
            h = RetrievalHit(h.memory, out[-1].score, dense_score=h.dense_score, bm25_score=h.bm25_score)
        out.append(h)
        seen.add(h.memory.id)
    return out
