"""Build the parts from a typed config and run the benchmark end to end (the main job's body)."""

from __future__ import annotations

import json
import logging
import platform
import time
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from memroute.accounting.cost import Pricing
from memroute.config import BenchmarkConfig, ModelConfig
from memroute.errors import ConfigError
from memroute.eval.benchmark import ConditionTiming, ingest, run_conditions
from memroute.eval.load import load_conversations
from memroute.eval.report import f1_by, new_run_dir, predictions_frame, summary, to_markdown
from memroute.routing.router import Tier
from memroute.tracking.mlflow_tracking import Tracker, flatten

log = logging.getLogger(__name__)


@dataclass
class BenchmarkOutput:
    run_dir: Path
    predictions: pl.DataFrame
    summary: pl.DataFrame
    by_group: pl.DataFrame
    timings: list[ConditionTiming]
    run_id: str | None
    report: str


def ordered_cascade(cascade: dict[str, ModelConfig]) -> list[ModelConfig]:
    """Cascade slots are keyed "0", "1", ...: cheapest first."""
    if not cascade:
        raise ConfigError("the cascade is empty: set model@cascade.0 (and .1, ...)", field="cascade")
    try:
        keys = sorted(cascade, key=int)
    except ValueError:
        raise ConfigError(f"cascade keys must be 0, 1, ...; got {sorted(cascade)}", field="cascade") from None
    return [cascade[k] for k in keys]


def run_benchmark(cfg: BenchmarkConfig, *, progress: bool = True) -> BenchmarkOutput:
    from memroute.embedding import build_encoder
    from memroute.llm.assets import AssetStore
    from memroute.llm.factory import build_backend
    from memroute.memory import MilvusMemoryStore
    from memroute.retrieval.retriever import HybridRetriever

    started = time.time()
    models = ordered_cascade(cfg.cascade)
    run_dir = new_run_dir(cfg.output_dir)
    conversations = load_conversations(cfg.dataset, run_dir)
    n_questions = sum(len(c.qa) for c in conversations)
    print(f"dataset {cfg.dataset.name}: {len(conversations)} users, {n_questions} questions")

    assets = AssetStore(cfg.assets.cache_dir, pip=cfg.assets.pip)
    encoder = build_encoder(cfg.embedder, assets)
    # A fresh store per run: the measured memory is exactly the dataset's turn-pairs.
    memory_cfg = replace(cfg.memory, uri=str(run_dir / "milvus.db")) if _is_lite(cfg.memory.uri) else cfg.memory
    store = MilvusMemoryStore(memory_cfg, encoder.dim)
    retriever = HybridRetriever(encoder, store, cfg.retrieval)
    dia = ingest(conversations, retriever)
    store.flush()
    print(f"memory: {store.count()} turn-pairs stored for {len(conversations)} users")

    tiers = []
    try:
        for m in models:
            t0 = time.time()
            backend = build_backend(m, assets)
            print(f"tier {len(tiers)}: {m.name} ({m.engine}) ready in {time.time() - t0:.0f}s")
            tiers.append(Tier(m.name, backend, Pricing(m.params_b, m.usd_per_m_input, m.usd_per_m_output)))
        rows, timings = run_conditions(
            conversations, tiers, retriever, cfg.router, cfg.retrieval, cfg.conditions,
            memory_dia_ids=dia, batch_size=cfg.batch_size, progress=progress,
        )
    finally:
        for t in tiers:
            t.backend.close()
        store.close()

    prod = {m.name: (m.price_as_params_b or m.params_b) for m in models}
    df = predictions_frame(rows, prod)
    table = summary(df, cfg.conditions)
    group_col = "fact_type" if cfg.dataset.name == "synthetic" else "category"
    by_group = f1_by(df, group_col, cfg.conditions)
    timing_table = pl.DataFrame(
        [{"condition": t.condition, "wall_s": round(t.wall_s, 1), "generate_s": round(t.generate_s, 1),
          "router_overhead_%": round(100 * t.overhead_share, 1)} for t in timings]
    )
    pricing = ", ".join(f"{m.name} P={m.params_b}B (prod P={prod[m.name]}B)" for m in models)
    report = "\n\n".join([
        f"## memroute benchmark: {cfg.dataset.name}, {n_questions} questions, tau={cfg.router.tau}, "
        f"retrieval={cfg.retrieval.strategy}/{cfg.retrieval.fusion} top_k={cfg.retrieval.top_k}",
        f"EffCost = (in + 4*out) * P/8 with the stand-in sizes; EffCost@prod prices the same tokens as the "
        f"production pair. Tiers: {pricing}.",
        to_markdown(table),
        f"F1 (%) per {group_col}:\n\n" + to_markdown(by_group),
        "Time per condition:\n\n" + to_markdown(timing_table),
        f"total {time.time() - started:.0f}s on {platform.node()} ({platform.machine()})",
    ])
    df.write_parquet(run_dir / "predictions.parquet")
    (run_dir / "report.md").write_text(report + "\n")
    (run_dir / "config.json").write_text(json.dumps(flatten(cfg), indent=1, default=str))

    tracker = Tracker(cfg.tracking)
    with tracker.run(f"benchmark-{cfg.dataset.name}", tags={"job": "benchmark"}):
        tracker.log_params(flatten(cfg))
        for r in table.iter_rows(named=True):
            c = r["condition"]
            tracker.log_metrics({f"{c}.f1": r["F1"], f"{c}.bleu1": r["BLEU-1"], f"{c}.share_small": r["% small"],
                                 f"{c}.eff_cost": r["EffCost"], f"{c}.eff_cost_prod": r["EffCost@prod"],
                                 f"{c}.input_tokens": r["in"], f"{c}.output_tokens": r["out"]})
        for name in ("predictions.parquet", "report.md", "config.json"):
            tracker.log_artifact(run_dir / name)
    print(report)
    print(f"\nresults: {run_dir}")
    if tracker.run_id:
        print(f"MLflow run id: {tracker.run_id} (tracking uri {cfg.tracking.tracking_uri})")
    return BenchmarkOutput(run_dir, df, table, by_group, timings, tracker.run_id, report)


def _is_lite(uri: str) -> bool:
    return "://" not in uri
