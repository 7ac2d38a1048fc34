"""Compare bm25s and rank-bm25 for the per-user BM25 leg: speed and ranking agreement.

    python bench/bench_bm25.py [--sizes 1000 10000] [--queries 200]
                               [--locomo PATH/locomo10.json --sample conv-26]

Both libraries get the same tokens (memroute.text.tokenize, bigrams on). Variants:
  okapi     rank_bm25.BM25Okapi: idf log((N-df+.5)/(df+.5)), negative idf -> 0.25 x mean idf
  robertson bm25s method="robertson": same idf floored at 0, tf part without (k1+1)
  lucene    bm25s method="lucene": idf log(1 + (N-df+.5)/(df+.5)) (always > 0)
robertson x (k1+1) equals okapi exactly whenever no query term occurs in more than half of the
documents; lucene changes the idf curve, so its rankings are compared by top-1 / top-10 overlap.
With --locomo, evidence recall@5/@10 of each variant is measured on real turn-pairs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import string
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from memroute.text.tokenize import tokenize

K1, B, NGRAM = 1.5, 0.75, 2


# ---------------------------------------------------------------------------- corpora
def synthetic_corpus(n_docs: int, n_queries: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """Zipf-distributed made-up words, 10-60 per document; queries mix a doc's words with noise."""
    rng = np.random.default_rng(seed)
    letters = np.array(list(string.ascii_lowercase))
    vocab = sorted({"".join(rng.choice(letters, rng.integers(3, 10))) for _ in range(30_000)})
    weights = 1.0 / np.arange(1, len(vocab) + 1) ** 1.1
    weights /= weights.sum()
    docs = [
        " ".join(rng.choice(vocab, size=rng.integers(10, 61), p=weights)) for _ in range(n_docs)
    ]
    queries = []
    for _ in range(n_queries):
        words = docs[rng.integers(n_docs)].split()
        picked = list(rng.choice(words, size=min(len(words), rng.integers(3, 9)), replace=False))
        picked += list(rng.choice(vocab, size=2, p=weights))
        queries.append(" ".join(picked))
    return docs, queries


def locomo_pairs(
    path: Path, sample_id: str
) -> tuple[list[str], list[set[str]], list[str], list[set[str]]]:
    """Non-overlapping turn-pairs ``[date] A: ... / B: ...`` and the questions of categories 1-4."""
    sample = next(s for s in json.loads(path.read_text()) if s["sample_id"] == sample_id)
    conv = sample["conversation"]
    texts, dia_sets = [], []
    n = 1
    while f"session_{n}" in conv:
        date = conv[f"session_{n}_date_time"]
        turns = conv[f"session_{n}"]
        for i in range(0, len(turns), 2):
            pair = turns[i : i + 2]
            texts.append(f"[{date}] " + " / ".join(f"{t['speaker']}: {t['text']}" for t in pair))
            dia_sets.append({t["dia_id"] for t in pair})
        n += 1
    qa = [q for q in sample["qa"] if q.get("category") in (1, 2, 3, 4)]
    return texts, dia_sets, [q["question"] for q in qa], [set(q["evidence"]) for q in qa]


# ---------------------------------------------------------------------------- engines
class Engine:
    def __init__(self, name: str, build: Callable[[list[list[str]]], object],
                 score: Callable[[object, list[str]], np.ndarray]) -> None:
        self.name, self._build, self._score = name, build, score

    def build(self, corpus_tokens: list[list[str]]) -> object:
        return self._build(corpus_tokens)

    def scores(self, index: object, query_tokens: list[str]) -> np.ndarray:
        return self._score(index, query_tokens)


def _okapi_build(tokens: list[list[str]]) -> object:
    from rank_bm25 import BM25Okapi

    return BM25Okapi(tokens, k1=K1, b=B)


def _okapi_score(index: object, q: list[str]) -> np.ndarray:
    return np.asarray(index.get_scores(q), dtype=np.float64)  # type: ignore[attr-defined]


def _bm25s_build(method: str) -> Callable[[list[list[str]]], object]:
    def build(tokens: list[list[str]]) -> object:
        import bm25s

        engine = bm25s.BM25(k1=K1, b=B, method=method)
        engine.index(tokens, show_progress=False)
        return engine

    return build


def _bm25s_score(index: object, q: list[str]) -> np.ndarray:
    ids = [index.vocab_dict[t] for t in q if t in index.vocab_dict]  # type: ignore[attr-defined]
    if not ids:
        return np.zeros(index.scores["num_docs"])  # type: ignore[attr-defined]
    scores = index.get_scores_from_ids(ids)  # type: ignore[attr-defined]
    return np.asarray(scores, dtype=np.float64)


ENGINES = [
    Engine("rank_bm25 okapi", _okapi_build, _okapi_score),
    Engine("bm25s robertson", _bm25s_build("robertson"), _bm25s_score),
    Engine("bm25s lucene", _bm25s_build("lucene"), _bm25s_score),
]


