"""Per-user BM25 over turn-pair texts (bm25s sparse matrices), and query-term overlap.

Variant: Okapi BM25 with Lucene's idf, ``log(1 + (N - df + 0.5) / (df + 0.5))`` (bm25s
``method="lucene"``; the same formula as Lucene/Elasticsearch and Milvus' BM25 function).
rank-bm25's ``BM25Okapi`` uses ``log((N - df + 0.5) / (df + 0.5))``, which is 0 for every term
when a user has 1-2 memories and negative for terms in more than half of them (it then
substitutes 0.25 x the mean idf). Per-user corpora are often that small, so keyword recall for
new users would be lost; see bench/bench_bm25.py for speed and ranking agreement. The per-user
cache of these indexes, kept in step with writes, is :mod:`memroute.retrieval.bm25_cache`.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np

from memroute.errors import ConfigError
from memroute.text.tokenize import tokenize, unigrams
from memroute.types import Memory

METHODS = ("lucene", "robertson", "atire")
DEFAULT_METHOD = "lucene"
DICT_SLOT_BYTES = 24  # a dict entry's share of its table (hash, key, value pointers)


class BM25Index:
    """BM25 over ``(doc_id, text)`` pairs; a later duplicate id replaces an earlier one."""

    def __init__(
        self,
        docs: Iterable[tuple[int, str]],
        *,
        k1: float = 1.5,
        b: float = 0.75,
        ngram: int = 2,
        method: str = DEFAULT_METHOD,
        stem: bool = False,
    ) -> None:
        if method not in METHODS:
            raise ConfigError(
                f"Unknown BM25 method {method!r}. Available: {', '.join(METHODS)}",
                field="bm25.method",
            )
        if k1 < 0:
            raise ConfigError("bm25_k1 must be >= 0", field="retrieval.bm25_k1")
        if not 0 <= b <= 1:
            raise ConfigError("bm25_b must be in [0, 1]", field="retrieval.bm25_b")
        if ngram < 1:
            raise ConfigError("ngram must be >= 1", field="retrieval.ngram")
        self.k1, self.b, self.ngram, self.method, self.stem = k1, b, ngram, method, stem

        by_id = {int(doc_id): text for doc_id, text in docs}
        self._ids = np.fromiter(by_id.keys(), dtype=np.int64, count=len(by_id))
        tokens = [tokenize(text, ngram, stem) for text in by_id.values()]
        # Term sets for query-term overlap (bm25_dominant); include variants like "zx4471".
        # interned: a term shared by many documents is one string, not one per document
        self._term_sets = {doc_id: frozenset(map(sys.intern, t)) for doc_id, t in zip(by_id, tokens)}
        self._doc_freq: Counter[str] | None = None  # built on first df_ratio()
        self._engine = None
        self._vocab: dict[str, int] = {}
        if any(tokens):
            import bm25s  # imports numba (~0.4 s): only when an index is built

            # bm25s forces its logger to DEBUG on import; it would log every index build.
            logging.getLogger("bm25s").setLevel(logging.WARNING)
            engine = bm25s.BM25(k1=k1, b=b, method=method)
            engine.index(tokens, show_progress=False)
            self._engine = engine
            self._vocab = {t: i for t, i in engine.vocab_dict.items() if t}

    def __len__(self) -> int:
        return len(self._ids)

    def nbytes(self) -> int:
        """Approximate memory held: the engine's score matrix, its vocabulary and the term
        sets (their tables, and each distinct interned term once), by ``sys.getsizeof``."""
        n = int(self._ids.nbytes)
        if self._engine is not None:
            scores = self._engine.scores
            n += sum(int(getattr(scores.get(k), "nbytes", 0)) for k in ("data", "indices", "indptr"))
            n += sum(sys.getsizeof(t) + DICT_SLOT_BYTES for t in self._vocab)
        distinct: set[str] = set()
        for terms in self._term_sets.values():
            n += sys.getsizeof(terms)
            distinct.update(terms)
        return n + sum(sys.getsizeof(t) for t in distinct)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document (index order) for ``query``."""
        if self._engine is None:
            return np.zeros(len(self._ids), dtype=np.float32)
        term_ids = [self._vocab[t] for t in tokenize(query, self.ngram, self.stem) if t in self._vocab]
        if not term_ids:
            return np.zeros(len(self._ids), dtype=np.float32)
        return np.asarray(self._engine.get_scores_from_ids(term_ids), dtype=np.float32)

    @property
    def doc_ids(self) -> np.ndarray:
        """The document ids in index order (the order of :meth:`scores`)."""
        return self._ids

    def search(self, query: str, limit: int, *, keep: np.ndarray | None = None) -> list[tuple[int, float]]:
        """Up to ``limit`` (doc_id, score), best first; only documents scoring above 0 (and,
        with ``keep``, a boolean mask in index order, only those it marks)."""
        if limit < 1:
            return []
        scores = self.scores(query)
        hits = np.flatnonzero((scores > 0) if keep is None else (scores > 0) & keep)
        if hits.size == 0:
            return []
        # Score descending, ties in index (insertion) order, so results are deterministic.
        order = hits[np.lexsort((hits, -scores[hits]))][:limit]
        return [(int(self._ids[i]), float(scores[i])) for i in order]

    def overlap(self, query: str, doc_ids: Iterable[int]) -> dict[int, float]:
        """Fraction of the query's distinct unigrams present in each document (0 if none)."""
        terms = set(unigrams(query, self.stem))
        out: dict[int, float] = {}
        for doc_id in doc_ids:
            doc_terms = self._term_sets.get(int(doc_id))
            if not terms or doc_terms is None:
                out[int(doc_id)] = 0.0
            else:
                out[int(doc_id)] = len(terms & doc_terms) / len(terms)
        return out

    def df_ratio(self, word: str) -> float:
        """Share of the documents containing ``word`` (all of its terms, after tokenization);
        0.0 for a stopword or a word no document has."""
        terms = unigrams(word, self.stem)
        if not terms or not len(self._ids):
            return 0.0
        if self._doc_freq is None:
            self._doc_freq = Counter(t for ts in self._term_sets.values() for t in ts)
        return min(self._doc_freq[t] for t in terms) / len(self._ids)


class LazyOverlap(Mapping[int, float]):
    """:meth:`BM25Index.overlap` for hits that have no in-process index. Tokenizing 50 memories
    costs ~6 ms, so a memory is tokenized only when a fusion reads its overlap."""

    def __init__(self, query: str, hits: Sequence[Memory], ngram: int, stem: bool) -> None:
        self._terms = set(unigrams(query, stem))
        self._texts = {m.id: m.text for m in hits}
        self._ngram, self._stem = ngram, stem
        self._done: dict[int, float] = {}

    def __getitem__(self, doc_id: int) -> float:
        if doc_id not in self._done:
            text = self._texts[doc_id]  # KeyError for ids outside the hits (Mapping.get: default)
            found = self._terms & set(tokenize(text, self._ngram, self._stem))
            self._done[doc_id] = len(found) / len(self._terms) if self._terms else 0.0
        return self._done[doc_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self._texts)

    def __len__(self) -> int:
        return len(self._texts)
