"""Text the API accepts but a store column or the retriever cannot hold whole: shortened where it
is stored or searched, never refused after the answer (the pair would be lost after its 200)."""

from __future__ import annotations

from memroute.memory.milvus_rows import MAX_TEXT, stored_text
from memroute.text.clip import clip_utf8, shorten_middle
from memroute.types import TurnPair


def test_clipping_never_splits_a_character():
    text = "é" * 10  # 2 bytes each
    assert clip_utf8(text, 5) == "éé"
    cut = shorten_middle("start " + "😀" * 1000 + " end?", 100)
    assert len(cut.encode()) <= 100 and cut.startswith("start") and cut.endswith(" end?")


def test_a_pair_over_the_store_column_is_stored_shortened_with_its_answer_whole():
    question = "My favourite emoji story: " + "😀" * 2100 + " What do you think?"
    pair = TurnPair("alice", "s", 1, question, "Lovely, arr.", 1_683_500_000)
    assert len(pair.text().encode()) > MAX_TEXT  # 8,400+ bytes: refused before the fix
    text = stored_text(pair, MAX_TEXT)
    assert len(text.encode()) <= MAX_TEXT
    assert text.endswith(" / A: Lovely, arr.") and "My favourite emoji story" in text
    assert "What do you think?" in text
    short = TurnPair("alice", "s", 2, "Hi?", "Hello.", 1_683_500_000)
    assert stored_text(short, MAX_TEXT) == short.text()


def test_a_question_longer_than_retrieval_takes_is_still_answered():
    from memroute.accounting.cost import Pricing
    from memroute.config import RetrievalConfig, RouterConfig
    from memroute.routing.router import MAX_QUERY_BYTES, Router, Tier

    from .fakes import FakeBackend, FakeRetriever

    seen = []

    class Recording(FakeRetriever):
        def retrieve_many(self, user_ids, queries, *, top_k=None):
            seen.extend(queries)
            return super().retrieve_many(user_ids, queries, top_k=top_k)

    backend = FakeBackend("t0")
    r = Router([Tier("t0", backend, Pricing(0.5))], RouterConfig(), RetrievalConfig(),
               Recording())
    question = "why " * 5000  # 20,000 characters
    assert r.route("alice", question).answer == "blue"
    assert len(seen[0].encode()) <= MAX_QUERY_BYTES
    assert backend.prompts[0][-1].content == question  # the model gets all of it
