"""Build the parts from config and run the retrieval evaluation (the job's body)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from memroute import build
from memroute.config.retrieval_eval import RetrievalEvalConfig
from memroute.config.units import UnitsConfig
from memroute.datasets.registry import dataset_cases
from memroute.errors import ConfigError
from memroute.eval.fact_layer import add_units, load_units
from memroute.eval.report import new_run_dir, to_markdown
from memroute.eval.retrieval_eval import evaluate, strategy_config, summarize
from memroute.memory.facts.extraction_schema import ExtractedUnit
from memroute.retrieval.with_units import WithUnits
from memroute.tracking.mlflow_tracking import Tracker, flatten

HEADLINE = ["turn_recall@1", "turn_recall@5", "turn_recall@10", "turn_recall_all@5", "turn_ndcg@10",
            "turn_mrr", "session_recall@5", "session_recall_any@5", "session_recall_all@5"]


@dataclass
class RetrievalEvalOutput:
    run_dir: Path
    summary: pl.DataFrame
    by_group: pl.DataFrame
    run_id: str | None
    report: str


def run_retrieval_eval(cfg: RetrievalEvalConfig) -> RetrievalEvalOutput:
    from memroute.retrieval.bm25_cache import BM25Cache

    for name in cfg.strategies:
        strategy_config(cfg.retrieval, name)  # unknown names fail before any work
    units = _units(cfg)
    started = time.time()
    run_dir = new_run_dir(cfg.output_dir)
    pairs, cases = dataset_cases(cfg.dataset, run_dir)
    print(f"dataset {cfg.dataset.name}: {len({p.user_id for p in pairs})} users, {len(pairs)} turn-pairs, "
          f"{len(cases)} questions with gold evidence")
    assets = build.asset_store(cfg.assets)
    rows: list[dict[str, object]] = []
    full_width: int | None = None
    for dim in cfg.dims:
        if dim is not None and full_width is not None and dim >= full_width:
            print(f"dim {dim}: not below the encoder's width {full_width}, skipped")
            continue
        encoder = build.encoder(replace(cfg.embedder, dim=dim), assets)
        full_width = full_width or getattr(encoder, "width", encoder.dim)
        label = "full" if dim is None else str(dim)
        # A fresh Lite file per width: vectors of different widths cannot share a collection.
        memory = replace(cfg.memory, uri=str(run_dir / f"milvus_{label}.db"))
        store = build.store(memory, encoder.dim)
        try:
            base = build.retriever(encoder, store, cfg.retrieval)
            t0 = time.time()
            base.remember(pairs)
            store.flush()
            print(f"dim {label}: {len(pairs)} turn-pairs embedded and stored in {time.time() - t0:.0f}s")
            # Strategies with the same BM25 settings share one set of per-user indexes.
            caches: dict[tuple[object, ...], BM25Cache] = {}
            retrievers = {}
            for name in cfg.strategies:
                rc = strategy_config(cfg.retrieval, name)
                key = (rc.bm25_k1, rc.bm25_b, rc.ngram, rc.stem)
                retrievers[name] = build.retriever(encoder, store, rc, bm25_cache=caches.get(key))
                caches.setdefault(key, retrievers[name].bm25)
            unit_index = None
            if units:
                unit_index = build.unit_index(UnitsConfig(), memory, cfg.retrieval, encoder)
                add_units(unit_index, units)
                retrievers |= {f"{name}-units": WithUnits(r, unit_index, unit_k=cfg.unit_k)
                               for name, r in list(retrievers.items())}
            try:
                rows += evaluate(retrievers, cases, ks=cfg.ks, label={"dim": label})
            finally:
                if unit_index is not None:
                    unit_index.close()
        finally:
            store.close()

    table = summarize(rows, by=("dim", "strategy"))
    headline = [c for c in HEADLINE if c in table.columns]
    table = table.select("dim", "strategy", "n", *headline)
    by_group = (
        summarize(rows, by=("dim", "strategy", "group"))
        .filter(pl.col("dim") == "full")
        .pivot(on="group", index="strategy", values="turn_recall@5")
    )
    report = "\n\n".join([
        f"## retrieval evaluation: {cfg.dataset.name}, {len(cases)} questions, {len(pairs)} turn-pairs",
        to_markdown(table),
        "Turn-level Recall@5 per question type / category (full width):\n\n" + to_markdown(by_group),
        f"total {time.time() - started:.0f}s",
    ])
    pl.DataFrame(rows).write_parquet(run_dir / "scores.parquet")
    (run_dir / "report.md").write_text(report + "\n")
    plot = _plot(table, run_dir / "recall_at_5.png")
    (run_dir / "config.json").write_text(json.dumps(flatten(cfg), indent=1, default=str))

    tracker = Tracker(cfg.tracking)
    with tracker.run(f"retrieval-eval-{cfg.dataset.name}", tags={"job": "retrieval_eval"}):
        tracker.log_params(flatten(cfg))
        for r in table.iter_rows(named=True):
            # MLflow metric names allow no "@": turn_recall@5 -> turn_recall_at_5
            tracker.log_metrics({f"{r['dim']}.{r['strategy']}.{m.replace('@', '_at_')}": r[m] for m in headline})
        for name in ("scores.parquet", "report.md", "config.json", plot.name):
            tracker.log_artifact(run_dir / name)
    print(report)
    print(f"\nresults: {run_dir}")
    if tracker.run_id:
        print(f"MLflow run id: {tracker.run_id}")
    return RetrievalEvalOutput(run_dir, table, by_group, tracker.run_id, report)


def _units(cfg: RetrievalEvalConfig) -> list[ExtractedUnit]:
    """The atomic units of ``units_from`` (none when unset); a missing file is a config error."""
    if not cfg.units_from:
        return []
    path = Path(cfg.units_from).expanduser()
    if not path.is_file():
        raise ConfigError(f"units_from {cfg.units_from!r} is not a file (a benchmark run's "
                          "units.jsonl)", field="units_from")
    return load_units(path)


def _plot(table: pl.DataFrame, path: Path) -> Path:
    """Grouped bars: turn-level Recall@5 per strategy, one bar per embedding width."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    strategies = list(dict.fromkeys(table["strategy"].to_list()))
    dims = list(dict.fromkeys(table["dim"].to_list()))
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(1, len(dims))
    for j, dim in enumerate(dims):
        sub = {r["strategy"]: r["turn_recall@5"] for r in table.filter(pl.col("dim") == dim).iter_rows(named=True)}
        ax.bar([i + j * width for i in range(len(strategies))], [sub.get(s, 0.0) for s in strategies],
               width, label=f"dim {dim}")
    ax.set_xticks([i + width * (len(dims) - 1) / 2 for i in range(len(strategies))], strategies, rotation=15)
    ax.set_ylabel("turn-level Recall@5")
    ax.set_ylim(0, 1)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
