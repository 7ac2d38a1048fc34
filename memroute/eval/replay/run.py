"""The replay job's body: build the parts, replay the trace through every strategy, report.

Each strategy starts from empty memory (its own Milvus Lite file in the run folder) and sees the
same requests in the same order; the model tiers are loaded once and shared. A run folder holds
``rows.jsonl`` (the checkpoint: one row per answered request), ``config.json`` and, at the end,
``rows.parquet``, the report and its plots. ``run_id=<folder>`` resumes a killed run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import polars as pl

from memroute import build
from memroute.config.replay import ReplayConfig, check_replay_config
from memroute.config.schema import is_server_uri, ordered_cascade
from memroute.config.summary import SummaryConfig
from memroute.errors import ConfigError
from memroute.eval.replay.driver import Checkpoint, Row, replay_strategy
from memroute.eval.replay.facts import replay_facts
from memroute.eval.replay.outcome import TierPrice
from memroute.eval.replay.progress import Progress
from memroute.eval.replay.strategies import (
    STRATEGIES,
    ShadowRecorder,
    StrategyParts,
    needs_facts,
    needs_memory,
    needs_summary,
)
from memroute.eval.report import new_run_dir
from memroute.memory.summary import Compactor, SummaryMemory
from memroute.tracking.mlflow_tracking import Tracker, flatten

CHECKPOINT = "rows.jsonl"
SHADOW = "shadow.jsonl"  # every tier alone on a sampled share (calibration, jobs.calibrate)


@dataclass
class ReplayOutput:
    run_dir: Path
    rows: pl.DataFrame
    report: str
    run_id: str | None


def resolve_run_dir(cfg: ReplayConfig) -> Path:
    if cfg.run_id is None:
        return new_run_dir(cfg.output_dir)
    path = Path(cfg.output_dir) / cfg.run_id
    if not (path / "config.json").is_file():
        raise ConfigError(f"run_id {cfg.run_id!r}: no replay run at {path}", field="run_id")
    return path


def load_requests(cfg: ReplayConfig, run_dir: Path) -> list:
    from memroute.datasets.replay_trace import load_trace

    trace = cfg.trace
    if trace is None:  # resuming: the trace the run was started with
        trace = json.loads((run_dir / "config.json").read_text())["trace"]
    path = Path(str(trace)).expanduser()
    if not path.is_file():
        raise ConfigError(f"trace {str(path)!r} does not exist", field="trace")
    requests = load_trace(path)
    return requests if cfg.limit is None else requests[: cfg.limit]


def prices(models: Sequence[Any]) -> list[TierPrice]:
    return [TierPrice(m.params_b, m.price_as_params_b or m.params_b, m.usd_per_m_input,
                      m.usd_per_m_output, m.cached_input_discount) for m in models]


def memory_uri(cfg: ReplayConfig, run_dir: Path, strategy: str) -> str:
    """Where a strategy's memory lives: a Milvus Lite file per strategy in the run folder."""
    return cfg.memory.uri if is_server_uri(cfg.memory.uri) else str(run_dir / f"milvus_{strategy}.db")


HttpRunner = Callable[[ReplayConfig, list[TierPrice], list, Checkpoint, Path], dict[str, float]]


def run_replay(cfg: ReplayConfig, *, progress: bool = True, run_dir: Path | None = None,
               http_runner: HttpRunner | None = None) -> ReplayOutput:
    """``run_dir``: a folder prepared by the caller (warm start); else new, or ``run_id``'s.
    ``http_runner``: how an http target is driven (the job passes Ray-sharded clients for
    ``shards > 1``); by default threads in this process."""
    from memroute.eval.replay.report import write_report

    check_replay_config(cfg)
    for name in cfg.strategies:
        STRATEGIES.get(name, field="strategies")
    models = ordered_cascade(cfg.cascade)
    fresh = run_dir is not None or cfg.run_id is None
    run_dir = run_dir or resolve_run_dir(cfg)
    requests = load_requests(cfg, run_dir)
    if fresh:
        (run_dir / "config.json").write_text(json.dumps(flatten(cfg), indent=1, default=str))
    checkpoint = Checkpoint(run_dir / CHECKPOINT)
    users = len({(r.tenant, r.user_id) for r in requests})
    resumed = len(checkpoint.done)
    print(f"replay {run_dir.name}: {len(requests)} requests, {users} users, strategies "
          f"{', '.join(cfg.strategies)}" + (f" ({resumed} rows already done)" if resumed else ""))

    started = time.time()
    if cfg.target == "inprocess":
        timings = _replay_in_process(cfg, models, requests, checkpoint, run_dir, progress)
    else:
        from memroute.eval.replay.http_target import replay_http

        timings = {"memroute": {}}
        if http_runner is not None:
            timings["memroute"] = http_runner(cfg, prices(models), requests, checkpoint, run_dir)
        else:
            replay_http(cfg, prices(models), requests, checkpoint, run=run_dir.name,
                        progress=progress, timing=timings["memroute"])
    (run_dir / "timings.json").write_text(json.dumps(timings, indent=1))
    rows = checkpoint.frame()
    rows.write_parquet(run_dir / "rows.parquet")
    report, files = write_report(rows, run_dir, window=cfg.window, volumes=cfg.volumes or None,
                                 strategies=cfg.strategies, timings=timings)
    tracker = Tracker(cfg.tracking)
    with tracker.run(f"replay-{Path(str(cfg.trace or run_dir.name)).stem}", tags={"job": "replay"}):
        tracker.log_params(flatten(cfg))
        for name, value in _headline(rows).items():
            tracker.log_metrics({name: value})
        for f in ["rows.parquet", "config.json", "timings.json", *files]:
            tracker.log_artifact(run_dir / f)
    print(report)
    print(f"\nresults: {run_dir} ({time.time() - started:.0f}s)")
    if tracker.run_id:
        print(f"MLflow run id: {tracker.run_id} (tracking uri {cfg.tracking.tracking_uri})")
    return ReplayOutput(run_dir, rows, report, tracker.run_id)