def top_k(scores: np.ndarray, k: int) -> list[int]:
    pos = np.flatnonzero(scores > 0)
    return [int(i) for i in pos[np.lexsort((pos, -scores[pos]))][:k]]


# ---------------------------------------------------------------------------- measurements
def timed(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def speed_and_agreement(n_docs: int, n_queries: int) -> None:
    docs, queries = synthetic_corpus(n_docs, n_queries)
    t = time.perf_counter()
    corpus_tokens = [tokenize(d, NGRAM) for d in docs]
    q_tokens = [tokenize(q, NGRAM) for q in queries]
    print(f"\n## {n_docs} documents, {n_queries} queries "
          f"(tokenizing all: {1000 * (time.perf_counter() - t):.0f} ms)")
    print(f"{'engine':18} {'build ms':>9} {'query p50 ms':>13} {'query p90 ms':>13}")
    results: dict[str, list[np.ndarray]] = {}
    for eng in ENGINES:
        build_s, index = timed(lambda: eng.build(corpus_tokens), repeat=3)
        lat, all_scores = [], []
        for q in q_tokens:
            t = time.perf_counter()
            s = eng.scores(index, q)
            top_k(s, 50)
            lat.append(time.perf_counter() - t)
            all_scores.append(s)
        results[eng.name] = all_scores
        print(f"{eng.name:18} {1000 * build_s:9.1f} {1000 * statistics.median(lat):13.3f} "
              f"{1000 * float(np.percentile(lat, 90)):13.3f}")
    agreement(results, corpus_tokens, q_tokens)


def agreement(results: dict[str, list[np.ndarray]], corpus_tokens: list[list[str]],
              q_tokens: list[list[str]]) -> None:
    okapi, rob, luc = (results[e.name] for e in ENGINES)
    n = len(corpus_tokens)
    df: dict[str, int] = {}
    for toks in corpus_tokens:
        for t in set(toks):
            df[t] = df.get(t, 0) + 1
    rare = [i for i, q in enumerate(q_tokens) if all(df.get(t, 0) <= n / 2 for t in q)]
    max_rel = max(
        (float(np.max(np.abs(rob[i] * (K1 + 1) - okapi[i]) / np.maximum(okapi[i], 1e-9)))
         for i in rare), default=0.0,
    )
    same_rare = np.mean([top_k(rob[i], 10) == top_k(okapi[i], 10) for i in rare]) if rare else 1.0
    print(f"robertson x (k1+1) vs okapi, {len(rare)}/{len(q_tokens)} queries without a term in "
          f"> N/2 docs: max relative score difference {max_rel:.2e}, "
          f"top-10 identical order {same_rare:.3f}")
    for name, other in (("robertson", rob), ("lucene", luc)):
        top1 = np.mean([top_k(a, 1) == top_k(b, 1) for a, b in zip(okapi, other)])
        top10 = np.mean([len(set(top_k(a, 10)) & set(top_k(b, 10))) / max(1, len(top_k(a, 10)))
                         for a, b in zip(okapi, other)])
        same10 = np.mean([top_k(a, 10) == top_k(b, 10) for a, b in zip(okapi, other)])
        print(f"okapi vs {name:9}: top-1 equal {top1:.3f}, top-10 overlap {top10:.3f}, "
              f"top-10 identical order {same10:.3f}")


def tiny_corpus() -> None:
    docs = ["My locker code is ZX-4471.", "We went hiking near the lake last weekend."]
    corpus_tokens = [tokenize(d, NGRAM) for d in docs]
    q = tokenize("what is my locker code", NGRAM)
    print("\n## a user with 2 memories, query 'what is my locker code'")
    for eng in ENGINES:
        s = eng.scores(eng.build(corpus_tokens), q)
        print(f"{eng.name:18} scores {np.round(s, 3).tolist()} -> hits {top_k(s, 5)}")


def locomo_recall(path: Path, sample_id: str) -> None:
    texts, dia_sets, questions, evidence = locomo_pairs(path, sample_id)
    corpus_tokens = [tokenize(t, NGRAM) for t in texts]
    print(f"\n## LoCoMo {sample_id}: {len(texts)} turn-pairs, {len(questions)} questions (cat 1-4)")
    for eng in ENGINES:
        index = eng.build(corpus_tokens)
        rec = {5: [], 10: []}
        for q, ev in zip(questions, evidence):
            ranked = top_k(eng.scores(index, tokenize(q, NGRAM)), 10)
            for k in rec:
                rec[k].append(any(dia_sets[i] & ev for i in ranked[:k]))
        print(f"{eng.name:18} evidence recall@5 {np.mean(rec[5]):.3f}  @10 {np.mean(rec[10]):.3f}")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--locomo", type=Path, default=None, help="path to locomo10.json")
    ap.add_argument("--sample", default="conv-26")
    args = ap.parse_args(argv)
    print(f"k1={K1} b={B} ngram={NGRAM}")
    for n in args.sizes:
        speed_and_agreement(n, args.queries)
    tiny_corpus()
    if args.locomo:
        locomo_recall(args.locomo, args.sample)


if __name__ == "__main__":
    main()
