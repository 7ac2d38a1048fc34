"""Tokenization, the BM25 index and the per-user BM25 cache (no Milvus, no model)."""

from __future__ import annotations

import sys
import threading

import pytest

from memroute.config.schema import RetrievalConfig
from memroute.errors import ConfigError
from memroute.retrieval.bm25 import BM25Index
from memroute.retrieval.bm25_cache import BM25Cache
from memroute.text.tokenize import STOPWORDS, tokenize, unigrams
from memroute.types import Memory

# ---------------------------------------------------------------- tokenization


def test_lowercases_drops_stopwords_and_adds_bigrams_of_kept_words():
    assert tokenize("The Eiffel Tower is in Paris", ngram=2) == [
        "eiffel", "tower", "paris", "eiffel_tower", "tower_paris",
    ]


def test_unigrams_only_when_ngram_is_one():
    assert tokenize("The Eiffel Tower is in Paris", ngram=1) == ["eiffel", "tower", "paris"]


def test_trigrams():
    toks = tokenize("red green blue", ngram=3)
    assert "red_green_blue" in toks and "red_green" in toks and "green_blue" in toks


def test_turn_pair_markers_and_single_letters_are_dropped():
    toks = tokenize("[8 May 2023] Q: Caroline's dog? / A: I don't know", ngram=1)
    assert toks == ["8", "may", "2023", "caroline", "dog", "know"]


def test_hyphenated_codes_match_in_every_spelling():
    doc = set(tokenize("my locker code is ZX-4471", ngram=2))
    assert {"zx", "4471", "zx4471", "zx_4471"} <= doc
    for query in ("ZX-4471", "zx4471", "ZX 4471"):
        assert set(tokenize(query, ngram=1)) & doc, query


def test_letter_digit_words_are_split_too():
    toks = tokenize("meet at 3pm", ngram=1)
    assert toks == ["meet", "3pm", "3", "pm"]
    assert "covid" in tokenize("covid19", ngram=1)


def test_digits_are_kept_and_punctuation_splits():
    assert tokenize("I have 5 kids, 2 dogs.", ngram=1) == ["5", "kids", "2", "dogs"]


def test_stopword_list_has_no_content_words():
    assert STOPWORDS.isdisjoint({"dog", "may", "code", "name", "paris", "id", "work"})


def test_unigrams_have_no_variants_or_ngrams():
    assert unigrams("The ZX-4471 valve") == ["zx", "4471", "valve"]


def test_empty_and_stopword_only_text():
    assert tokenize("", ngram=2) == []
    assert tokenize("it is what it is", ngram=2) == []


# ---------------------------------------------------------------- BM25 index

DOCS = [
    (1, "We went to the beach and swam in the sea."),
    (2, "We went to the museum and then to the beach."),
    (3, "The zeppelin flew over the beach."),
    (4, "Dinner at home with the family."),
]


def test_rare_matching_term_ranks_first():
    index = BM25Index(DOCS)
    hits = index.search("beach zeppelin", limit=10)
    assert hits[0][0] == 3
    assert {d for d, _ in hits} == {1, 2, 3}  # doc 4 shares no term and is not returned
    assert all(s > 0 for _, s in hits)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)


def test_bigram_match_beats_scattered_words():
    index = BM25Index([(1, "new york pizza place"), (2, "a new pizza in york"), (3, "tea")])
    assert index.search("new york", limit=2)[0][0] == 1


def test_limit_and_no_match():
    index = BM25Index(DOCS)
    assert len(index.search("beach", limit=2)) == 2
    assert index.search("volcano", limit=5) == []
    assert index.search("the and to", limit=5) == []  # only stopwords
    assert index.search("beach", limit=0) == []


