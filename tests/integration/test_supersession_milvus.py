"""Supersession on the write path, on Milvus Lite and on the Milvus server, with real MiniLM:
a planted update marks its older pairs (never deleted), they are never retrieved again, a second
still-true fact on the same kind of subject stays, pending pairs follow the same rule, and
erasure removes superseded rows too."""

from __future__ import annotations

import pytest

from memroute.config.schema import MemoryConfig, RetrievalConfig
from memroute.journal import Journal, JournaledRetriever
from memroute.memory import MilvusMemoryStore
from memroute.retrieval.retriever import HybridRetriever
from memroute.types import TurnPair
from tests.integration.milvus_server import collection_name, milvus_server  # noqa: F401

T0 = 1_780_000_000
U = "alice"
FILLER = ["I spent the afternoon baking bread.", "We went hiking by the lake on Sunday.",
          "I am learning Spanish verbs this month.", "The kitchen needs a new coat of paint.",
          "I fixed my bicycle brakes yesterday.", "My cousin visits next weekend."]


def pair(i: int, user: str, answer: str = "Noted.") -> TurnPair:
    return TurnPair(U, f"s{i}", 0, user, answer, T0 + 3600 * i)


HISTORY = [
    *(pair(i, text, "Sounds good.") for i, text in enumerate(FILLER)),
    pair(10, "My locker code is ZX-4471."),
    pair(11, "What is my locker code?", "Your locker code is ZX-4471."),
    pair(12, "Our rabbit is called Wombat."),
]
UPDATE = pair(20, "I changed my locker code, it's QT-8812 now.")
PARROT = pair(21, "We adopted a parrot now, and named it Dumpling.")


@pytest.fixture(params=["lite", "server"])
def store(request, tmp_path, encoder):
    if request.param == "lite":
        uri = str(tmp_path / "memories.db")
    else:
        uri = request.getfixturevalue("milvus_server").uri
    s = MilvusMemoryStore(MemoryConfig(uri=uri, collection=collection_name("sup")), encoder.dim)
    yield s
    s.close()


def texts(hits) -> list[str]:
    return [h.memory.text for h in hits]


def test_an_update_supersedes_its_older_pairs_and_they_are_never_retrieved(store, encoder):
    r = HybridRetriever(encoder, store, RetrievalConfig(top_k=5, candidate_k=50))
    r.remember(HISTORY)
    assert any("ZX-4471" in t for t in texts(r.retrieve(U, "What is my locker code?")))
    r.remember([UPDATE, PARROT])
    rows = {m.id: m for m in store.list_user(U)}
    assert len(rows) == len(HISTORY) + 2  # nothing deleted
    assert rows[HISTORY[-3].id].superseded_by == UPDATE.id
    assert rows[HISTORY[-2].id].superseded_by == UPDATE.id
    assert rows[HISTORY[-3].id].valid_until == UPDATE.session_time
    assert rows[HISTORY[-1].id].superseded_by == 0  # the rabbit is still the rabbit
    assert rows[PARROT.id].superseded_by == 0 and rows[UPDATE.id].superseded_by == 0
    for query, strategy in [("What is my locker code?", "hybrid"), ("locker code ZX-4471", "bm25"),
                            ("Which code opens my locker?", "dense")]:
        got = texts(r.retrieve(U, query, strategy=strategy, top_k=8))
        assert not any("ZX-4471" in t for t in got), (strategy, got)
        assert any("QT-8812" in t for t in got), (strategy, got)
    pets = texts(r.retrieve(U, "What are my pets called?", top_k=8))
    assert any("Wombat" in t for t in pets) and any("Dumpling" in t for t in pets)
    # A fresh retriever (a restarted process) reads the marks from the store.
    fresh = HybridRetriever(encoder, store, RetrievalConfig(top_k=8, candidate_k=50))
    assert not any("ZX-4471" in t for t in texts(fresh.retrieve(U, "my locker code")))
    # rank_below keeps them, after every current memory.
    below = HybridRetriever(encoder, store, RetrievalConfig(top_k=20, candidate_k=50,
                                                            superseded="rank_below"))
    hits = below.retrieve(U, "my locker code")
    flags = [bool(h.memory.superseded_by) for h in hits]
    assert flags.count(True) == 2 and flags == sorted(flags)
    # Erasure removes superseded rows too.
    assert store.delete_user(U) == len(HISTORY) + 2
    store.flush()
    assert store.list_user(U) == []


