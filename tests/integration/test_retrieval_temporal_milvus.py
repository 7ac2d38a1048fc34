"""The temporal filter's Milvus path: session-time windows in the store's dense and BM25 searches
(real Milvus Lite file in tmp + real MiniLM), and through the retriever on both BM25 backends."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memroute.config.schema import MemoryConfig, RetrievalConfig
from memroute.errors import InvalidRequest
from memroute.memory import MilvusMemoryStore
from memroute.retrieval.retriever import HybridRetriever
from memroute.retrieval.temporal import time_window
from memroute.types import TurnPair

from .test_memory_retrieval import ALICE, BOB, filler


def ts(y: int, m: int, d: int) -> int:
    return int(datetime(y, m, d, 12, tzinfo=UTC).timestamp())


ASKED = ts(2023, 6, 20)
MAY_WINDOW = time_window("What did I buy in May 2023?", ASKED)
BIKE = ("I bought a new road bike this weekend.", "Enjoy the rides on your new bike!")


def bike(user: str, session: str, when: int) -> TurnPair:
    return TurnPair(user, session, 0, BIKE[0], BIKE[1], when)


# filler() dates its pairs from 8 May 2023, one day per 10 pairs: 30 pairs lie in 8-10 May.
ALICE_PAIRS = [
    *filler(ALICE, 30),
    bike(ALICE, "bike-may", ts(2023, 5, 20)),
    *(bike(ALICE, f"bike-june-{d}", ts(2023, 6, d)) for d in (2, 9, 16)),
]
BOB_PAIRS = [*filler(BOB, 10), bike(BOB, "bike-may", ts(2023, 5, 21))]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    db = tmp_path_factory.mktemp("milvus_temporal") / "memories.db"
    s = MilvusMemoryStore(MemoryConfig(uri=str(db), bm25_function=True), 384)
    yield s
    s.close()


@pytest.fixture(scope="module")
def stored(encoder, store):
    r = HybridRetriever(encoder, store, RetrievalConfig(top_k=3, candidate_k=100))
    assert r.remember(ALICE_PAIRS + BOB_PAIRS) == len(ALICE_PAIRS) + len(BOB_PAIRS)
    store.flush()
    return r


def test_dense_search_keeps_the_window_and_the_user(stored, encoder, store):
    vec = encoder.encode([BIKE[0]])[0]
    everything = store.search(ALICE, vec, 100)
    assert len(everything) == len(ALICE_PAIRS)
    june = (ts(2023, 6, 1), ts(2023, 6, 30))
    hits = store.search(ALICE, vec, 100, time_window=june)
    assert sorted(m.session_id for m, _ in hits) == ["bike-june-16", "bike-june-2", "bike-june-9"]
    may = store.search(ALICE, vec, 100, time_window=MAY_WINDOW)
    assert len(may) == 31 and all(m.user_id == ALICE for m, _ in may)
    assert may[0][0].session_id == "bike-may"
    # inclusive bounds
    exact = store.search(ALICE, vec, 10, time_window=(ts(2023, 5, 20), ts(2023, 5, 20)))
    assert [m.session_id for m, _ in exact] == ["bike-may"]


def test_bm25_search_keeps_the_window_and_the_user(stored, store):
    hits = store.search_bm25(ALICE, "road bike", 10, time_window=MAY_WINDOW)
    assert [m.session_id for m, _ in hits] == ["bike-may"]
    assert store.search_bm25(BOB, "road bike", 10, time_window=(ts(2023, 6, 1), ts(2023, 6, 30))) == []


@pytest.mark.parametrize("bad", [(5, 1), ("0", "9"), (0,), 'x" or user_id != "', (0.5, 9)])
def test_bad_windows_are_refused_before_any_query(stored, encoder, store, bad):
    vec = encoder.encode(["bike"])[0]
    with pytest.raises(InvalidRequest) as e:
        store.search(ALICE, vec, 5, time_window=bad)
    assert e.value.field == "time_window"
    with pytest.raises(InvalidRequest):
        store.search_bm25(ALICE, "bike", 5, time_window=bad)


@pytest.mark.parametrize("backend", ["inprocess", "milvus"])
def test_the_retriever_answers_from_the_window_and_tops_up(stored, encoder, store, backend):
    cfg = RetrievalConfig(top_k=3, candidate_k=100, bm25_backend=backend)
    r = HybridRetriever(encoder, store, cfg)
    last_month = r.retrieve(ALICE, "Which bike did I buy last month?", question_time=ASKED)
    assert last_month[0].memory.session_id == "bike-may"
    assert all(h.memory.session_time in MAY_WINDOW for h in last_month)  # 31 memories lie in May
    # early June holds one bike memory: it comes first, the other bikes top up the list
    week = r.retrieve(ALICE, "Which bike did I buy on 2 June 2023?", question_time=ASKED)
    assert week[0].memory.session_id == "bike-june-2"
    assert len(week) == 3 and {h.memory.session_id for h in week[1:]} <= {
        "bike-may", "bike-june-9", "bike-june-16"}
    assert all(h.memory.user_id == ALICE for h in last_month + week)