def _replay_in_process(cfg: ReplayConfig, models: list, requests: list, checkpoint: Checkpoint,
                       run_dir: Path, progress: bool) -> dict[str, dict[str, float]]:
    """Every strategy in turn; returns each one's timing (see ``replay_strategy``)."""
    timings: dict[str, dict[str, float]] = {}
    assets = build.asset_store(cfg.assets)
    encoder = build.encoder(cfg.embedder, assets)
    tiers = build.tiers(models, assets, on_ready=build.say_ready)
    bar = Progress(len(requests) * len(cfg.strategies), len(checkpoint.done), enabled=progress)
    try:
        for name in cfg.strategies:
            memory, facts, trees, trees_file = None, None, None, None
            if needs_summary(name):  # compacted by summary.tier; kept beside the checkpoint
                trees_file = run_dir / f"summary_trees.{name}.json"
                trees = summary_memory(cfg.summary, tiers, trees_file)
            elif needs_memory(name):
                memory_cfg = replace(cfg.memory, uri=memory_uri(cfg, run_dir, name))
                memory = build.memory(cfg.embedder, memory_cfg, cfg.retrieval, assets, enc=encoder)
                _restore_memories(memory, list(checkpoint.iter_rows(name)))
            retriever = memory.retriever if memory else None
            if needs_facts(name):  # extraction by extraction.tier, as in serving
                t = cfg.extraction.tier
                facts = replay_facts(cfg.extraction, tiers[t].backend, run_dir, encoder=encoder,
                                     tier=t)
                retriever = facts.feeding(retriever)
            parts = StrategyParts(tiers, prices(models), cfg.router, cfg.retrieval, retriever,
                                  encoder=encoder.encode, cache_threshold=cfg.cache_threshold,
                                  facts=facts.store if facts else None,
                                  session_history=cfg.session_history,
                                  summary=trees, summary_file=trees_file)
            strategy = STRATEGIES.get(name)(name, parts)
            if facts is not None:  # each row says which tier extracted (driver._row)
                strategy.row_fields = facts.row_fields()
            shadow = ShadowRecorder(parts, cfg.shadow_share) if name == "memroute" and cfg.shadow_share else None
            bar.start(name)
            timings[name] = {}
            try:
                replay_strategy(strategy, requests, checkpoint, concurrency=cfg.concurrency,
                                on_wave=bar.update, shadow=shadow,
                                shadow_log=Checkpoint(run_dir / SHADOW) if shadow else None,
                                timing=timings[name])
            finally:
                if trees is not None:
                    print(f"{name}: summary trees {trees.stats()}")
                if facts is not None:
                    print(f"{name}: fact extraction {facts.stats()}")
                    facts.close()
                if memory is not None:
                    memory.store.flush()
                    memory.close()
    finally:
        bar.close()
        for t in tiers:
            t.backend.close()
    return timings


def summary_memory(cfg: SummaryConfig, tiers: list, path: Path) -> SummaryMemory:
    """memroute_summary's trees, compacted by tier ``cfg.tier``; a resumed run loads its own."""
    t = tiers[cfg.tier]
    memory = SummaryMemory(cfg, Compactor(t.backend, t.pricing, tier=cfg.tier,
                                          node_tokens=cfg.node_tokens))
    if path.exists():
        memory.load(path)
    return memory


def _restore_memories(memory: build.MemoryParts, rows: list[Row]) -> None:
    """A killed run's last writes may not have reached the Milvus Lite file: re-store the
    answered turn-pairs the checkpoint holds that the store lacks (ids are deterministic)."""
    from memroute.types import TurnPair

    if not rows:
        return
    pairs = [TurnPair(r["user_id"], r["session_id"], int(r["seq"]), r["query"], r["answer"],
                      int(r["ts"]), r["model"]) for r in rows]
    by_user: dict[str, list[TurnPair]] = {}
    for p in pairs:
        by_user.setdefault(p.user_id, []).append(p)
    missing = []
    for user, ps in by_user.items():
        have = memory.store.existing_ids(user, [p.id for p in ps])
        missing += [p for p in ps if p.id not in have]
    if missing:
        memory.retriever.remember(missing)
        memory.store.flush()
        print(f"restored {len(missing)} turn-pairs the killed run had not flushed")


def _headline(rows: pl.DataFrame) -> dict[str, float]:
    out: dict[str, float] = {}
    value = (pl.col("value_hit").cast(pl.Float64).mean() if "value_hit" in rows.columns
             else pl.lit(None, dtype=pl.Float64)).alias("value_hit")
    for r in rows.group_by("strategy").agg(
        pl.col("escalated").mean().alias("escalation_rate"),
        pl.col("eff_cost").mean().alias("eff_cost"),
        pl.col("eff_cost_prod").mean().alias("eff_cost_prod"),
        pl.col("f1").mean().alias("f1"),
        value,
    ).iter_rows(named=True):
        for k in ("escalation_rate", "eff_cost", "eff_cost_prod", "f1", "value_hit"):
            if r[k] is not None:
                out[f"{r['strategy']}.{k}"] = float(r[k])
    return out
