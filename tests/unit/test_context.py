"""Query focus and session context (memroute.retrieval.context)."""

import pytest

from memroute.retrieval.bm25 import BM25Index
from memroute.retrieval.context import MIN_DOCS_FOR_FOCUS, add_session_context, focus_query
from memroute.retrieval.fusion import FusedHit
from memroute.types import Memory


def _chat(n: int) -> BM25Index:
    # Both speakers' names are in every pair; "sunrise" in one.
    docs = [(i, f"Caroline: turn {i} about topic{i} / Melanie: reply {i}") for i in range(n)]
    docs.append((n, "Caroline: did you paint? / Melanie: I painted a sunrise"))
    return BM25Index(docs, ngram=1, stem=True)


def test_focus_drops_words_every_memory_has():
    index = _chat(MIN_DOCS_FOR_FOCUS + 5)
    focused = focus_query("When did Melanie paint a sunrise?", index.df_ratio, 0.5, len(index))
    assert focused == "When did paint a sunrise?"
    # "Melanie's" stems and drops possessives: the same word for the index
    assert "Melanie" not in focus_query("Melanie's sunrise", index.df_ratio, 0.5, len(index))


def test_focus_leaves_query_alone_when_off_small_or_empty():
    big = _chat(MIN_DOCS_FOR_FOCUS + 5)
    q = "When did Melanie paint?"
    assert focus_query(q, big.df_ratio, 1.0, len(big)) == q  # threshold 1.0: off
    small = _chat(3)
    assert focus_query(q, small.df_ratio, 0.5, len(small)) == q  # too few memories to judge
    assert focus_query("Melanie Caroline", big.df_ratio, 0.5, len(big)) == "Melanie Caroline"


def test_df_ratio_counts_documents_not_occurrences():
    index = BM25Index([(1, "dog dog dog"), (2, "cat"), (3, "dog cat"), (4, "bird")], ngram=1)
    assert index.df_ratio("dog") == 0.5
    assert index.df_ratio("dogs") == 0.0  # no stemming in this index
    assert index.df_ratio("the") == 0.0  # stopword: no terms
    stemmed = BM25Index([(1, "dogs"), (2, "dog"), (3, "cat")], ngram=1, stem=True)
    assert stemmed.df_ratio("dog") == 2 / 3


def _m(i: int, session: str, turn: int) -> Memory:
    return Memory(id=i, user_id="u", text=f"t{i}", session_time=0, session_id=session, turn_index=turn)


def test_session_context_lifts_the_neighbour_of_a_strong_hit():
    memories = {1: _m(1, "s1", 0), 2: _m(2, "s1", 1), 3: _m(3, "s2", 5), 4: _m(4, "s3", 2)}
    fused = [FusedHit(1, 1.0, None, None), FusedHit(3, 0.5, None, None),
             FusedHit(2, 0.45, None, None), FusedHit(4, 0.1, None, None)]
    out = add_session_context(fused, memories, 0.3)
    assert [h.id for h in out] == [1, 2, 3, 4]  # 2 (next to 1) overtakes 3 (isolated)
    norm = {1: 1.0, 3: 0.4 / 0.9, 2: 0.35 / 0.9, 4: 0.0}  # min-max over the candidates
    assert out[1].score == pytest.approx(norm[2] + 0.3 * (norm[1] - norm[2]))  # toward its neighbour
    assert out[0].score == pytest.approx(norm[1])  # never past it: the leader keeps its score
    assert out[2].score == pytest.approx(norm[3]) and out[3].score == 0.0  # no neighbours
    # same turn index in another session is not a neighbour; weight 0 changes nothing
    assert [h.id for h in add_session_context(fused, memories, 0.0)] == [1, 3, 2, 4]
    # flat RRF-like scores: a neighbour bonus must not swamp a clear leader
    rrf_like = [FusedHit(3, 2 / 61, None, None), FusedHit(1, 1 / 61, None, None),
                FusedHit(2, 1 / 62, None, None), FusedHit(4, 1 / 70, None, None)]
    assert add_session_context(rrf_like, memories, 0.4)[0].id == 3


def test_stemming_matches_inflections_but_not_in_ids():
    index = BM25Index([(1, "I was researching adoption agencies"), (2, "code ZX-4471")], ngram=2, stem=True)
    assert index.search("What did she research about adopting?", 5)[0][0] == 1
    assert index.search("zx4471", 5)[0][0] == 2
    plain = BM25Index([(1, "I was researching adoption agencies")], ngram=2)
    assert plain.search("research adopting", 5) == []
