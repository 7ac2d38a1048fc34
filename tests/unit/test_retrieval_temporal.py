"""The retriever's temporal filter (retrieval.temporal): both legs within a question's date
window, topped up from the unfiltered ranking when the window holds fewer than top_k."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pytest

from memroute.config.schema import RetrievalConfig
from memroute.errors import ConfigError, InvalidRequest
from memroute.memory import filters
from memroute.retrieval.bm25_cache import BM25Cache
from memroute.retrieval.retriever import SUPERSEDED_MARGIN, WINDOW_POOL, HybridRetriever
from memroute.retrieval.temporal import TimeWindow, time_window
from memroute.types import Memory, TurnPair

from .fakes import HashEncoder


def ts(y: int, m: int, d: int) -> int:
    return int(datetime(y, m, d, 12, tzinfo=UTC).timestamp())


ASKED = ts(2023, 6, 20)  # "last month" is May 2023
MAY, JUNE, MARCH = ts(2023, 5, 8), ts(2023, 6, 10), ts(2023, 3, 3)


class WindowStore:
    """An in-memory store whose search filters by session time, as the Milvus store does."""

    dim = 256

    def __init__(self) -> None:
        self.rows: dict[int, tuple[Memory, np.ndarray]] = {}
        self.windows: list[tuple[int, int] | None] = []

    def upsert(self, pairs, vectors):
        for p, v in zip(pairs, vectors):
            self.rows[p.id] = (Memory(p.id, p.user_id, p.text(), p.session_time), v)
        return len(pairs)

    def search(self, user_id, vector, limit, *, time_window=None):
        self.windows.append(time_window)
        lo, hi = time_window if time_window is not None else (-(2**63), 2**63)
        hits = [
            (m, float(v @ vector)) for m, v in self.rows.values()
            if m.user_id == user_id and lo <= m.session_time <= hi
        ]
        return sorted(hits, key=lambda h: -h[1])[:limit]

    def list_user(self, user_id):
        return [m for m, _ in self.rows.values() if m.user_id == user_id]


class PlainStore(WindowStore):
    """A store whose search takes no time window: the retriever filters what it returns."""

    def __init__(self) -> None:
        super().__init__()
        self.limits: list[int] = []

    def search(self, user_id, vector, limit):  # type: ignore[override]
        self.limits.append(limit)
        return super().search(user_id, vector, limit)


# The June memory matches the question's words better: without the filter it ranks first.
PAIRS = [
    TurnPair("alice", "june", 0, "What did I buy? In May I meant to buy a bike, I will buy one", "Buy the red bike", JUNE),
    TurnPair("alice", "may", 0, "I did buy a bike today", "Enjoy it", MAY),
    TurnPair("alice", "march", 0, "The weather is nice", "Indeed", MARCH),
    TurnPair("bob", "may", 0, "I bought a bike, a blue one", "Nice", MAY),
]


def make(store=None, **cfg) -> HybridRetriever:
    store = store if store is not None else WindowStore()
    r = HybridRetriever(HashEncoder(), store, RetrievalConfig(**{"top_k": 1, "candidate_k": 10, **cfg}))
    r.remember(PAIRS)
    return r


def first(r: HybridRetriever, query: str, **kw) -> str:
    hits = r.retrieve("alice", query, question_time=ASKED, **kw)
    return hits[0].memory.text


@pytest.mark.parametrize("strategy", ["hybrid", "dense", "bm25"])
@pytest.mark.parametrize("query", ["What did I buy last month?", "What did I buy in May 2023?"])
def test_the_window_brings_the_may_memory_over_a_better_matching_june_one(strategy, query):
    assert "Buy the red bike" in first(make(temporal="off"), query, strategy=strategy)
    assert "I did buy a bike today" in first(make(), query, strategy=strategy)


def test_the_store_gets_the_window_and_other_users_stay_out():
    store = WindowStore()
    r = make(store)
    hits = r.retrieve("alice", "What did I buy in May 2023?", question_time=ASKED, top_k=1)
    assert store.windows[-1] == time_window("What did I buy in May 2023?", ASKED)
    assert all(h.memory.user_id == "alice" for h in hits)


def test_a_store_without_windows_is_asked_for_more_and_filtered_here():
    store = PlainStore()
    r = make(store)
    assert "I did buy a bike today" in first(r, "What did I buy last month?", strategy="dense")
    # (top_k 1 + the margin for superseded rows) x WINDOW_POOL
    assert store.limits[-1] == (1 + SUPERSEDED_MARGIN) * WINDOW_POOL


def test_an_empty_window_falls_back_to_the_unfiltered_ranking():
    query = "What did I buy in January 2023?"  # alice has no memory from January
    on, off = make(top_k=3), make(top_k=3, temporal="off")
    got = on.retrieve("alice", query, question_time=ASKED)
    assert [h.memory.id for h in got] == [h.memory.id for h in off.retrieve("alice", query, question_time=ASKED)]
    assert len(got) == 3


def test_a_window_with_fewer_than_top_k_memories_goes_first_then_the_rest():
    r = make(top_k=3)
    got = r.retrieve("alice", "What did I buy in March 2023?", question_time=ASKED)
    assert got[0].memory.session_time == MARCH  # the only memory in the window, though unrelated
    assert {h.memory.session_time for h in got[1:]} == {MAY, JUNE}
    scores = [h.score for h in got]
    assert scores == sorted(scores, reverse=True)


def test_question_times_are_per_query_and_default_to_now():
    r = make()
    q = "What did I buy last month?"
    assert r.time_windows([q, q], [ASKED, ts(2023, 4, 20)]) == [
        TimeWindow(ts(2023, 5, 1) - 12 * 3600, ts(2023, 5, 31) + 12 * 3600 - 1),
        TimeWindow(ts(2023, 3, 1) - 12 * 3600, ts(2023, 3, 31) + 12 * 3600 - 1),
    ]
    assert r.time_windows([q]) == [time_window(q, time.time())]
    many = r.retrieve_many(["alice", "alice"], [q, q], question_times=[ASKED, ts(2023, 4, 20)])
    assert "I did buy a bike today" in many[0][0].memory.text  # May
    assert "weather" in many[1][0].memory.text  # March
    with pytest.raises(InvalidRequest) as e:
        r.retrieve_many(["alice"], [q], question_times=[ASKED, ASKED])
    assert e.value.field == "question_times"
    with pytest.raises(InvalidRequest) as e:
        r.retrieve("alice", q, question_time="yesterday")  # type: ignore[arg-type]
    assert e.value.field == "question_time"


def test_temporal_must_be_auto_or_off():
    with pytest.raises(ConfigError) as e:
        HybridRetriever(HashEncoder(), WindowStore(), replace(RetrievalConfig(), temporal="sometimes"))
    assert e.value.field == "retrieval.temporal"


def test_bm25_index_search_keeps_only_the_window():
    cache = BM25Cache(lambda uid: [
        Memory(1, uid, "I bought a bike", MAY), Memory(2, uid, "I bought a bike again", JUNE),
    ])
    index = cache.get("alice")
    assert [m.id for m, _ in index.search("bought bike", 5)] == [1, 2]
    assert [m.id for m, _ in index.search("bought bike", 5, time_window=(JUNE - 10, JUNE + 10))] == [2]
    assert index.search("bought bike", 5, time_window=(0, 1)) == []


def test_the_time_filter_renders_with_the_user_clause_and_checks_its_bounds():
    expr, params = filters.user_time_filter("alice", TimeWindow(10, 20))
    assert filters.render(expr, params) == '(user_id == "alice") and (session_time >= 10 and session_time <= 20)'
    assert filters.user_time_filter("alice", None) == filters.user_filter("alice")
    for bad in [(20, 10), ("1", "2"), (1.5, 2), (True, 2), (1,), "1,2", (0, 2**63)]:
        with pytest.raises(InvalidRequest) as e:
            filters.user_time_filter("alice", bad)  # type: ignore[arg-type]
        assert e.value.field == "time_window"
    with pytest.raises(InvalidRequest) as e:
        filters.all_of(filters.user_filter("a"), filters.user_filter("b"))
    assert e.value.field == "user_id"
