"""Memory search (memroute.memory.search) on a real SQLite fact store, the project's BM25 and
fake vector sources: one ranking over facts, units and turns with one score scale, a confidence
from the best score, the keyword fallback only below search.fallback_below and always below
every real match, the fact vectors cached and erased, bad input refused naming the field."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from memroute.config.search import SearchConfig, check_search_config
from memroute.errors import ConfigError, InvalidRequest
from memroute.memory.facts import FactInput, FactStore
from memroute.memory.search import HIGH, LOW, MEDIUM, MemorySearch, confidence_of, fact_text
from memroute.retrieval.bm25 import BM25Index
from memroute.types import Memory, RetrievalHit

ALICE, BOB = "acme:alice", "acme:bob"
T0 = 1_683_504_000  # 8 May 2023


def axis(i: int) -> np.ndarray:
    v = np.zeros(8, np.float32)
    v[i] = 1.0
    return v


def at(cos: float, i: int = 0, j: int = 7) -> np.ndarray:
    """A unit vector at cosine ``cos`` to axis ``i`` (leaning into axis ``j``)."""
    v = cos * axis(i) + np.sqrt(1 - cos * cos) * axis(j)
    return v.astype(np.float32)


class FakeEncoder:
    name, dim = "fake", 8

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self.vectors, self.encoded = vectors, []

    def encode(self, texts):
        self.encoded.extend(texts)
        return np.stack([self.vectors.get(t, axis(6)) for t in texts])


def memory(i: int, text: str, user: str = ALICE, day: int = 0) -> Memory:
    return Memory(i, user, text, T0 + day * 86400, session_id="s1", turn_index=i)


class Source:
    """Turn retriever / unit index stand-in: fixed hits with their cosine."""

    def __init__(self, hits: list[tuple[Memory, float | None]]) -> None:
        self.hits = hits

    def _for(self, uid):
        return [RetrievalHit(m, 1.0, dense_score=c) for m, c in self.hits if m.user_id == uid]

    def retrieve_many(self, user_ids, queries, *, top_k=None):
        return [self._for(u)[:top_k] for u in user_ids]

    def search(self, user_id, query, top_k, *, vector=None):
        return self._for(user_id)[:top_k]


@pytest.fixture
def facts(tmp_path):
    s = FactStore(f"sqlite:///{tmp_path / 'facts.sqlite3'}")
    yield s
    s.close()


def searcher(facts, *, turns=(), units=(), raw=(), vectors=None, **cfg) -> MemorySearch:
    return MemorySearch(
        facts, Source(list(turns)), SearchConfig(**cfg),
        lexical_index=partial(BM25Index, ngram=1, stem=True),
        encoder=FakeEncoder(vectors or {}), units=Source(list(units)),
        raw_turns=lambda uid: [m for m in raw if m.user_id == uid])


def test_one_ranking_over_facts_units_and_turns_on_one_scale(facts):
    facts.assert_fact(ALICE, FactInput("user.pet", "a dog named Biscuit", valid_from=T0))
    unit = memory(101, "On 8 May 2023 Alice adopted a golden retriever named Biscuit.")
    turn = memory(7, "[8 May 2023] Q: I went for a walk / A: Nice.", day=1)
    q = "what is my dog called"
    vectors = {q: axis(0), "user pet: a dog named Biscuit": at(0.7)}
    s = searcher(facts, units=[(unit, 0.6)], turns=[(turn, 0.2)], vectors=vectors)
    r = s.search(ALICE, q, top_k=5)
    kinds = [h.kind for h in r.hits]
    assert kinds == ["fact", "unit", "turn"]
    fact, u, t = r.hits
    # 0.6 x cosine + 0.4 x share of the query's words ("dog", "call"): the fact holds "dog"
    assert fact.score == pytest.approx(0.6 * 0.7 + 0.4 * 0.5, abs=1e-5)
    assert u.score == pytest.approx(0.6 * 0.6, abs=1e-5)
    assert t.score == pytest.approx(0.12, abs=1e-5)
    assert fact.extra == {"key": "user.pet", "value": "a dog named Biscuit", "source": "explicit"}
    assert u.extra["turn_id"] and not r.fallback and r.confidence == HIGH
    out = r.to_json()
    assert out["object"] == "memory.search" and out["confidence"] == "high"
    assert out["results"][0]["date"] == "2023-05-08" and out["results"][0]["id"] == str(fact.id)
    assert [x["kind"] for x in s.search(ALICE, q, top_k=2).to_json()["results"]] == ["fact", "unit"]


def test_only_the_users_active_facts_take_part(facts):
    facts.assert_fact(ALICE, FactInput("user.location", "Paris", valid_from=T0))
    facts.assert_fact(ALICE, FactInput("user.location", "Lyon", valid_from=T0 + 10))
    facts.assert_fact(BOB, FactInput("user.location", "Rome", valid_from=T0))
    r = searcher(facts).search(ALICE, "location", top_k=5)
    assert [h.text for h in r.hits] == ["user.location: Lyon"]


def test_a_paraphrase_finds_a_fact_by_its_vector_and_vectors_are_cached(facts):
    f = facts.assert_fact(ALICE, FactInput("user.location", "Lyon", valid_from=T0))
    q = "where do I live"
    s = searcher(facts, vectors={q: axis(0), fact_text(f): at(0.8)})
    [hit] = s.search(ALICE, q).hits  # no word in common: the dense leg alone
    assert hit.kind == "fact" and hit.score == pytest.approx(0.48, abs=1e-5)
    s.search(ALICE, q)
    assert s.encoder.encoded.count(fact_text(f)) == 1  # a fact row never changes: cached
    g = facts.assert_fact(ALICE, FactInput("user.job", "baker", valid_from=T0))
    s.search(ALICE, q)
    assert s.encoder.encoded.count(fact_text(g)) == 1 and s.encoder.encoded.count(fact_text(f)) == 1
    assert s.forget_user(ALICE) == 2 and s.forget_user(ALICE) == 0  # erasure drops them
    s.search(ALICE, q)
    assert s.encoder.encoded.count(fact_text(f)) == 2


@pytest.mark.parametrize("best, level", [(0.55, HIGH), (0.9, HIGH), (0.54, MEDIUM), (0.3, MEDIUM),
                                         (0.29, LOW), (0.0, LOW)])
def test_confidence_levels_from_the_best_score(best, level):
    assert confidence_of(best, SearchConfig()) == level


def test_confidence_of_an_answer_follows_its_best_hit(facts):
    q = "biscuit"
    strong = memory(1, "Biscuit is the dog")  # every query word, cosine 0.5: 0.3 + 0.4
    weak = memory(2, "something else")
    assert searcher(facts, turns=[(strong, 0.5)]).search(ALICE, q).confidence == HIGH
    assert searcher(facts, turns=[(weak, 0.6)]).search(ALICE, q).confidence == MEDIUM  # 0.36
    r = searcher(facts, turns=[(weak, 0.2)]).search(ALICE, q)
    assert r.confidence == LOW and r.best_score == pytest.approx(0.12, abs=1e-5)
    assert searcher(facts).search(ALICE, q).confidence == LOW  # nothing at all


def test_no_fallback_when_the_best_score_reaches_the_threshold(facts):
    strong = memory(1, "my locker code is ZX-4471")
    raw = [strong, memory(2, "the code to the gate")]
    r = searcher(facts, turns=[(strong, 0.5)], raw=raw).search(ALICE, "code")
    assert not r.fallback and [h.id for h in r.hits] == [1]
    assert not any(h.fallback for h in r.hits)


def test_below_the_threshold_the_fallback_scores_below_every_real_match(facts):
    weak = [(memory(1, "we talked about the weather"), 0.3), (memory(2, "and lunch"), 0.2)]
    raw = [memory(1, "we talked about the weather"),  # already a real match: not repeated
           memory(3, "the gate code is 4471-B", day=2), memory(4, "gatehouse rules", day=3),
           memory(5, "nothing relevant"), memory(6, "a gate", user=BOB)]
    r = searcher(facts, turns=weak, raw=raw).search(ALICE, "gate code", top_k=5)
    assert r.fallback and r.confidence == LOW
    real = [h for h in r.hits if not h.fallback]
    extra = [h for h in r.hits if h.fallback]
    assert [h.id for h in real] == [1, 2]
    assert [h.id for h in extra] == [3, 4]  # both words, then one ("gate" inside "gatehouse")
    floor = min(h.score for h in real)
    assert all(0 < h.score < floor for h in extra)
    assert extra[0].score == pytest.approx(floor * 0.99)
    assert extra[1].score == pytest.approx(floor * 0.495)
    assert r.to_json()["fallback"] is True and r.to_json()["results"][-1]["fallback"] is True


def test_with_no_real_match_the_fallback_stays_below_the_threshold(facts):
    raw = [memory(3, "the gate code is 4471-B")]
    r = searcher(facts, raw=raw, fallback_below=0.2).search(ALICE, "GATE code")
    [hit] = r.hits
    assert hit.fallback and hit.score == pytest.approx(0.2 * 0.99)
    assert searcher(facts, raw=raw, fallback_below=0.0).search(ALICE, "gate code").hits == []


def test_the_fallback_takes_at_most_top_k(facts):
    raw = [memory(i, f"gate note {i}", day=i) for i in range(10)]
    r = searcher(facts, raw=raw).search(ALICE, "gate", top_k=3)
    assert [h.id for h in r.hits] == [9, 8, 7]  # newest first among equal matches


@pytest.mark.parametrize("query, top_k, field", [
    ("", 5, "query"), ("   ", 5, "query"), (None, 5, "query"), (7, 5, "query"),
    ("x" * 2001, 5, "query"), ("a\x00b", 5, "query"),
    ("q", 0, "top_k"), ("q", 21, "top_k"), ("q", True, "top_k"), ("q", "5", "top_k"),
    ("q", 2.0, "top_k"),
])
def test_bad_input_names_the_field(facts, query, top_k, field):
    with pytest.raises(InvalidRequest) as e:
        searcher(facts).search(ALICE, query, top_k)
    assert e.value.field == field


def test_a_bad_user_id_is_refused(facts):
    with pytest.raises(InvalidRequest):
        searcher(facts).search("no spaces allowed", "q")


@pytest.mark.parametrize("cfg, field", [
    (SearchConfig(high=0.2, medium=0.3), "search.medium"),
    (SearchConfig(dense_weight=1.5), "search.dense_weight"),
    (SearchConfig(fallback_below=-0.1), "search.fallback_below"),
    (SearchConfig(high=0.0), "search.high"),
    (SearchConfig(candidate_k=5), "search.candidate_k"),
    (SearchConfig(max_query_chars=0), "search.max_query_chars"),
])
def test_bad_search_config_names_the_field(cfg, field):
    with pytest.raises(ConfigError) as e:
        check_search_config(cfg)
    assert e.value.field == field
