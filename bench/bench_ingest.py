"""Ingest throughput: the Ray Data pipeline vs the bare encoder, on the same rows, in one run.

    python bench/bench_ingest.py [--rows 4000] [--concurrency 2] [--num-cpus 0.75]
                                 [--threads 2] [--batch-size 256] [--seed 0] [--repeat 1]
                                 [--pipeline pipelines.ingest] [--idle-below 0.5]

Rows are turn-pairs of the generated LongMemEval set (default preset: 40-50 sessions per
question), first ``--rows`` of them. Each side runs in its own fresh Python process, one after
the other, so each pays its own imports and model loads and neither inherits the other's
(torch, sentence-transformers, Milvus Lite, Ray):
  bare      import sentence-transformers + load MiniLM (--threads torch threads), encode all
            rows in one call, then upsert the vectors in batches of 500 into a fresh Milvus
            Lite file and flush (a sequential ingest)
  ray       import ray, ray.init (a local loopback node), then pipelines.ingest.ingest_pairs:
            open the store, plan, embedding actor pool (--concurrency x --num-cpus, 1 torch
            thread each, MiniLM loaded in every actor), driver writes, flush
Two bases, the same for both sides:
  end to end  from the first import of the side's heavy packages to the last row encoded
              (bare) or stored and flushed (ray): model load and actor start-up included;
              ray.init is shown apart and the ray ratio is given with and without it
  steady      model loaded: bare = the encode call alone; ray = after the first written block
A linear projection (fixed cost + rows / steady rate, both sides from this run) gives the row
count from which the end-to-end ratio reaches 0.9.

The machine is shared: other work slows the bare encoder most (2 torch threads stall when one
of them is preempted; 1-thread actors do not), so each side waits for an idle machine first
(--idle-below), the load is printed beside the numbers, and --repeat N ends with each side's
quickest run (the least disturbed one).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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

RESULT = "BENCH_RESULT "
TARGET = 0.9  # issue 3: ingest throughput >= 0.9x the bare encoder's


def load_average() -> str:
    """Other work on the machine moves every number here: print it next to them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def busy_cores(seconds: float = 2.0) -> float:
    """Cores busy (all processes) over the next ``seconds``."""
    busy0, total0 = cpu_ticks()
    time.sleep(seconds)
    busy1, total1 = cpu_ticks()
    return (os.cpu_count() or 1) * (busy1 - busy0) / max(1, total1 - total0)


def wait_idle(max_busy: float, timeout: float) -> float:
    """Wait until other work leaves the machine (at most ``timeout`` s); the last reading."""
    deadline = time.monotonic() + timeout
    busy = busy_cores()
    while busy > max_busy and time.monotonic() < deadline:
        busy = busy_cores()
    return busy