def test_tiny_corpus_still_finds_keywords():
    # Okapi's idf log((N-df+.5)/(df+.5)) is 0 for N=2, df=1; the Lucene idf stays positive.
    index = BM25Index([(10, "my locker code is ZX-4471"), (11, "hiking near the lake")])
    assert [d for d, _ in index.search("what is my locker code", 5)] == [10]
    one = BM25Index([(7, "only memory about pancakes")])
    assert one.search("pancakes", 5)[0][0] == 7


def test_empty_index_and_duplicate_ids():
    assert BM25Index([]).search("anything", 5) == []
    assert len(BM25Index([(1, "old text"), (1, "new text")])) == 1
    index = BM25Index([(1, "old apples"), (1, "new oranges")])
    assert index.search("apples", 5) == [] and index.search("oranges", 5)[0][0] == 1


def test_k1_and_b_change_scores():
    a = BM25Index(DOCS, k1=1.5, b=0.75).search("beach", 5)
    b = BM25Index(DOCS, k1=0.5, b=0.0).search("beach", 5)
    assert [s for _, s in a] != [s for _, s in b]


def test_overlap_is_fraction_of_query_words():
    index = BM25Index(DOCS)
    ov = index.overlap("beach zeppelin volcano", [3, 1, 99])
    assert ov[3] == pytest.approx(2 / 3)
    assert ov[1] == pytest.approx(1 / 3)
    assert ov[99] == 0.0


def test_bad_parameters_raise_config_errors():
    with pytest.raises(ConfigError):
        BM25Index(DOCS, method="bm42")
    with pytest.raises(ConfigError) as err:
        BM25Index(DOCS, b=1.5)
    assert err.value.field == "retrieval.bm25_b"


# ---------------------------------------------------------------- cache


def mem(i: int, user: str, text: str) -> Memory:
    return Memory(id=i, user_id=user, text=text, session_time=0)


class Loader:
    def __init__(self) -> None:
        self.rows: dict[str, list[Memory]] = {}
        self.calls: list[str] = []

    def __call__(self, user_id: str) -> list[Memory]:
        self.calls.append(user_id)
        return list(self.rows.get(user_id, []))


def test_cache_builds_lazily_once_and_rebuilds_after_invalidate():
    loader = Loader()
    loader.rows["alice"] = [mem(1, "alice", "blue bicycle")]
    cache = BM25Cache.from_config(loader, RetrievalConfig())
    assert "alice" not in cache
    assert [m.id for m, _ in cache.get("alice").search("bicycle", 5)] == [1]
    cache.get("alice")
    assert loader.calls == ["alice"]  # second get is served from the cache

    loader.rows["alice"].append(mem(2, "alice", "red kayak"))
    assert cache.get("alice").search("kayak", 5) == []  # stale until invalidated
    cache.invalidate("alice")
    assert [m.id for m, _ in cache.get("alice").search("kayak", 5)] == [2]
    assert loader.calls == ["alice", "alice"]


class FreshLoader(Loader):
    """A store whose read can be asked to see every acknowledged write (a Strong read)."""

    def __call__(self, user_id: str, *, fresh: bool = False) -> list[Memory]:
        self.calls.append(f"{user_id}{'!' if fresh else ''}")
        return list(self.rows.get(user_id, []))


def test_the_first_rebuild_after_an_invalidation_reads_fresh_and_only_that_one():
    """Another replica's write seen through the journal invalidates the user; a rebuild by a
    plain (Session) read might not show that write yet and would be kept, so it reads fresh."""
    loader = FreshLoader()
    cache = BM25Cache(loader)
    cache.get("alice")
    cache.invalidate("alice")
    cache.get("alice")
    cache.invalidate("alice")
    cache.forget_user("alice")  # erased: nothing to re-read fresh
    cache.get("alice")
    cache.invalidate("bob")
    cache.get("bob")
    cache.get("bob")
    assert loader.calls == ["alice", "alice!", "alice", "bob!"]
    plain = Loader()  # a loader without ``fresh`` is called as before
    BM25Cache(plain).invalidate("carol")
    c2 = BM25Cache(plain)
    c2.invalidate("carol")
    c2.get("carol")
    assert plain.calls == ["carol"]