def test_pending_pairs_follow_the_same_rule(store, encoder, tmp_path):
    r = HybridRetriever(encoder, store, RetrievalConfig(top_k=5, candidate_k=50))
    r.remember(HISTORY)
    journal = Journal(tmp_path / "journal.sqlite3")
    served = JournaledRetriever(r, journal)
    earlier = pair(15, "Our rabbit got a new hutch, by the way, it's at 9:00 am feeding now.")
    served.remember([earlier, UPDATE])  # journaled, not flushed
    got = texts(served.retrieve(U, "What is my locker code?", top_k=8))
    assert any("QT-8812" in t for t in got)
    assert not any("ZX-4471" in t for t in got)  # the stored pairs it supersedes are hidden
    second = pair(22, "New locker code: LM-5555. The old one no longer works.")
    served.remember([second])
    got = texts(served.retrieve(U, "What is my locker code?", top_k=8))
    assert any("LM-5555" in t for t in got)
    assert not any("QT-8812" in t or "ZX-4471" in t for t in got)  # pending over pending too
    journal.close()


def test_an_answer_given_after_the_update_with_the_old_value_is_never_retrieved(store, encoder):
    r = HybridRetriever(encoder, store, RetrievalConfig(top_k=8, candidate_k=50))
    r.remember(HISTORY)
    r.retrieve(U, "What is my locker code?")  # the user is served, so cached
    r.remember([UPDATE])
    r.retrieve(U, "What is my locker code?")
    parrot = pair(30, "What is my locker code?", "Your locker code is ZX-4471.")  # a stale reply
    r.remember([parrot])
    assert {m.id: m for m in store.list_user(U)}[parrot.id].superseded_by == UPDATE.id
    assert not any("ZX-4471" in t for t in texts(r.retrieve(U, "my locker code")))


CAR = pair(13, "I drive a Kia Niro and it's getting old. When is it worth replacing?",
           "When repairs cost more than the car is worth.")
SISTER = pair(14, "My sister lives in Lyon.")
TRADED = pair(23, "I traded in my old car for a Mazda 3 today. What maintenance should I plan?")
BROTHER = pair(24, "My brother just moved to Tallinn.")


def test_an_update_worded_apart_supersedes_by_meaning_and_a_sibling_fact_stays(store, encoder):
    r = HybridRetriever(encoder, store, RetrievalConfig(top_k=5, candidate_k=50))
    r.remember([*HISTORY, CAR, SISTER])
    r.retrieve(U, "What car do I drive?")  # a served user: cached, as on the serving path
    r.remember([TRADED, BROTHER])
    rows = {m.id: m for m in store.list_user(U)}
    assert rows[CAR.id].superseded_by == TRADED.id  # no word of "car" in it: by meaning
    assert rows[SISTER.id].superseded_by == 0  # the brother's move is not the sister's
    got = texts(r.retrieve(U, "Which car do I drive?", top_k=8))
    assert any("Mazda 3" in t for t in got) and not any("Kia Niro" in t for t in got)
    assert len(r.similar) > 0
    r.forget_user(U)  # erasure forgets the statements' vectors too
    assert len(r.similar) == 0
    # switched off, the words alone find nothing to replace
    words_only = HybridRetriever(encoder, store, RetrievalConfig(supersede_by_meaning=False))
    assert words_only.similar is None


def test_a_pending_update_worded_apart_hides_what_it_replaces(store, encoder, tmp_path):
    r = HybridRetriever(encoder, store, RetrievalConfig(top_k=5, candidate_k=50))
    r.remember([*HISTORY, CAR, SISTER])
    journal = Journal(tmp_path / "journal.sqlite3")
    served = JournaledRetriever(r, journal)
    served.remember([TRADED])  # journaled, not flushed
    got = texts(served.retrieve(U, "Which car do I drive?", top_k=8))
    assert any("Mazda 3" in t for t in got) and not any("Kia Niro" in t for t in got)
    assert any("Lyon" in t for t in texts(served.retrieve(U, "Where does my sister live?")))
    journal.close()
