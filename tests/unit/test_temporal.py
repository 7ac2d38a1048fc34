"""Date expressions in questions -> session-time windows (memroute.retrieval.temporal)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from memroute.errors import InvalidRequest
from memroute.retrieval.temporal import (
    OPEN_START,
    TimeWindow,
    fill_from,
    question_times,
    split_question,
    time_window,
)
from memroute.types import Memory, RetrievalHit

# Tuesday 30 May 2023, 14:00 UTC
ASKED = datetime(2023, 5, 30, 14, 0, tzinfo=UTC).timestamp()


def day(y: int, m: int, d: int) -> int:
    return int(datetime(y, m, d, tzinfo=UTC).timestamp())


def end_of(y: int, m: int, d: int) -> int:
    return day(y, m, d) + 86399


@pytest.mark.parametrize(
    ("question", "start", "end"),
    [
        ("What did I buy in May 2023?", day(2023, 5, 1), end_of(2023, 5, 31)),
        ("What did I do in 2023-05?", day(2023, 5, 1), end_of(2023, 5, 31)),
        ("Where did I travel in 2022?", day(2022, 1, 1), end_of(2022, 12, 31)),
        # a day, with a day of slack either side
        ("What happened on 8 May 2023?", day(2023, 5, 7), end_of(2023, 5, 9)),
        ("What did I say on May 8?", day(2023, 5, 7), end_of(2023, 5, 9)),
        ("What did I eat on 2023/05/08?", day(2023, 5, 7), end_of(2023, 5, 9)),
        ("What did I do on Jan. 5, 2023?", day(2023, 1, 4), end_of(2023, 1, 6)),
        # relative to the question time
        ("What did I do last month?", day(2023, 4, 1), end_of(2023, 4, 30)),
        ("What did I cook two weeks ago?", day(2023, 5, 9), end_of(2023, 5, 23)),
        ("What did I eat yesterday?", day(2023, 5, 28), end_of(2023, 5, 30)),
        ("Where did I go last year?", day(2022, 1, 1), end_of(2022, 12, 31)),
        ("What did I buy 3 days ago?", day(2023, 5, 26), end_of(2023, 5, 28)),
        ("What did I do a month ago?", day(2023, 4, 15), end_of(2023, 5, 15)),
        # the granularity comes from the words: dateparser calls "now 1 week ago" a time
        ("What car do I drive now 1 week ago?", day(2023, 5, 16), end_of(2023, 5, 30)),
        # dateparser alone finds nothing here, or "in 3 weeks" (its chunks glue words on)
        ("How much do I pay per month now in April 2023?", day(2023, 4, 1), end_of(2023, 4, 30)),
        ("Which city do I live in now 3 weeks ago?", day(2023, 5, 2), end_of(2023, 5, 16)),
        # a month name alone: the latest one not after the question (June 2023 is to come)
        ("What was I reading in June?", day(2022, 6, 1), end_of(2022, 6, 30)),
        # open-ended
        ("What have I read since March?", day(2023, 3, 1), end_of(2023, 5, 30)),
        ("What did I read before May 2023?", OPEN_START, day(2023, 5, 1) - 1),
        # several expressions: their union
        ("Did I move between March and May 2023?", day(2023, 3, 1), end_of(2023, 5, 31)),
    ],
)
def test_date_expressions_give_their_window(question, start, end):
    assert time_window(question, ASKED) == TimeWindow(start, end)


@pytest.mark.parametrize(
    "question",
    [
        "May I ask what my budget is?",
        "What is my second favourite colour?",
        "How many cats do I have?",
        "When did I start painting?",
        "What is my budget now?",
        "What is my job today?",  # present words describe the state asked about
        "What did June tell me about the trip?",  # a person, not the month
        "I ran 2000 meters, was that far?",  # a number, not the year
        "How many days have passed since the day I adopted the kitten?",
        "What will I do next month?",  # wholly after the question: no memory is from then
    ],
)
def test_words_that_only_look_like_dates_give_none(question):
    assert time_window(question, ASKED) is None


def test_current_date_prefix_is_the_question_time_never_the_window():
    prefixed = "[Current date: 2023/05/30 (Tue) 14:00] What did I buy last month?"
    # the caller's time (2020) loses to the prefix's date
    assert time_window(prefixed, day(2020, 1, 1)) == TimeWindow(day(2023, 4, 1), end_of(2023, 4, 30))
    assert time_window("[Current date: 2023/05/30 (Tue) 14:00] How many cats do I have?", ASKED) is None
    text, qt = split_question(prefixed, 0)
    assert text == "What did I buy last month?" and qt == ASKED


def test_a_broken_prefix_date_keeps_the_callers_time():
    text, qt = split_question("[Current date: 2023/02/30 (Thu) 10:00] Hi", ASKED)
    assert text == "Hi" and qt == ASKED


def test_relative_dates_follow_the_question_time():
    later = datetime(2024, 1, 10, tzinfo=UTC).timestamp()
    assert time_window("What did I do last month?", later) == TimeWindow(day(2023, 12, 1), end_of(2023, 12, 31))


@pytest.mark.parametrize("bad", [None, 3, b"in May 2023", ["in May 2023"]])
def test_query_must_be_a_string(bad):
    with pytest.raises(InvalidRequest) as e:
        time_window(bad, ASKED)
    assert e.value.field == "query"


@pytest.mark.parametrize("bad", [None, "2023-05-30", True, float("nan"), float("inf"), 1e15])
def test_question_time_must_be_finite_epoch_seconds(bad):
    with pytest.raises(InvalidRequest) as e:
        time_window("What did I do last month?", bad)
    assert e.value.field == "question_time"


def test_question_times_default_to_now_and_must_align():
    assert question_times(None, 2, 123.0) == [123.0, 123.0]
    assert question_times([1, 2.5], 2, 0.0) == [1.0, 2.5]
    for bad in ([1.0], "12", 5):
        with pytest.raises(InvalidRequest) as e:
            question_times(bad, 2, 0.0)  # type: ignore[arg-type]
        assert e.value.field == "question_times"


def test_parsing_is_fast_once_warm():
    time_window("What did I buy in May 2023?", ASKED)  # loads dateparser's data
    questions = ["What did I buy in May 2023?", "What did I do last month?", "How many cats do I have?"]
    t0 = time.perf_counter()
    for _ in range(20):
        for q in questions:
            time_window(q, ASKED)
    per_call_ms = (time.perf_counter() - t0) * 1000 / 60
    assert per_call_ms < 20  # ~1 ms measured on 2 shared cores; generous for a loaded machine


def _hit(i: int, score: float) -> RetrievalHit:
    return RetrievalHit(Memory(i, "u", f"m{i}", 0), score)


def test_fill_from_puts_the_window_first_and_keeps_scores_descending():
    filtered = [_hit(1, 0.5)]
    unfiltered = [_hit(2, 0.9), _hit(1, 0.5), _hit(3, 0.2)]
    out = fill_from(filtered, unfiltered, 3)
    assert [h.memory.id for h in out] == [1, 2, 3]
    assert [h.score for h in out] == [0.5, 0.5, 0.2]
    assert fill_from(filtered, unfiltered, 1) == filtered
