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
    """Append-only JSON Lines of rows, and the set of (strategy, request_id) already done.

    Only ``done`` stays in memory: the rows are read back from the file when asked for, so a
    100,000-request replay does not hold half a million rows as Python dicts (docs/BENCHMARKS.md:
    3.6 GB for the report that way, 0.5 GB from the file). A line cut by a kill mid-write is
    dropped on load, and the file rewritten without it, so rows appended after a resume are
    never hidden behind it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.done: set[tuple[str, str]] = set()
        if not path.exists():
            return
        cut = False
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                row = _parse(line)
                if row is None:
                    cut = cut or bool(line.strip())  # a line cut by the kill: its wave is redone
                    continue
                self.done.add((row["strategy"], row["request_id"]))
        if cut:
            self._drop_cut_lines()

    def _drop_cut_lines(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        with self.path.open(encoding="utf-8") as src, tmp.open("w", encoding="utf-8") as dst:
            for line in src:
                if _parse(line) is not None:
                    dst.write(line if line.endswith("\n") else line + "\n")
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(tmp, self.path)

    def append(self, rows: Sequence[Row]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        for row in rows:
            self.done.add((row["strategy"], row["request_id"]))

    def iter_rows(self, strategy: str | None = None) -> Iterator[Row]:
        """The recorded rows in file order (one strategy's, or all), parsed as they are read."""
        if not self.path.exists():
            return
        with self.path.open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    row = json.loads(line)
                    if strategy is None or row["strategy"] == strategy:
                        yield row

    @property
    def rows(self) -> list[Row]:
        return list(self.iter_rows())

    def frame(self) -> Any:
        """All rows as a polars DataFrame, read columnar from the file."""
        import polars as pl

        if not self.path.exists() or self.path.stat().st_size == 0:
            return pl.DataFrame()
        return pl.read_ndjson(self.path, infer_schema_length=None)


def _parse(line: str) -> Row | None:
    if not line.strip():
        return None
    try:
        return json.loads(line)
    except ValueError:
        return None


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
    earlier = {r["request_id"]: r for r in checkpoint.iter_rows(strategy.name)}
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
    return list(checkpoint.iter_rows(strategy.name))


def _row(strategy: Strategy, seq: int, req: TraceRequest, o: Outcome, book: EvidenceBook,
         wall_s: float) -> Row:
    user = namespace(req.tenant, req.user_id)
    s = book.score(seq, req, user, o.answer, o.memory_ids, measured=strategy.stores_memory)
    out = asdict(o)
    out.update(
        strategy=strategy.name, seq=seq, request_id=req.request_id, ts=req.ts, user_id=user,
        session_id=req.session_id, query=req.query, kind=req.kind, domain=req.domain,
        fact_id=req.fact_id, memories=len(o.memory_ids), f1=s.f1, stale=s.stale,
        evidence_hit=s.evidence_hit, value_hit=s.value, wall_s=wall_s,
    )
    out.update(getattr(strategy, "row_fields", None) or {})  # memroute_facts: extraction_tier
    return out
