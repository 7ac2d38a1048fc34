"""Ingest throughput: the Ray Data pipeline vs the bare encoder, on the same rows, in one run.

    python bench/bench_ingest.py [--rows 4000] [--concurrency 2] [--num-cpus 0.75]
                                 [--threads 2] [--batch-size 256] [--seed 0]

Rows are turn-pairs of the generated LongMemEval set (default preset: 40-50 sessions per
question), first ``--rows`` of them. Measured, each into its own fresh Milvus Lite file:
  bare encode          SentenceTransformerEncoder.encode in this process (--threads torch threads)
  bare encode+write    the same, then upsert in batches of 500 and flush: a sequential ingest
  ray pipeline         pipelines.ingest.ingest_pairs on a local loopback Ray node: embedding actor
                       pool (--concurrency x --num-cpus, 1 torch thread each) -> driver writes;
                       wall time includes actor start-up; "steady" leaves out the time to the
                       first written batch
Model load times are reported apart and left out of every rate.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before anything imports ray
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from memroute.config import (  # noqa: E402
    DatasetConfig,
    EmbedderConfig,
    IngestConfig,
    MemoryConfig,
    RayConfig,
    TrackingConfig,
)
from memroute.types import TurnPair  # noqa: E402

from machine import machine_info  # noqa: E402  (bench/machine.py, beside this script)


def load_average() -> str:
    """Other work on the machine moves every number here: print it next to them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def bench_rows(n: int, seed: int, work: Path) -> list[TurnPair]:
    from memroute.eval.datasets import lme_turn_pairs, load_longmemeval
    from memroute.eval.longmemeval_synth import generate_longmemeval, write_json

    questions = 10
    while True:  # ~160 pairs per question in the default preset: grow until there are enough
        records = generate_longmemeval(num_questions=questions, seed=seed)
        path = write_json(records, work / "lme.json")
        pairs = [r.pair for q in load_longmemeval(path) for r in lme_turn_pairs(q)]
        if len(pairs) >= n:
            return pairs[:n]
        questions = int(questions * n / max(1, len(pairs))) + 2


def bare(pairs: list[TurnPair], threads: int, db: Path) -> dict[str, float]:
    from memroute.embedding import build_encoder
    from memroute.memory import MilvusMemoryStore

    t0 = time.perf_counter()
    encoder = build_encoder(EmbedderConfig(num_threads=threads))
    encoder.encode(["warm up"])
    load = time.perf_counter() - t0
    texts = [p.text() for p in pairs]

    t0 = time.perf_counter()
    encoder.encode(texts)
    encode_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    with MilvusMemoryStore(MemoryConfig(uri=str(db)), encoder.dim) as store:
        for start in range(0, len(pairs), 500):
            chunk = pairs[start : start + 500]
            store.upsert(chunk, encoder.encode([p.text() for p in chunk]))
        store.flush()
        stored = store.count()
    assert stored == len(pairs), (stored, len(pairs))
    write_s = time.perf_counter() - t0
    return {"load_s": load, "encode_s": encode_s, "encode_write_s": write_s}


def pipeline(pairs: list[TurnPair], args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    from jobs.ingest import LazyRay
    from pipelines.ingest import ingest_pairs

    cfg = IngestConfig(
        dataset=DatasetConfig(name="longmemeval"),
        memory=MemoryConfig(uri=str(tmp / "ray.db")),
        ray=RayConfig(num_cpus=os.cpu_count()),
        tracking=TrackingConfig(enabled=False),
        work_dir=str(tmp / "work"),
        progress=False,
    )
    cfg.embed.concurrency = args.concurrency
    cfg.embed.num_cpus = args.num_cpus
    cfg.embed.batch_size = args.batch_size
    lazy = LazyRay(cfg.ray)
    t0 = time.perf_counter()
    lazy.ensure()
    ray_init = time.perf_counter() - t0
    try:
        summary = ingest_pairs(pairs, cfg)
    finally:
        lazy.close()
    assert summary.written == len(pairs) and summary.errors == 0, summary.line()
    first_rows = min(cfg.write.batch_size, len(pairs))
    first_s = summary.first_batch_seconds or 0.0
    steady = (len(pairs) - first_rows) / max(1e-9, summary.pipeline_seconds - first_s)
    return {
        "ray_init_s": ray_init,
        "pipeline_s": summary.pipeline_seconds,
        "first_batch_s": first_s,
        "rows_per_s": summary.rows_per_s,
        "steady_rows_per_s": steady,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--num-cpus", type=float, default=0.75)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="torch threads of the bare encoder")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    info = machine_info(("torch", "ray", "sentence-transformers"))
    for key, value in info.items():
        print(f"{key:>8}: {value}")
    with tempfile.TemporaryDirectory(prefix="bench_ingest_") as tmp_name:
        tmp = Path(tmp_name)
        pairs = bench_rows(args.rows, args.seed, tmp)
        chars = sum(len(p.text()) for p in pairs) / len(pairs)
        users = len({p.user_id for p in pairs})
        print(f"    rows: {len(pairs)} LongMemEval-format turn-pairs of {users} users, "
              f"{chars:.0f} characters on average")
        print(f"    load: {load_average()} (1/5/15 min) before")
        b = bare(pairs, args.threads, tmp / "bare.db")
        print(f"    load: {load_average()} after the bare runs")
        p = pipeline(pairs, args, tmp)
        print(f"    load: {load_average()} after the pipeline")

    n = len(pairs)
    encode_rate = n / b["encode_s"]
    rows = [
        (f"bare encode ({args.threads} torch threads)", b["encode_s"], encode_rate),
        ("bare encode + write (Milvus Lite)", b["encode_write_s"], n / b["encode_write_s"]),
        (
            f"ray pipeline, wall ({args.concurrency} actors x {args.num_cpus:g} CPU)",
            p["pipeline_s"],
            p["rows_per_s"],
        ),
        (
            f"ray pipeline, steady (after first batch at {p['first_batch_s']:.1f} s)",
            p["pipeline_s"] - p["first_batch_s"],
            p["steady_rows_per_s"],
        ),
    ]
    print()
    print("| measurement | seconds | rows/s | vs bare encode |")
    print("|---|---:|---:|---:|")
    for name, seconds, rate in rows:
        print(f"| {name} | {seconds:.1f} | {rate:.0f} | {rate / encode_rate:.2f} |")
    print()
    print(f"bare model load {b['load_s']:.1f} s; ray.init {p['ray_init_s']:.1f} s (in no rate)")
    sys.stdout.flush()

if __name__ == "__main__":
    main()
