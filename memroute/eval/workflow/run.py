"""The workflow-depth job's body: workflows -> every variant through the Router -> per-step rows,
growth fits, plots, report -> MLflow.

A run folder holds ``steps.parquet`` / ``steps.csv`` (one row per workflow step and variant),
``depth_means.csv`` (means per depth, cumulative cost), ``growth.csv`` (the fits), the plots,
``report.md`` and ``config.json``. The tiers are loaded once; one memory store serves every
memory variant, each (variant, workflow) being its own user.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from memroute import build
from memroute.config.schema import MemoryConfig, is_server_uri, ordered_cascade
from memroute.config.workflow_depth import WorkflowDepthConfig, check_workflow_depth_config
from memroute.eval.report import new_run_dir
from memroute.eval.workflow.analysis import growth, per_depth
from memroute.eval.workflow.generate import Workflow, locomo_workflows, seeded_workflows
from memroute.eval.workflow.plots import cost_vs_depth, injection_vs_depth
from memroute.eval.workflow.report import render
from memroute.eval.workflow.steps import CountingRetriever, make_router, run_variant, variants
from memroute.tracking.mlflow_tracking import Tracker, flatten


@dataclass
class WorkflowDepthOutput:
    run_dir: Path
    rows: pl.DataFrame
    depths: pl.DataFrame
    fits: pl.DataFrame
    report: str
    skipped: list[str]
    run_id: str | None


def load_workflows(cfg: WorkflowDepthConfig) -> tuple[dict[str, list[Workflow]], list[str]]:
    """The workflows of each source, and why a source was skipped (a LoCoMo file that is not
    there is a skip, not a failure: the seeded workflows still run)."""
    w = cfg.workflow
    out: dict[str, list[Workflow]] = {}
    skipped: list[str] = []
    for source in w.sources:
        if source == "seeded":
            out[source] = seeded_workflows(w.seed, w.num_workflows, w.max_depth)
            continue
        path = Path(cfg.dataset.path).expanduser() if cfg.dataset.path else None
        if path is None or not path.is_file():
            skipped.append(f"locomo: no LoCoMo file at {cfg.dataset.path!r} (set dataset.path=... "
                           "or MEMROUTE_LOCOMO_PATH; see ../shared/ASSETS.md)")
            continue
        found = locomo_workflows(path, list(cfg.dataset.sample_ids), list(cfg.dataset.categories),
                                 w.num_workflows, w.max_depth)
        if found:
            out[source] = found
        else:
            skipped.append(f"locomo: {cfg.dataset.sample_ids} hold fewer than "
                           f"workflow.max_depth={w.max_depth} questions")
    for line in skipped:
        print(f"skipped {line}", flush=True)
    return out, skipped


def _memory_cfg(cfg: WorkflowDepthConfig, run_dir: Path) -> MemoryConfig:
    """A Milvus Lite file in the run folder; on a server, a collection of this run's own."""
    if is_server_uri(cfg.memory.uri):
        suffix = run_dir.name.replace("-", "_")
        return replace(cfg.memory, collection=f"{cfg.memory.collection}_wf_{suffix}")
    return replace(cfg.memory, uri=str(run_dir / "milvus_workflow.db"))


def route_all(cfg: WorkflowDepthConfig, workflows: dict[str, list[Workflow]], run_dir: Path,
              progress: bool) -> list[dict]:
    models = ordered_cascade(cfg.cascade)
    prod = [m.price_as_params_b or m.params_b for m in models]
    todo = variants(cfg)
    assets = build.asset_store(cfg.assets)
    tiers = build.tiers(models, assets, on_ready=build.say_ready)
    memory = None
    rows: list[dict] = []
    from tqdm.auto import tqdm

    total = sum(len(ws) * min(len(w.steps) for w in ws) for ws in workflows.values()) * len(todo)
    bar = tqdm(total=total, unit="step", disable=not progress, dynamic_ncols=True)
    try:
        if any(v.condition == "memory" for v in todo) and workflows:
            memory = build.memory(cfg.embedder, _memory_cfg(cfg, run_dir), cfg.retrieval, assets)
        counting = CountingRetriever(memory.retriever) if memory is not None else None
        for source, ws in workflows.items():
            for variant in todo:
                bar.set_description(f"{source} {variant.name}")
                router = make_router(variant, tiers, cfg.router, cfg.retrieval, counting)
                rows += run_variant(variant, router, ws, prod_params_b=prod,
                                    retrieved=counting.retrieved if counting else None,
                                    handoff=cfg.workflow.handoff,
                                    step_seconds=cfg.workflow.step_seconds, on_step=bar.update)
    finally:
        bar.close()
        if memory is not None:
            memory.close()
        for t in tiers:
            t.backend.close()
    return rows


