"""Time and peak memory of the replay report at 100,000 requests per strategy.

Running five strategies over a 100,000-request trace takes days on CPU, so the per-request rows
are synthesised: a finished replay's rows (``--rows``, any run's rows.jsonl) are repeated, with
fresh ``seq`` / ``request_id`` values, up to ``--requests`` per strategy. Each step runs in its
own child process so its peak RSS (``ru_maxrss``, which counts polars' native memory, unlike
``tracemalloc``) is its own; an imports-only child gives the floor.

    .venv/bin/python bench/bench_replay_report.py --rows .memroute/replays/<run>/rows.jsonl
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEPS = {
    "imports only": "import polars, matplotlib; from memroute.eval.replay import report, driver",
    # before: the checkpoint's rows as Python dicts -> DataFrame -> Parquet -> report
    "row dicts -> report (before)": """
import json, polars as pl
from pathlib import Path
from memroute.eval.replay.report import write_report
run = Path(RUN)
rows = [json.loads(line) for line in (run / "rows.jsonl").open()]
frame = pl.DataFrame(rows, infer_schema_length=None)
frame.write_parquet(run / "rows.parquet")
write_report(frame, run, window=WINDOW)
""",
    # what run_replay does now after the last request: the checkpoint file read by polars
    "checkpoint file -> report (now)": """
from pathlib import Path
from memroute.eval.replay.driver import Checkpoint
from memroute.eval.replay.report import write_report
run = Path(RUN)
frame = Checkpoint(run / "rows.jsonl").frame()
frame.write_parquet(run / "rows.parquet")
write_report(frame, run, window=WINDOW)
""",
    "rows.parquet -> report": """
import polars as pl
from pathlib import Path
from memroute.eval.replay.report import write_report
run = Path(RUN)
write_report(pl.read_parquet(run / "rows.parquet"), run, window=WINDOW)
""",
}


def synthesise(source: Path, out: Path, requests: int) -> int:
    base = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    per: dict[str, list[dict]] = {}
    for r in base:
        per.setdefault(r["strategy"], []).append(r)
    n = 0
    with out.open("w") as fh:
        for strategy, rows in per.items():
            for seq in range(requests):
                row = dict(rows[seq % len(rows)])
                row.update(seq=seq, request_id=f"r{seq:07d}", strategy=strategy)
                fh.write(json.dumps(row) + "\n")
                n += 1
    return n


def run_step(code: str) -> tuple[float, float]:
    """(wall s, peak RSS MB) of ``code`` in a fresh interpreter (it reports its own ru_maxrss)."""
    tail = "\nimport resource\nprint('PEAK_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code + tail], check=True, capture_output=True, text=True)
    wall = time.perf_counter() - started
    peak_kb = int(next(ln for ln in out.stdout.splitlines() if ln.startswith("PEAK_KB")).split()[1])
    return wall, peak_kb / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=Path, required=True, help="a finished replay's rows.jsonl")
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--window", type=int, default=5_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        t0 = time.perf_counter()
        n = synthesise(args.rows, run / "rows.jsonl", args.requests)
        size = (run / "rows.jsonl").stat().st_size / 1e6
        print(f"{n:,} rows ({args.requests:,} requests x {n // args.requests} strategies), "
              f"{size:.0f} MB JSONL, synthesised in {time.perf_counter() - t0:.1f} s")
        print("| step | wall s | peak RSS MB |\n|---|---|---|")
        for name, code in STEPS.items():
            wall, peak = run_step(code.replace("RUN", repr(str(run))).replace("WINDOW", str(args.window)))
            print(f"| {name} | {wall:.1f} | {peak:,.0f} |")


if __name__ == "__main__":
    main()
