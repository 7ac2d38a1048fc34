"""The date words every date-reading rule shares: one copy, so that the temporal filter
(:mod:`memroute.retrieval.temporal`), the grounding gate's year rule
(:func:`memroute.text.answers.without_full_dates`) and the prompt's time questions
(:mod:`memroute.routing.memory_view`) and the value shapes
(:mod:`memroute.memory.values`) agree on what a month, a day or a weekday is."""

from __future__ import annotations

# A month, full or abbreviated ("mar", "march"; never "markets"): an alternation to wrap in
# ``(?:...)`` and bound with ``\b``.
MONTH = (r"jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
         r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?")
DAY_NUM = r"\d{1,2}(?:st|nd|rd|th)?"  # a day of the month: "9", "09", "9th"
WEEKDAY = r"monday|tuesday|wednesday|thursday|friday|saturday|sunday"
MONTH_NAMES = ("january", "february", "march", "april", "may", "june", "july", "august",
               "september", "october", "november", "december")
WEEKDAY_NAMES = tuple(WEEKDAY.split("|"))
