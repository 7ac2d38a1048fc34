"""Send a trace through one strategy in trace order and record one row per request.

Concurrency is by user, as in production: a *wave* is the next run of requests of distinct users
(at most ``concurrency``); a user's requests never overtake each other, and each wave is one
batched call (one embedding call, one engine batch per tier). Rows are appended to the run's
checkpoint after every wave (fsync'd), so a killed replay resumes where it stopped: requests
already recorded are skipped, never sent twice.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from memroute.datasets.records import TraceRequest
from memroute.eval.replay.outcome import Outcome
from memroute.eval.replay.scoring import EvidenceBook
from memroute.eval.replay.strategies import ShadowRecorder, Strategy
from memroute.namespace import namespace

Row = dict[str, Any]


def waves(requests: Iterable[tuple[int, TraceRequest]], size: int) -> Iterator[list[tuple[int, TraceRequest]]]:
    """Consecutive requests of distinct users, at most ``size`` of them, in trace order."""
    wave: list[tuple[int, TraceRequest]] = []
    users: set[tuple[str, str]] = set()
    for seq, req in requests:
        who = (req.tenant, req.user_id)
        if len(wave) >= size or who in users:
            yield wave
            wave, users = [], set()
        wave.append((seq, req))
        users.add(who)
    if wave:
        yield wave


class Checkpoint:
    """Append-only JSON Lines of rows; the set of (strategy, request_id) already done."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.done: set[tuple[str, str]] = set()
        self.rows: list[Row] = []
        if path.exists():
            with path.open(encoding="utf-8") as fh:
                for line in fh:
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except ValueError:  # a line cut by the kill: its wave is redone
                        break
                    self.rows.append(row)
                    self.done.add((row["strategy"], row["request_id"]))

    def append(self, rows: Sequence[Row]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        for row in rows:
            self.rows.append(row)
            self.done.add((row["strategy"], row["request_id"]))


def replay_strategy(
    strategy: Strategy,
    trace: Sequence[TraceRequest],
    checkpoint: Checkpoint,
    *,
    concurrency: int = 8,
    on_wave: Callable[[list[Row]], None] | None = None,
    shadow: ShadowRecorder | None = None,
    shadow_log: Checkpoint | None = None,
    timing: dict[str, float] | None = None,
) -> list[Row]:
    """Replay ``trace`` through ``strategy``; returns this strategy's rows (resumed ones too).
    ``timing`` receives ``total_s`` (this call), ``answer_s`` (inside the strategy), ``shadow_s``
    and ``model_s`` (the model calls' own time), so the driver's overhead can be reported."""
    started = time.perf_counter()
    spent = {"answer_s": 0.0, "shadow_s": 0.0, "model_s": 0.0, "requests": 0.0}
    book = EvidenceBook()
    earlier = {r["request_id"]: r for r in checkpoint.rows if r["strategy"] == strategy.name}
    # Rows already done still feed the evidence book, in trace order, so scores match a run
    # that was never interrupted.
    todo: list[tuple[int, TraceRequest]] = []
    for seq, req in enumerate(trace):
        if req.request_id in earlier:
            r = earlier[req.request_id]
            book.score(seq, req, r["user_id"], r["answer"], r["memory_ids"], measured=False)
        else:
            todo.append((seq, req))
    for wave in waves(todo, concurrency):
        if shadow is not None and shadow_log is not None:
            t0 = time.perf_counter()
            shadow_log.append([{**r, "strategy": strategy.name} for r in shadow.record(wave)])
            spent["shadow_s"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        outcomes = strategy.answer_many(wave)
        wall = time.perf_counter() - t0
        spent["answer_s"] += wall
        # A reply's latency is its engine batch's, so the wave's model time is the slowest
        # request's (the probe batch, plus the escalation batch when there was one).
        spent["model_s"] += max((o.latency_s for o in outcomes), default=0.0)
        spent["requests"] += len(wave)
        rows = [
            _row(strategy, seq, req, o, book, wall / len(wave))
            for (seq, req), o in zip(wave, outcomes, strict=True)
        ]
        checkpoint.append(rows)
        if on_wave is not None:
            on_wave(rows)
    if timing is not None:
        timing.update(spent, total_s=time.perf_counter() - started)
    return [r for r in checkpoint.rows if r["strategy"] == strategy.name]


def _row(strategy: Strategy, seq: int, req: TraceRequest, o: Outcome, book: EvidenceBook,
         wall_s: float) -> Row:
    user = namespace(req.tenant, req.user_id)
    s = book.score(seq, req, user, o.answer, o.memory_ids, measured=strategy.stores_memory)
    out = asdict(o)
    out.update(
        strategy=strategy.name, seq=seq, request_id=req.request_id, ts=req.ts, user_id=user,
        session_id=req.session_id, query=req.query, kind=req.kind, domain=req.domain,
        fact_id=req.fact_id, memories=len(o.memory_ids), f1=s.f1, stale=s.stale,
        evidence_hit=s.evidence_hit, wall_s=wall_s,
    )
    return out