def tree_cpu(root: int) -> float:
    """CPU seconds used so far by ``root`` and every live process below it (Ray's raylet,
    workers and actors are descendants of the driver that started the node)."""
    ticks = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    used: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        pid = int(stat.parent.name)
        parent[pid] = int(fields[1])
        used[pid] = (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
    below, frontier = {root}, [root]
    while frontier:
        node = frontier.pop()
        for pid, ppid in parent.items():
            if ppid == node and pid not in below:
                below.add(pid)
                frontier.append(pid)
    return sum(used.get(pid, 0.0) for pid in below)


def bench_rows(n: int, seed: int, work: Path) -> list[TurnPair]:
    from memroute.datasets import lme_turn_pairs, load_longmemeval
    from memroute.datasets.generate.longmemeval import generate_longmemeval, write_json

    questions = 10
    while True:  # ~160 pairs per question in the default preset: grow until there are enough
        records = generate_longmemeval(num_questions=questions, seed=seed)
        path = write_json(records, work / "lme.json")
        pairs = [r.pair for q in load_longmemeval(path) for r in lme_turn_pairs(q)]
        if len(pairs) >= n:
            return pairs[:n]
        questions = int(questions * n / max(1, len(pairs))) + 2


# ---------------------------------------------------------------- the two sides (child processes)
def side_bare(pairs: list[TurnPair], args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    t0 = time.perf_counter()
    from memroute.embedding import build_encoder

    encoder = build_encoder(EmbedderConfig(num_threads=args.threads))
    encoder.encode(["warm up"])
    load = time.perf_counter() - t0
    texts = [p.text() for p in pairs]

    t1 = time.perf_counter()
    vectors = encoder.encode(texts)
    encode_s = time.perf_counter() - t1

    t2 = time.perf_counter()
    from memroute.memory import MilvusMemoryStore

    with MilvusMemoryStore(MemoryConfig(uri=str(tmp / "bare.db")), encoder.dim) as store:
        for start in range(0, len(pairs), 500):
            store.upsert(pairs[start : start + 500], vectors[start : start + 500])
        store.flush()
        stored = store.count()
    assert stored == len(pairs), (stored, len(pairs))
    return {
        "load_s": load,
        "encode_s": encode_s,
        "write_s": time.perf_counter() - t2,
        "cpu_s": tree_cpu(os.getpid()),
    }


def side_ray(pairs: list[TurnPair], args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    from jobs.ingest import LazyRay  # job plumbing (hydra), not part of either side's cost

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

    t0 = time.perf_counter()
    import importlib

    import ray  # noqa: F401

    ingest_pairs = importlib.import_module(args.pipeline).ingest_pairs
    import_s = time.perf_counter() - t0
    lazy = LazyRay(cfg.ray)
    t1 = time.perf_counter()
    lazy.ensure()
    ray_init = time.perf_counter() - t1
    try:
        t2 = time.perf_counter()
        summary = ingest_pairs(pairs, cfg)
        ingest_s = time.perf_counter() - t2
        cpu_s = tree_cpu(os.getpid())  # before shutdown: the workers are still alive
    finally:
        t3 = time.perf_counter()
        lazy.close()
        shutdown_s = time.perf_counter() - t3
    assert summary.written == len(pairs) and summary.errors == 0, summary.line()
    from memroute.ingest import num_blocks

    block_rows = -(-len(pairs) // num_blocks(cfg, len(pairs)))  # the largest block
    first_rows = min(cfg.write.batch_size, block_rows)
    return {
        "import_s": import_s,
        "ray_init_s": ray_init,
        "ingest_s": ingest_s,  # store open + plan + pipeline + flush
        "pipeline_s": summary.pipeline_seconds,
        "first_batch_s": summary.first_batch_seconds or 0.0,
        "first_rows": first_rows,
        "shutdown_s": shutdown_s,
        "cpu_s": cpu_s,
    }


def child(args: argparse.Namespace) -> None:
    tmp = Path(args.work)
    with open(tmp.parent / "pairs.pkl", "rb") as f:
        pairs = pickle.load(f)
    run = side_bare if args.side == "bare" else side_ray
    out = run(pairs, args, tmp)
    print(RESULT + json.dumps(out), flush=True)


# ---------------------------------------------------------------- the parent: run, compare, report
def run_side(side: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--side", side, "--work", str(tmp)]
    for name in ("rows", "concurrency", "num_cpus", "threads", "batch_size", "seed", "pipeline"):
        cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    idle_before = wait_idle(args.idle_below, args.idle_wait) if args.idle_below else None
    load_before = os.getloadavg()[0]
    busy0, total0 = cpu_ticks()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    busy1, total1 = cpu_ticks()
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-6000:])
        raise SystemExit(f"the {side} side failed (exit {proc.returncode})")
    out = json.loads(lines[-1][len(RESULT) :])
    ncpu = os.cpu_count() or 1
    out["busy_cores"] = ncpu * (busy1 - busy0) / max(1, total1 - total0)
    out["busy_before"] = idle_before
    out["load_before"] = load_before
    out["process_s"] = wall
    return out


def crossover(fixed_b: float, rate_b: float, fixed_r: float, rate_r: float) -> float | None:
    """Rows n where (fixed_b + n/rate_b) / (fixed_r + n/rate_r) = TARGET; None if never."""
    slope = 1 / rate_b - TARGET / rate_r
    if slope <= 0:
        return None
    return max(0.0, (TARGET * fixed_r - fixed_b) / slope)


def report(n: int, b: dict[str, Any], r: dict[str, Any], args: argparse.Namespace) -> None:
    bare_e2e = b["load_s"] + b["encode_s"]
    bare_write_e2e = bare_e2e + b["write_s"]
    ray_e2e = r["import_s"] + r["ingest_s"]  # without ray.init
    ray_e2e_init = ray_e2e + r["ray_init_s"]
    bare_rate = n / b["encode_s"]
    steady_s = r["pipeline_s"] - r["first_batch_s"]
    ray_rate = (n - r["first_rows"]) / max(1e-9, steady_s)
    bare_name = f"bare encoder: load + encode ({args.threads} torch threads)"
    rows = [
        ("end to end", bare_name, bare_e2e, bare_e2e),
        ("end to end", "bare encoder + write to Milvus Lite", bare_write_e2e, bare_e2e),
        ("end to end", f"ray pipeline without ray.init ({args.concurrency} actors x "
                       f"{args.num_cpus:g} CPU, 1 thread)", ray_e2e, bare_e2e),
        ("end to end", "ray pipeline with ray.init", ray_e2e_init, bare_e2e),
        ("steady", "bare encoder: encode call, model loaded", b["encode_s"], b["encode_s"]),
        ("steady", "bare encoder + write", b["encode_s"] + b["write_s"], b["encode_s"]),
        ("steady", f"ray pipeline after the first written block ({r['first_batch_s']:.1f} s)",
         steady_s, None),
    ]
    print()
    print("| basis | measurement | seconds | rows/s | vs bare encoder |")
    print("|---|---|---:|---:|---:|")
    for basis, name, seconds, ref in rows:
        if ref is None:  # the steady ray rate leaves out the first block's rows
            rate, ratio = ray_rate, ray_rate / bare_rate
        else:
            rate, ratio = n / seconds, ref / seconds
        print(f"| {basis} | {name} | {seconds:.1f} | {rate:.0f} | {ratio:.2f} |")
    print()
    print(
        f"bare: model load (import + load + warm-up) {b['load_s']:.1f} s, "
        f"encode {b['encode_s']:.1f} s, write+flush {b['write_s']:.1f} s"
    )
    print(
        f"ray:  import ray + pipeline module {r['import_s']:.1f} s, "
        f"ray.init {r['ray_init_s']:.1f} s, ingest_pairs {r['ingest_s']:.1f} s "
        f"(pipeline {r['pipeline_s']:.1f} s, first block written at {r['first_batch_s']:.1f} s), "
        f"ray.shutdown {r['shutdown_s']:.1f} s (in no number)"
    )
    for side, d in (("bare", b), ("ray", r)):
        before = "" if d["busy_before"] is None else f", {d['busy_before']:.2f} cores busy"
        print(f"machine during {side}: {d['busy_cores']:.2f} of {os.cpu_count()} cores busy "
              f"(all processes); before: load {d['load_before']:.2f}{before}; its processes used "
              f"{d['cpu_s']:.0f} CPU-s (whole side, writes included; ray: up to shutdown)")
    fixed_b = bare_e2e - n / bare_rate
    for label, total in (("without", ray_e2e), ("with", ray_e2e_init)):
        fixed_r = total - n / ray_rate
        n_star = crossover(fixed_b, bare_rate, fixed_r, ray_rate)
        where = "never (steady rate too low)" if n_star is None else f"~{n_star:,.0f} rows"
        print(f"projection {label} ray.init: fixed {fixed_r:.1f} s vs bare {fixed_b:.1f} s; "
              f"end-to-end ratio {TARGET} from {where}")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--num-cpus", type=float, default=0.75)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="torch threads of the bare encoder")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1, help="bare/ray pairs to run")
    parser.add_argument("--pipeline", default="pipelines.ingest",
                        help="module whose ingest_pairs runs (A/B runs against another version; "
                             "its folder must be on PYTHONPATH, which Ray's workers inherit)")
    parser.add_argument("--idle-below", type=float, default=0.5,
                        help="before each side, wait until fewer cores than this are busy "
                             "(0: do not wait)")
    parser.add_argument("--idle-wait", type=float, default=300,
                        help="longest wait for an idle machine, seconds")
    parser.add_argument("--side", choices=("bare", "ray"), help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        child(args)
        return

    info = machine_info(("torch", "ray", "sentence-transformers"))
    for key, value in info.items():
        print(f"{key:>8}: {value}")
    with tempfile.TemporaryDirectory(prefix="bench_ingest_") as tmp_name:
        tmp = Path(tmp_name)
        pairs = bench_rows(args.rows, args.seed, tmp)
        with open(tmp / "pairs.pkl", "wb") as f:
            pickle.dump(pairs, f)
        chars = sum(len(p.text()) for p in pairs) / len(pairs)
        users = len({p.user_id for p in pairs})
        print(f"    rows: {len(pairs)} LongMemEval-format turn-pairs of {users} users, "
              f"{chars:.0f} characters on average")
        bares, rays = [], []
        for i in range(args.repeat):
            run_dir = tmp / f"run{i}"  # fresh Milvus Lite files for every run
            run_dir.mkdir()
            bares.append(run_side("bare", args, run_dir))
            rays.append(run_side("ray", args, run_dir))
            shutil.rmtree(run_dir, ignore_errors=True)
            if args.repeat > 1:
                print(f"\nrun {i + 1} of {args.repeat}")
            report(len(pairs), bares[-1], rays[-1], args)
    if args.repeat > 1:
        # Other work on a shared machine only ever slows a run down: the quickest run of each
        # side is the least disturbed one.
        print(f"\nbest of {args.repeat} (each side's quickest end-to-end run)")
        b = min(bares, key=lambda d: d["load_s"] + d["encode_s"])
        r = min(rays, key=lambda d: d["import_s"] + d["ingest_s"])
        report(len(pairs), b, r, args)


if __name__ == "__main__":
    main()
