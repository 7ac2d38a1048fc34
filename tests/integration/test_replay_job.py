"""The replay job end to end on mock tiers with the real parts around them (MiniLM, Milvus Lite,
the report, MLflow off): every strategy replays the same trace, memory lowers memroute's
escalations over the trace, the report and plots are written, and a resumed run sends nothing
twice. Then calibration on the run's shadow samples."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from memroute.datasets.records import TraceRequest
from memroute.datasets.replay_trace import write_trace
from memroute.types import Message

ROOT = Path(__file__).resolve().parents[2]
USERS = ["alice", "bob", "carol", "dave"]


def trace_file(tmp: Path, rounds: int = 5) -> Path:
    """Each user states a code, then asks about it ``rounds`` times (a repeat each time)."""
    rows: list[TraceRequest] = []
    ts = 1_700_000_000.0

    def add(user: str, text: str, kind: str, refs: tuple[str, ...] = ()) -> None:
        nonlocal ts
        ts += 60
        rows.append(TraceRequest(f"r{len(rows):04d}", ts, "acme", user, f"{user}-d1",
                                 (Message("user", text),), refs, kind=kind, fact_id=f"{user}-code",
                                 domain="personal"))

    for u in USERS:
        add(u, f"My locker code is ZX-{len(u)}471.", "statement")
    for k in range(rounds):
        for u in USERS:
            add(u, "What is my locker code?", "novel" if k == 0 else "repeat", (f"ZX-{len(u)}471",))
    path = tmp / "trace.jsonl"
    write_trace(rows, path)
    return path


def replay(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "jobs.replay", "+experiment=replay_mock", f"output_dir={tmp / 'runs'}",
           f"hydra.run.dir={tmp / 'hydra'}", "window=8", "concurrency=4", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replay")
    proc = replay(tmp, f"trace={trace_file(tmp)}", "shadow_share=1.0")
    assert proc.returncode == 0, proc.stderr[-4000:]
    run_dir = next((tmp / "runs").iterdir())
    return tmp, run_dir, proc


def test_every_strategy_replays_the_same_requests(run):
    _, run_dir, _ = run
    rows = pl.read_parquet(run_dir / "rows.parquet")
    per = rows.group_by("strategy").agg(pl.col("request_id").n_unique().alias("n"), pl.len().alias("rows"))
    assert set(per["strategy"]) == {"memroute", "always_large", "always_small", "cascade_no_memory",
                                    "semantic_cache"}
    assert set(per["n"]) == set(per["rows"]) == {24}


def test_memory_lowers_memroutes_escalations_over_the_trace(run):
    _, run_dir, proc = run
    rows = pl.read_parquet(run_dir / "rows.parquet").filter(pl.col("strategy") == "memroute").sort("seq")
    first, last = rows.head(8), rows.tail(8)
    assert first["escalated"].mean() > last["escalated"].mean()
    assert last["eff_cost"].mean() < first["eff_cost"].mean()
    questions = rows.filter(pl.col("kind") != "statement")
    assert questions["evidence_hit"].drop_nulls().mean() > 0.5  # the statement is retrieved
    report = (run_dir / "report.md").read_text()
    assert "Break-even" in report and "First and last window" in report and "driver overhead" in report
    timings = json.loads((run_dir / "timings.json").read_text())
    assert set(timings) == {"memroute", "always_large", "always_small", "cascade_no_memory", "semantic_cache"}
    assert all(t["answer_s"] <= t["total_s"] for t in timings.values())
    assert (run_dir / "amortization.png").stat().st_size > 10_000
    assert "memroute" in proc.stdout


def test_a_resumed_run_sends_nothing_again(run):
    tmp, run_dir, _ = run
    before = (run_dir / "rows.jsonl").read_text().count("\n")
    proc = replay(tmp, f"run_id={run_dir.name}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (run_dir / "rows.jsonl").read_text().count("\n") == before  # all done: nothing re-sent


def test_calibration_from_the_shadow_samples(run):
    tmp, run_dir, _ = run
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.calibrate", f"run_dir={run_dir}", "correct=value",
         f"hydra.run.dir={tmp / 'hydra'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "held out" in proc.stdout and "router.tau=" in proc.stdout
    assert "not holding a reference's value" in proc.stdout  # correct=value: the shadow rows
    assert (run_dir / "router_override.yaml").is_file()


def test_a_bad_setting_is_one_line(tmp_path):
    proc = replay(tmp_path, f"trace={tmp_path / 'missing.jsonl'}")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"error [trace]: trace '{tmp_path / 'missing.jsonl'}' does not exist"]
