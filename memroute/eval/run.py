"""Build the parts from a typed config and run the benchmark end to end (the main job's body)."""

from __future__ import annotations

import json
import logging
import platform
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import polars as pl

from memroute import build
from memroute.config import BenchmarkConfig
from memroute.config.fact_layer import fact_layer_fields
from memroute.config.schema import check_benchmark_config, is_server_uri, ordered_cascade
from memroute.config.units import UnitsConfig
from memroute.datasets.conversations import as_eval_conversation
from memroute.datasets.registry import dataset_conversations
from memroute.errors import ConfigError
from memroute.eval.benchmark import ConditionTiming, ingest, run_conditions
from memroute.eval.causes import CAUSES, WRONG_BELOW, add_causes
from memroute.eval.conditions import CONDITIONS
from memroute.eval.fact_layer import ExtractionStats, add_units, build_fact_layer, load_units
from memroute.eval.manifest import MANIFEST, build_manifest, write_manifest
from memroute.eval.plots import all_plots
from memroute.eval.report import calls_frame, new_run_dir, predictions_frame, tables, to_markdown
from memroute.eval.rescore import METRICS_FILE, tables_json
from memroute.eval.summary_run import add_compaction_costs, build_summary_memory, compaction_section
from memroute.retrieval.with_units import WithUnits
from memroute.tracking.mlflow_tracking import Tracker, flatten

log = logging.getLogger(__name__)

# The column the per-group F1 table is grouped by, and how the report names it.
GROUP_COLUMNS: dict[str, tuple[str, str]] = {
    "locomo": ("category", "category"),
    "synthetic": ("fact_type", "fact_type"),
    "longmemeval": ("fact_type", "question type (abstention: share abstained, LoCoMo category-5 rule)"),
}


# fact_layer table column -> MLflow metric suffix
FACT_METRICS = {"update_f1": "update F1", "temporal_f1": "temporal F1", "stale_pct": "stale %"}


@dataclass
class BenchmarkOutput:
    run_dir: Path
    predictions: pl.DataFrame
    summary: pl.DataFrame
    by_group: pl.DataFrame
    timings: list[ConditionTiming]
    run_id: str | None
    report: str
    causes: pl.DataFrame


def needed_tiers(conditions: Sequence[str], n_tiers: int) -> set[int]:
    """Indexes of the cascade tiers the named conditions call (unknown names raise ConfigError)."""
    return {
        i for name in conditions
        for i in CONDITIONS.get(name, field="conditions").tier_indexes(n_tiers)
    }