def test_cache_is_per_user_and_lru_bounded():
    loader = Loader()
    for u in ("a", "b", "c"):
        loader.rows[u] = [mem(ord(u), u, f"secret {u}word")]
    cache = BM25Cache(loader, max_users=2)
    assert [m.user_id for m, _ in cache.get("a").search("secret", 5)] == ["a"]
    cache.get("b")
    cache.get("c")
    assert "a" not in cache and "b" in cache and "c" in cache


def test_cache_evicts_the_least_recently_used_past_its_byte_cap_and_counts():
    loader = Loader()
    for u in ("a", "b", "c"):
        loader.rows[u] = [mem(i, u, f"secret {u} note number {i} about {u}{i}") for i in range(50)]
    sizes = {u: BM25Cache(loader).get(u).nbytes for u in "abc"}
    assert all(n > 50 * 100 for n in sizes.values())  # texts, term sets, the score matrix
    loader.calls.clear()
    cache = BM25Cache(loader, max_bytes=sizes["a"] + sizes["b"] + 1)
    cache.get("a")
    cache.get("b")
    cache.get("a")  # a hit: "a" is now the most recently used
    cache.get("c")  # over the cap: "b", the least recently used, goes
    assert "a" in cache and "b" not in cache and "c" in cache
    stats = cache.stats()
    assert (stats.users, stats.hits, stats.misses, stats.evictions) == (2, 1, 3, 1)
    assert stats.bytes == sizes["a"] + sizes["c"] and stats.max_bytes == sizes["a"] + sizes["b"] + 1
    cache.invalidate("a")
    cache.forget_tenant("zz")  # nothing of it cached
    assert cache.stats().bytes == sizes["c"] and cache.stats().evictions == 1  # not an eviction
    one = BM25Cache(loader, max_bytes=1)  # one user larger than the cap is still kept
    one.get("a")
    assert "a" in one and one.stats().users == 1
    one.get("b")
    assert "a" not in one and one.stats().evictions == 1
    with pytest.raises(ConfigError) as err:
        BM25Cache.from_config(loader, RetrievalConfig(bm25_cache_mb=-1))
    assert err.value.field == "retrieval.bm25_cache_mb"


def test_the_size_estimate_is_close_to_what_python_allocates():
    import tracemalloc

    rows = [mem(i, "u", f"note {i}: the {i % 7} blue {i % 13} kayak trip {i * 3}")
            for i in range(300)]
    BM25Cache(lambda uid: rows).get("u")  # imports and caches warmed outside the trace
    tracemalloc.start()
    try:
        entry = BM25Cache(lambda uid: rows).get("u")
        traced, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    texts = sum(sys.getsizeof(m.text) for m in rows)  # allocated before the trace
    assert 0.6 < (entry.nbytes - texts) / traced < 1.6


def test_index_built_during_an_invalidation_is_not_cached():
    loader = Loader()
    loader.rows["u1"] = [mem(1, "u1", "first")]
    started, release = threading.Event(), threading.Event()

    def slow_loader(uid: str) -> list[Memory]:
        rows = loader(uid)
        started.set()
        release.wait(5)
        return rows

    cache = BM25Cache(slow_loader)
    t = threading.Thread(target=cache.get, args=("u1",))
    t.start()
    assert started.wait(5)
    cache.invalidate("u1")  # a write lands while the old rows are being indexed
    release.set()
    t.join(5)
    assert "u1" not in cache


def test_cache_refuses_bad_user_ids():
    from memroute.errors import InvalidRequest

    cache = BM25Cache(Loader())
    with pytest.raises(InvalidRequest):
        cache.get('x" or user_id != "')


def test_cache_checks_parameters_at_construction():
    with pytest.raises(ConfigError) as err:
        BM25Cache.from_config(Loader(), RetrievalConfig(ngram=0))
    assert err.value.field == "retrieval.ngram"
