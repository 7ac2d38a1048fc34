"""Real Milvus Lite (file in tmp) + real MiniLM: storage, isolation and hybrid retrieval."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from memroute.config.schema import MemoryConfig, RetrievalConfig
from memroute.errors import ConfigError, InvalidRequest
from memroute.memory import MilvusMemoryStore
from memroute.retrieval.retriever import HybridRetriever
from memroute.types import TurnPair

T0 = 1683504000  # 8 May 2023
ALICE, BOB, CAROL = "alice@example.com", "user-42", "conv-26"
PAYLOAD = 'x" or user_id != "'

PLANTED_DOG = ("I adopted a golden retriever puppy last week and named him Biscuit.",
               "Biscuit is a lovely name for a golden retriever!")
PLANTED_CODE = ("Please note the serial on the replacement valve: ZX-4471.",
                "Noted, the valve serial is ZX-4471.")
# Near-miss codes: a dense model sees them as alike; only exact keyword matching separates them.
DECOY_CODES = [("My parcel tracking code is ZX-4417.", "Got it, ZX-4417."),
               ("The gym locker I rented is number XZ-7144.", "Locker XZ-7144, noted."),
               ("Our wifi password hint is ZX-1447.", "Hint ZX-1447 saved."),
               ("The library card I got says QX-4741.", "Card QX-4741, got it.")]
BOB_SECRET = ("My sister Veronica moved to Lisbon to teach mathematics.",
              "Lisbon is a beautiful city for a teacher!")

ACTIVITIES = ["baking sourdough bread", "repainting the kitchen", "training for a half marathon",
              "learning Spanish verbs", "fixing my bicycle brakes", "planting tomatoes",
              "reading a mystery novel", "practising the violin", "building a bookshelf",
              "studying for a chemistry exam", "knitting a scarf", "organising the garage"]
PLACES = ["at home", "in the park", "at my office", "with my cousin", "at the community centre"]


def filler(user: str, n: int) -> list[TurnPair]:
    out = []
    for i in range(n):
        act, place = ACTIVITIES[i % len(ACTIVITIES)], PLACES[(i // len(ACTIVITIES)) % len(PLACES)]
        out.append(TurnPair(user, f"s{i // 10}", i, f"I spent the afternoon {act} {place}.",
                            f"Sounds productive, {act} takes patience.", T0 + 86400 * (i // 10)))
    return out


def planted(user: str, turn: int, texts: tuple[str, str], day: int = 3) -> TurnPair:
    return TurnPair(user, "s-planted", turn, texts[0], texts[1], T0 + 86400 * day)


ALICE_PAIRS = [
    *filler(ALICE, 55),
    planted(ALICE, 0, PLANTED_DOG),
    planted(ALICE, 1, PLANTED_CODE),
    *(planted(ALICE, 10 + i, d, day=5) for i, d in enumerate(DECOY_CODES)),
]
BOB_PAIRS = [*filler(BOB, 20), planted(BOB, 0, BOB_SECRET)]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    db = tmp_path_factory.mktemp("milvus") / "nested" / "memories.db"
    s = MilvusMemoryStore(MemoryConfig(uri=str(db)), 384)
    yield s
    s.close()


@pytest.fixture(scope="module")
def retriever(encoder, store):
    # candidate_k above every user's row count: each leg sees all of a user's memories.
    r = HybridRetriever(encoder, store, RetrievalConfig(top_k=5, candidate_k=100))
    assert r.remember(ALICE_PAIRS + BOB_PAIRS) == len(ALICE_PAIRS) + len(BOB_PAIRS)
    store.flush()
    return r


def test_encoder_output_is_normalized_float32(encoder):
    vecs = encoder.encode(["hello there", "a second, longer sentence about gardens"])
    assert vecs.dtype == np.float32 and vecs.shape == (2, 384)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert encoder.encode([]).shape == (0, 384)


def test_matryoshka_truncation_and_too_wide_dim(assets, encoder):
    from memroute.embedding import SentenceTransformerEncoder

    path = assets.path("minilm-l6")
    small = SentenceTransformerEncoder(path, dim=128)
    full = encoder.encode(["truncate me"])[0]
    got = small.encode(["truncate me"])[0]
    assert got.shape == (128,) and np.isclose(np.linalg.norm(got), 1.0, atol=1e-5)
    assert np.allclose(got, full[:128] / np.linalg.norm(full[:128]), atol=1e-5)
    with pytest.raises(ConfigError) as err:
        SentenceTransformerEncoder(path, dim=385)
    assert err.value.field == "embedder.dim"


@pytest.mark.parametrize("strategy", ["dense", "hybrid"])
def test_planted_pair_found_for_a_paraphrase(retriever, strategy):
    hits = retriever.retrieve(ALICE, "What did I call my new dog?", strategy=strategy)
    assert "Biscuit" in hits[0].memory.text
    if strategy == "dense":
        assert hits[0].score == hits[0].dense_score and 0.0 < hits[0].score <= 1.0


@pytest.mark.parametrize("strategy", ["bm25", "hybrid"])
def test_keyword_only_fact(retriever, strategy):
    hits = retriever.retrieve(ALICE, "ZX-4471", strategy=strategy)
    assert "ZX-4471" in hits[0].memory.text
    assert hits[0].bm25_score is not None and hits[0].bm25_score > 0
    if strategy == "bm25":  # the near-miss codes share only "zx" with the query
        assert hits[0].bm25_score > 2 * hits[1].bm25_score


@pytest.mark.parametrize("fusion", ["rrf", "weighted", "bm25_dominant"])
def test_every_fusion_finds_the_keyword_fact_and_the_paraphrase(retriever, encoder, store, fusion):
    r = HybridRetriever(encoder, store, RetrievalConfig(top_k=3, candidate_k=100, fusion=fusion))
    assert "ZX-4471" in r.retrieve(ALICE, "which serial number was ZX-4471")[0].memory.text
    assert "Biscuit" in r.retrieve(ALICE, "What did I call my new dog?")[0].memory.text


def test_exact_text_has_cosine_one(retriever, store, encoder):
    text = ALICE_PAIRS[0].text()
    memory, score = store.search(ALICE, encoder.encode([text])[0], 1)[0]
    assert memory.text == text and memory.id == ALICE_PAIRS[0].id
    assert score == pytest.approx(1.0, abs=1e-4)


def test_reinserting_the_same_pairs_does_not_duplicate(retriever, store):
    before, alice_before = store.count(), store.count(ALICE)
    assert before == len(ALICE_PAIRS) + len(BOB_PAIRS)
    assert retriever.remember(ALICE_PAIRS[:10] + ALICE_PAIRS[:3]) == 10  # duplicates collapse
    assert store.count() == before and store.count(ALICE) == alice_before


@pytest.mark.parametrize("strategy", ["dense", "bm25", "hybrid"])
def test_one_users_query_never_returns_another_users_memories(retriever, strategy):
    bob_text = BOB_PAIRS[-1].text()
    assert retriever.retrieve(BOB, bob_text, strategy=strategy)[0].memory.text == bob_text
    hits = retriever.retrieve(ALICE, bob_text, top_k=100, strategy=strategy)
    assert all(h.memory.user_id == ALICE for h in hits)
    assert not any("Veronica" in h.memory.text for h in hits)


def test_injection_payload_is_refused_and_data_untouched(retriever, store, encoder):
    before = (store.count(), store.count(ALICE), store.count(BOB))
    vec = encoder.encode(["anything"])[0]
    for call in (
        lambda: retriever.retrieve(PAYLOAD, "Veronica Lisbon"),
        lambda: store.search(PAYLOAD, vec, 5),
        lambda: store.count(PAYLOAD),
        lambda: store.list_user(PAYLOAD),
        lambda: retriever.remember([TurnPair(PAYLOAD, "s", 0, "overwrite", "x", T0)]),
    ):
        with pytest.raises(InvalidRequest) as err:
            call()
        assert err.value.field == "user_id"
    assert (store.count(), store.count(ALICE), store.count(BOB)) == before


def test_filter_template_support_is_detected(store):
    """pymilvus 3.0.2 sends filter_params, but Milvus Lite 3.2.2 cannot parse templates."""
    from pymilvus.exceptions import MilvusException

    try:
        rows = store._client.query(
            store.collection, filter="user_id == {uid}", filter_params={"uid": BOB},
            output_fields=["user_id"], limit=100,
        )
        supported = bool(rows) and all(r["user_id"] == BOB for r in rows)
    except MilvusException:
        supported = False
    assert store._templates is supported


def test_list_user_pages_through_everything(retriever, store):
    rows = list(store.iter_user(ALICE, batch_size=7))
    assert len(rows) == len({r.id for r in rows}) == len(ALICE_PAIRS)
    listed = store.list_user(ALICE)
    assert [m.session_time for m in listed] == sorted(m.session_time for m in listed)
    assert {m.user_id for m in listed} == {ALICE}


def test_a_user_beyond_one_query_window_is_read_page_by_page(retriever, store, monkeypatch):
    from memroute.memory import milvus_store

    whole = {m.id for m in store.list_user(ALICE)}
    monkeypatch.setattr(milvus_store, "QUERY_WINDOW", 7)  # ALICE has more: the pager reads on
    assert len(whole) > 7 and {m.id for m in store.list_user(ALICE)} == whole
    assert len(store.list_user_vectors(ALICE).memories) == len(whole)


def test_index_progress_covers_every_flushed_row(retriever, store):
    store.flush()
    indexed, pending, finished = store.index_progress()
    assert (indexed, pending, finished) == (store.count(), 0, True)  # Lite indexes on write


def test_new_memory_is_searchable_by_bm25_right_after_remember(retriever):
    assert retriever.retrieve(CAROL, "kumquat", strategy="bm25") == []  # builds carol's index
    new = TurnPair(CAROL, "s9", 0, "We grew a kumquat tree on the balcony.", "Nice!", T0)
    retriever.remember([new])
    hits = retriever.retrieve(CAROL, "kumquat", strategy="bm25")
    assert len(hits) == 1 and "kumquat" in hits[0].memory.text


def test_oversized_text_is_stored_shortened_and_bad_vectors_refused(store, encoder):
    from memroute.memory.milvus_rows import MAX_TEXT

    long = TurnPair(ALICE, "s-long", 0, "word " * 2000, "ok", T0)  # 10,000+ bytes
    assert store.upsert([long], encoder.encode(["x"])) == 1  # not refused after its answer
    store.flush()
    [row] = [m for m in store.list_user(ALICE) if m.id == long.id]
    assert len(row.text.encode()) <= MAX_TEXT and row.text.endswith(" / A: ok")
    with pytest.raises(InvalidRequest) as err:
        store.upsert([ALICE_PAIRS[0]], np.zeros((1, 100), dtype=np.float32))
    assert err.value.field == "vectors"


def test_reopen_finds_rows_and_checks_dim(tmp_path, encoder):
    cfg = MemoryConfig(uri=str(tmp_path / "reopen.db"), collection="turns")
    pairs = filler("reopen-user", 12)
    with MilvusMemoryStore(cfg, 384) as first:
        assert first.upsert(pairs, encoder.encode([p.text() for p in pairs])) == 12
        first.flush()
    with MilvusMemoryStore(cfg, 384) as again:
        assert again.count("reopen-user") == 12
        hit, _ = again.search("reopen-user", encoder.encode([pairs[4].text()])[0], 1)[0]
        assert hit.id == pairs[4].id
    with pytest.raises(ConfigError) as err:
        MilvusMemoryStore(cfg, 128)
    assert err.value.field == "embedder.dim" and "384" in str(err.value)


def test_a_second_process_gets_a_clear_error_on_a_lite_file(store):
    import subprocess
    import sys

    child = (
        "import sys\n"
        "from memroute.config.schema import MemoryConfig\n"
        "from memroute.errors import BackendError\n"
        "from memroute.memory import MilvusMemoryStore\n"
        "try:\n"
        "    MilvusMemoryStore(MemoryConfig(uri=sys.argv[1]), 384)\n"
        "except BackendError as exc:\n"
        "    print(exc.field, exc)\n"
        "    sys.exit(3)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", child, store.uri], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 3, res.stderr[-2000:]
    assert res.stdout.startswith("memory.uri") and "one process" in res.stdout
    assert store.count(BOB) == len(BOB_PAIRS)  # the owner is unaffected


def test_token_vectors_drop_the_markers_and_are_normalized(encoder):
    texts = ["Biscuit is my dog", "a much longer sentence about the lake house we rented in June"]
    vectors = encoder.encode_tokens(texts)
    tokenizer = encoder._model.tokenizer
    for text, v in zip(texts, vectors):
        assert v.shape == (len(tokenizer(text)["input_ids"]) - 2, encoder.width)  # no [CLS] / [SEP]
        assert v.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-5)
    assert encoder.encode_tokens([]) == []


def test_maxsim_rerank_reorders_only_the_head_and_keeps_scores_descending(encoder, store):
    base = RetrievalConfig(top_k=30, candidate_k=100)
    plain = HybridRetriever(encoder, store, base)
    reranked = HybridRetriever(encoder, store, replace(base, rerank="maxsim", rerank_depth=8, rerank_weight=3.0),
                               bm25_cache=plain.bm25)
    query = "What did I call my new dog?"
    before, after = plain.retrieve(ALICE, query), reranked.retrieve(ALICE, query)
    assert {h.memory.id for h in after[:8]} == {h.memory.id for h in before[:8]}
    assert [h.memory.id for h in after[8:]] == [h.memory.id for h in before[8:]]
    assert [h.memory.id for h in after[:8]] != [h.memory.id for h in before[:8]]  # weight 3: it moves
    assert [h.score for h in after] == sorted((h.score for h in after), reverse=True)
    assert "Biscuit" in after[0].memory.text
    assert all(h.memory.user_id == ALICE for h in after)