def run_workflow_depth(cfg: WorkflowDepthConfig, *,
                       progress: bool | None = None) -> WorkflowDepthOutput:
    check_workflow_depth_config(cfg)
    progress = cfg.progress if progress is None else progress
    started = time.time()
    run_dir = new_run_dir(cfg.output_dir)
    (run_dir / "config.json").write_text(json.dumps(flatten(cfg), indent=1, default=str))
    workflows, skipped = load_workflows(cfg)
    print(f"workflow depth {run_dir.name}: " + ", ".join(
        f"{s} {len(ws)} x {cfg.workflow.max_depth} steps" for s, ws in workflows.items()),
        flush=True)
    rows = pl.DataFrame(route_all(cfg, workflows, run_dir, progress) if workflows else [])
    files = ["config.json"]
    plots: list[str] = []
    depths = fits = pl.DataFrame()
    if rows.height:
        rows.write_parquet(run_dir / "steps.parquet")
        rows.write_csv(run_dir / "steps.csv")
        depths = per_depth(rows)
        fits = growth(depths)
        depths.write_csv(run_dir / "depth_means.csv")
        fits.write_csv(run_dir / "growth.csv")
        files += ["steps.parquet", "steps.csv", "depth_means.csv", "growth.csv"]
        for source in workflows:
            for made in (cost_vs_depth(depths, source, run_dir / f"cost_vs_depth_{source}.png"),
                         injection_vs_depth(depths, source,
                                            run_dir / f"injection_vs_depth_{source}.png")):
                if made is not None:
                    plots.append(made.name)
    report = render(depths, fits, header=_header(cfg, rows, time.time() - started),
                    skipped=skipped, plots=plots) if rows.height else _empty_report(skipped)
    (run_dir / "report.md").write_text(report + "\n")
    files += ["report.md", *plots]

    tracker = Tracker(cfg.tracking)
    with tracker.run(f"workflow-depth-{run_dir.name}", tags={"job": "workflow_depth"}):
        tracker.log_params(flatten(cfg))
        for r in fits.iter_rows(named=True) if fits.height else ():
            key = f"{r['source']}.{r['variant']}"
            for name in ("b", "cum_cost_last", "injected_last", "injected_max"):
                if r[name] is not None and r[name] == r[name]:  # not NaN
                    tracker.log_metrics({f"{key}.{name}": float(r[name])})
        for f in files:
            tracker.log_artifact(run_dir / f)
    print(report)
    print(f"\nresults: {run_dir} ({time.time() - started:.0f}s)")
    if tracker.run_id:
        print(f"MLflow run id: {tracker.run_id} (tracking uri {cfg.tracking.tracking_uri})")
    return WorkflowDepthOutput(run_dir, rows, depths, fits, report, skipped, tracker.run_id)


def _header(cfg: WorkflowDepthConfig, rows: pl.DataFrame, seconds: float) -> list[str]:
    models = ordered_cascade(cfg.cascade)
    tiers = " -> ".join(f"{m.name} ({m.engine}, P {m.params_b:g}"
                        + (f", priced as {m.price_as_params_b:g}" if m.price_as_params_b else "")
                        + ")" for m in models)
    r = cfg.retrieval
    # The cross-check: the injected tokens the Router attributes to the answering call equal the
    # token count of the memory block it injected (re-rendered, the tier's tokenizer).
    with_memory = rows.filter(pl.col("memories_injected") > 0)
    exact = with_memory.filter(pl.col("answer_injected_tokens") == pl.col("memory_block_tokens"))
    return [
        f"- workflows: {cfg.workflow.num_workflows} per source, depth 1..{cfg.workflow.max_depth}, "
        f"seed {cfg.workflow.seed}, previous answer handed off: {cfg.workflow.handoff}",
        f"- tiers: {tiers}; tau {cfg.router.tau}, max {cfg.router.max_tokens} new tokens",
        f"- memory condition: {r.strategy} retrieval ({r.fusion}), top_k {r.top_k}, memory budget "
        f"{r.probe_token_budget} (first tier) / {r.token_budget} (escalations); embedder "
        f"{cfg.embedder.name}; every answered step remembered",
        f"- {rows.height} steps routed, {int(rows['calls'].sum())} model calls, {seconds:.0f} s",
        f"- attribution: base + injected + history = the engine's prompt tokens on every call "
        f"(the Router's CallRecord); injected = the memory block's own token count on "
        f"{exact.height} of {with_memory.height} answering calls with memories",
    ]


def _empty_report(skipped: list[str]) -> str:
    return "\n".join(["# Injection growth with workflow depth", "", "No workflow ran.", "",
                      *(f"- skipped: {s}" for s in skipped)])