def run_benchmark(cfg: BenchmarkConfig, *, progress: bool = True) -> BenchmarkOutput:
    started = time.time()
    # a bad part is refused here, naming the field, before the dataset or a model loads
    models = ordered_cascade(check_benchmark_config(cfg).cascade)
    run_dir = new_run_dir(cfg.output_dir)
    conversations = dataset_conversations(cfg.dataset, run_dir)
    n_questions = sum(len(c.qa) for c in conversations)
    print(f"dataset {cfg.dataset.name}: {len(conversations)} users, {n_questions} questions")

    assets = build.asset_store(cfg.assets)
    # A fresh store per run: the measured memory is exactly the dataset's turn-pairs.
    memory_cfg = cfg.memory if is_server_uri(cfg.memory.uri) else replace(cfg.memory, uri=str(run_dir / "milvus.db"))
    memory = build.memory(cfg.embedder, memory_cfg, cfg.retrieval, assets)
    store, retriever = memory.store, memory.retriever
    dia = ingest(conversations, retriever)
    store.flush()
    print(f"memory: {store.count()} turn-pairs stored for {len(conversations)} users")

    tiers = []
    facts, fact_stats = None, None
    unit_index, with_units, trees = None, None, None
    try:
        # Only the tiers the selected conditions call are loaded (a capacity sweep on
        # warm_memory_only never loads the large model).
        chosen = [CONDITIONS.get(c, field="conditions") for c in cfg.conditions]
        want_units = any(c.units for c in chosen)
        want_layer = want_units or any(c.facts for c in chosen)
        want_trees = any(c.summary for c in chosen)
        load = needed_tiers(cfg.conditions, len(models))
        if want_trees:
            load.add(cfg.summary.tier)
        if want_layer:
            if not cfg.fact_layer.tier < len(models):
                raise ConfigError(f"fact_layer.tier {cfg.fact_layer.tier} is not a tier of the "
                                  f"{len(models)}-tier cascade", field="fact_layer.tier")
            load.add(cfg.fact_layer.tier)
        tiers = build.tiers(models, assets, load=load, on_ready=build.say_ready)
        if want_layer:
            # The fact layer: the first model extracts each user's facts (and, for the units
            # conditions, atomic units) once; cached on disk.
            layer_cfg = replace(cfg.fact_layer, units=cfg.fact_layer.units or want_units)
            facts, fact_stats = build_fact_layer(
                [as_eval_conversation(c) for c in conversations],
                tiers[cfg.fact_layer.tier].backend,
                fact_layer_fields(cfg.fact_layer, cfg.dataset.name), layer_cfg, run_dir,
                progress=progress)
            print(fact_stats.line())
        if want_units:
            unit_index = build.unit_index(UnitsConfig(), memory_cfg, cfg.retrieval,
                                          memory.encoder)
            add_units(unit_index, load_units(run_dir))
            with_units = WithUnits(retriever, unit_index, unit_k=cfg.fact_layer.unit_k,
                                   unit_weight=cfg.fact_layer.unit_weight)
        if want_trees:  # each user's sessions compacted by summary.tier, turn by turn
            trees = build_summary_memory(
                [as_eval_conversation(c) for c in conversations], tiers[cfg.summary.tier],
                cfg.summary, tier_index=cfg.summary.tier, batch_size=cfg.batch_size,
                progress=progress, run_dir=run_dir)
            print(f"summary trees: {trees.stats()}")
        rows, timings = run_conditions(
            conversations, tiers, retriever, cfg.router, cfg.retrieval, cfg.conditions,
            memory_dia_ids=dia, batch_size=cfg.batch_size, progress=progress,
            context_tokens=[m.max_model_len for m in models], facts=facts,
            units_retriever=with_units, summary_memory=trees,
        )
    finally:
        for t in tiers:
            t.backend.close()
        store.close()
        if unit_index is not None:
            unit_index.close()
        if facts is not None:
            facts.close()

    prod = {m.name: (m.price_as_params_b or m.params_b) for m in models}
    df = add_compaction_costs(predictions_frame(rows, prod), trees, prod)
    # LongMemEval questions have no LoCoMo category (null) except abstention (5): keep one type.
    df = add_causes(df.with_columns(pl.col("category").cast(pl.Int64)), WRONG_BELOW)
    group_col, group_label = GROUP_COLUMNS.get(cfg.dataset.name, ("category", "category"))
    tabs = tables(df, cfg.conditions, group_col)
    table, by_group = tabs["summary"], tabs["by_group"]
    timing_table = pl.DataFrame(
        [{"condition": t.condition, "wall_s": round(t.wall_s, 1), "generate_s": round(t.generate_s, 1),
          "s/q": round(t.wall_s / n_questions, 2) if n_questions else None,
          "router_overhead_%": round(100 * t.overhead_share, 1)} for t in timings]
    )
    pricing = ", ".join(f"{m.name} P={m.params_b}B (prod P={prod[m.name]}B)" for m in models)
    report = "\n\n".join([
        f"## memroute benchmark: {cfg.dataset.name}, {n_questions} questions, tau={cfg.router.tau}, "
        f"retrieval={cfg.retrieval.strategy}/{cfg.retrieval.fusion} top_k={cfg.retrieval.top_k}",
        f"EffCost = (in + 4*out) * P/8 with the stand-in sizes; EffCost@prod prices the same tokens as the "
        f"production pair. Tiers: {pricing}. mem B/q: bytes of the injected memory block per answer; "
        f"mem tok/q: injected tokens per answer, all calls.",
        to_markdown(table),
        f"F1 (%) per {group_label}:\n\n" + to_markdown(by_group),
        _fact_layer_section(tabs["fact_layer"], fact_stats),
        f"Failure causes per condition (wrong = F1 < {WRONG_BELOW}; one cause each, "
        f"precedence {' > '.join(CAUSES)}):\n\n" + to_markdown(tabs["causes"]),
        "Time per condition:\n\n" + to_markdown(timing_table),
        *_history_section(df, cfg.conditions),
        *compaction_section(trees, df, group_col),
        f"total {time.time() - started:.0f}s on {platform.node()} ({platform.machine()})",
    ])
    flat = flatten(cfg)
    saved = save_run(run_dir, df, tabs, report, flat)
    manifest = build_manifest(
        cfg, flat_config=flat, files=saved, small_model=tiers[0].backend.model_id, group_col=group_col,
        wrong_below=WRONG_BELOW, assets=assets,
    )
    write_manifest(run_dir, manifest)
    plots = all_plots(df, run_dir, n_tiers=len(models))

    tracker = Tracker(cfg.tracking)
    with tracker.run(f"benchmark-{cfg.dataset.name}", tags={"job": "benchmark"}):
        tracker.log_params(flat)
        for r in table.iter_rows(named=True):
            c = r["condition"]
            tracker.log_metrics({f"{c}.f1": r["F1"], f"{c}.bleu1": r["BLEU-1"], f"{c}.share_small": r["% small"],
                                 f"{c}.eff_cost": r["EffCost"], f"{c}.eff_cost_prod": r["EffCost@prod"],
                                 f"{c}.input_tokens": r["in"], f"{c}.output_tokens": r["out"],
                                 f"{c}.memory_bytes_per_q": r["mem B/q"],
                                 f"{c}.memory_tokens_per_q": r["mem tok/q"]})
        for r in tabs["fact_layer"].iter_rows(named=True):
            c = r["condition"]
            tracker.log_metrics({f"{c}.{k}": r[col] for k, col in FACT_METRICS.items()
                                 if r.get(col) is not None})
        for r in tabs["causes"].iter_rows(named=True):
            c = r["condition"]
            tracker.log_metrics({f"{c}.wrong": r["wrong"], **{f"{c}.cause.{k}": r[k] for k in CAUSES}})
        for name in (*saved, "report.md", "config.json", MANIFEST):
            tracker.log_artifact(run_dir / name)
        for plot in plots:
            tracker.log_artifact(plot)
    print(report)
    print(f"\nresults: {run_dir}")
    if tracker.run_id:
        print(f"MLflow run id: {tracker.run_id} (tracking uri {cfg.tracking.tracking_uri})")
    return BenchmarkOutput(run_dir, df, table, by_group, timings, tracker.run_id, report, tabs["causes"])


