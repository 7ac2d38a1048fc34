"""The temporal filter (retrieval.temporal) on vs off on the generated LongMemEval-format set.

    python bench/bench_temporal.py [--size default] [--seed 0] [--k 5]

Data: memroute.datasets.generate.longmemeval (``--size``), every question its own user whose
memories are its haystack, embedded once (MiniLM, offline assets) into a Milvus Lite file in a
temporary directory; the retriever is the default hybrid one (conf/retrieval defaults). Metric:
turn-level Recall@k (fraction of the gold turn-pairs in the top k), as memroute.eval.retrieval_eval.

The generated questions carry no date expression (its temporal-reasoning questions ask "how many
days passed between ..."), so the filter should not fire on them: the "as generated" rows check
that it costs nothing. Two variants add a date to every question, to measure what a date that
the parser understands buys, and what a fallback costs when the window misses gold:

- ``+ in <Month YYYY>``: the month of the question's latest gold session (explicit date);
- ``+ N weeks ago``: that session's distance from the question date, in whole weeks (relative:
  parsed from the question date, passed as ``question_times``);
- the same ``N weeks ago`` with the ``[Current date: ...]`` prefix instead of ``question_times``.

A question whose gold spans sessions months apart (multi-session, knowledge-update) loses gold
from a date that names only one of them; so each row is scored twice: against all gold turn-pairs,
and against the gold turn-pairs of the dated (latest gold) session only. Also printed: the parse
time per question (first call, and warm mean / p95 over every variant).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info

from memroute import build
from memroute.config import AssetsConfig, EmbedderConfig
from memroute.config.schema import MemoryConfig, RetrievalConfig
from memroute.datasets.cases import longmemeval_cases
from memroute.datasets.generate.longmemeval import SIZES, generate_longmemeval, write_json
from memroute.datasets.generate.longmemeval_haystack import fmt_lme_date
from memroute.datasets.longmemeval import load_longmemeval
from memroute.eval.metrics import recall_at_k
from memroute.retrieval.temporal import time_window

WEEK_S = 7 * 86400


def variants(question: str, gold_time: int, asked: int) -> dict[str, tuple[str, bool]]:
    """name -> (query text, pass the question time as question_times)."""
    stem = question.rstrip(" ?")
    weeks = max(1, round((asked - gold_time) / WEEK_S))
    ago = f"{stem} {weeks} week{'s' if weeks > 1 else ''} ago?"
    prefix = f"[Current date: {fmt_lme_date(datetime.fromtimestamp(asked, UTC))}] "
    return {
        "as generated": (question, True),
        "+ in <Month YYYY>": (f"{stem} in {datetime.fromtimestamp(gold_time, UTC):%B %Y}?", True),
        "+ N weeks ago": (ago, True),
        "+ N weeks ago, date prefix": (prefix + ago, False),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="default")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--k", type=int, default=5)
    args = ap.parse_args()
    info = machine_info(("torch", "pymilvus", "milvus-lite", "bm25s", "dateparser"))
    print("machine:", info)

    tmp = Path(tempfile.mkdtemp(prefix="bench_temporal_"))
    try:
        questions = load_longmemeval(write_json(generate_longmemeval(size=args.size, seed=args.seed),
                                                tmp / "lme.json"))
        pairs, cases = [], []
        for q in questions:  # one call per question: each case keeps its question's date
            qp, qc = longmemeval_cases([q])
            pairs += qp
            cases += [(c, q) for c in qc]
        when = {p.id: p.session_time for p in pairs}
        print(f"{args.size} set: {len(questions)} questions, {len(cases)} with gold, {len(pairs)} turn-pairs")

        # parse time: the first call loads dateparser's data; then every variant, warm
        t0 = time.perf_counter()
        time_window("What did I buy in May 2023?", time.time())
        first_ms = (time.perf_counter() - t0) * 1000
        rows = []
        for c, q in cases:
            gold_time = max(when[g] for g in c.gold_pairs)
            dated = tuple(g for g in c.gold_pairs if when[g] == gold_time)
            rows.append((c, q, variants(q.question, gold_time, q.question_date), dated))
        parse_ms, fired = [], defaultdict(int)
        for _, q, vs, _ in rows:
            for name, (text, _) in vs.items():
                t0 = time.perf_counter()
                w = time_window(text, q.question_date)
                parse_ms.append((time.perf_counter() - t0) * 1000)
                fired[name] += w is not None
        parse_ms.sort()
        print(f"parse time per question: first call {first_ms:.0f} ms; warm mean "
              f"{statistics.mean(parse_ms):.2f} ms, p95 {parse_ms[int(0.95 * (len(parse_ms) - 1))]:.2f} ms "
              f"over {len(parse_ms)} questions")
        print("questions with a window:", {n: f"{fired[n]}/{len(rows)}" for n in rows[0][2]})

        encoder = build.encoder(EmbedderConfig(), build.asset_store(AssetsConfig()))
        store = build.store(MemoryConfig(uri=str(tmp / "memories.db"), collection="temporal"), encoder.dim)
        try:
            base = RetrievalConfig()
            on = build.retriever(encoder, store, replace(base, temporal="auto"))
            t0 = time.time()
            on.remember(pairs)
            store.flush()
            print(f"memories embedded and stored in {time.time() - t0:.0f}s")
            off = build.retriever(encoder, store, replace(base, temporal="off"), bm25_cache=on.bm25)
            for c, *_ in rows:
                on.bm25.get(c.user_id)  # build the BM25 indexes before anything is timed
            report(rows, {"auto": on, "off": off}, args.k)
        finally:
            store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def report(rows, retrievers, k: int) -> None:
    names = list(rows[0][2])
    types = sorted({c.group for c, *_ in rows})
    results = []  # (variant, temporal, {column: [recall per question]}, ms per query)
    for name in names:
        for label, r in retrievers.items():
            scores: dict[str, list[float]] = defaultdict(list)
            t0 = time.perf_counter()
            for c, q, vs, dated in rows:
                text, pass_time = vs[name]
                times = [q.question_date] if pass_time else None
                ranked = [h.memory.id for h in r.retrieve_many([c.user_id], [text], top_k=k, question_times=times)[0]]
                rec = recall_at_k(ranked, c.gold_pairs, k)
                scores["all"].append(rec)
                scores[c.group].append(rec)
                scores["dated"].append(recall_at_k(ranked, dated, k))
                scores[f"dated {c.group}"].append(recall_at_k(ranked, dated, k))
            results.append((name, label, scores, (time.perf_counter() - t0) * 1000 / len(rows)))
    counts = ", ".join(f"{t} {sum(c.group == t for c, *_ in rows)}" for t in types)
    for title, prefix in (("all gold turn-pairs", ""), ("the dated session's gold turn-pairs", "dated ")):
        print(f"\nturn-level Recall@{k} against {title}, mean over questions (n: {counts})")
        header = ["variant", "temporal", "all", *types, "ms/query"]
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for name, label, scores, ms in results:
            cols = ["dated" if prefix else "all", *(prefix + t for t in types)]
            cells = [f"{statistics.mean(scores[col]):.3f}" for col in cols]
            print("| " + " | ".join([name, label, *cells, f"{ms:.0f}"]) + " |")


if __name__ == "__main__":
    main()