def save_run(
    run_dir: Path, df: pl.DataFrame, tabs: dict[str, pl.DataFrame], report: str, flat: dict
) -> dict[str, Path]:
    """Everything the rescore job reads; returns the files whose sha256 the manifest pins."""
    files = {
        "predictions.parquet": run_dir / "predictions.parquet",
        "calls.parquet": run_dir / "calls.parquet",
        METRICS_FILE: run_dir / METRICS_FILE,
    }
    df.write_parquet(files["predictions.parquet"])
    calls_frame(df).write_parquet(files["calls.parquet"])
    files[METRICS_FILE].write_text(
        json.dumps({"wrong_below": WRONG_BELOW, "tables": tables_json(tabs)}, indent=1) + "\n"
    )
    (run_dir / "report.md").write_text(report + "\n")
    (run_dir / "config.json").write_text(json.dumps(flat, indent=1, default=str))
    return files


def _history_section(df: pl.DataFrame, conditions: list[str]) -> list[str]:
    """What the full-context conditions were given (history is trimmed oldest-first to fit)."""
    full = [c for c in conditions if c in CONDITIONS and CONDITIONS.get(c).full_context]
    if not full:
        return []
    table = (
        df.filter(pl.col("condition").is_in(full))
        .group_by("condition", maintain_order=True)
        .agg(
            pl.len().alias("n"),
            pl.col("history_tokens").mean().round(0).alias("history tok/q"),
            pl.col("history_tokens").max().alias("max history tok"),
            (pl.col("history_turns").sum() / pl.col("history_turns_total").sum() * 100).round(1)
            .alias("% turns given"),
            (pl.col("history_turns") < pl.col("history_turns_total")).sum().alias("trimmed q"),
        )
    )
    return ["Full-context history (counted with the answering model's tokenizer; the oldest turns are "
            "left out when the conversation does not fit max_model_len):\n\n" + to_markdown(table)]


def _fact_layer_section(table: pl.DataFrame, stats: ExtractionStats | None) -> str:
    """Knowledge-update / temporal F1 and the stale-value rate, with / without the facts."""
    text = ("Knowledge-update and temporal questions (F1 %) and the stale-value rate (% of the "
            "questions with a superseded value answered with it; memroute/eval/fact_metrics.py):"
            "\n\n" + to_markdown(table))
    return text if stats is None else f"{text}\n\n{stats.line()} (cache key {stats.key})"
