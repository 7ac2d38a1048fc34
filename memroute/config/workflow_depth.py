"""Schema of the workflow-depth job (conf/workflow_depth.yaml): how injected memory, history and
cost grow along an agent workflow whose every step's answer is context for the next."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from memroute.config.schema import DatasetConfig, PartsConfig, TrackingConfig, check_parts
from memroute.errors import ConfigError

SOURCES = ("seeded", "locomo")
CONDITIONS = ("no_memory", "memory", "full_history")


@dataclass
class WorkflowSpec:
    """The workflows: ``seeded`` ones generated from ``seed``, and ``locomo`` ones whose steps
    are the questions of the conversations ``dataset`` names, in file order."""

    sources: list[str] = field(default_factory=lambda: list(SOURCES))
    num_workflows: int = 3  # per source
    max_depth: int = 32  # steps per workflow; depth d's numbers are its first d steps
    seed: int = 0
    # Each step's question carries the previous step's answer (the chain's hand-off), in every
    # condition alike: it is base tokens, so the conditions differ only by memory and history.
    handoff: bool = True
    step_seconds: int = 60  # session time between two steps (dates in the memory block)


@dataclass
class WorkflowDepthConfig(PartsConfig):
    """The benchmark's parts (embedder, memory, retrieval, cascade, router, assets), inherited;
    ``retrieval.top_k`` / ``retrieval.probe_token_budget`` / ``retrieval.token_budget`` are the
    ``memory`` condition's, the sweeps vary them."""

    workflow: WorkflowSpec = field(default_factory=WorkflowSpec)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)  # locomo: path and sample_ids
    conditions: list[str] = field(default_factory=lambda: list(CONDITIONS))
    # The capacity sweep: memory with each top_k, under sweep_budget (so top_k, not the budget,
    # limits what is injected); empty: no sweep.
    top_k_sweep: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32])
    sweep_budget: int = 8192
    # The budget sweep: memory with each per-request memory budget (probe_token_budget and
    # token_budget alike) at budget_top_k (None: the largest of top_k_sweep, else retrieval.top_k).
    budget_sweep: list[int] = field(default_factory=lambda: [128, 256, 512, 1024])
    budget_top_k: Optional[int] = None
    output_dir: str = ".memroute/workflow_depth"
    progress: bool = True
    tracking: TrackingConfig = field(default_factory=TrackingConfig)


def _positive_ints(values: list[int], name: str) -> None:
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{name} must hold integers >= 1, got {v!r}", field=name)


def check_workflow_depth_config(cfg: WorkflowDepthConfig) -> WorkflowDepthConfig:
    """Refuse what cannot run, naming the field, before any model or store loads."""
    check_parts(cfg)
    w = cfg.workflow
    unknown = [s for s in w.sources if s not in SOURCES]
    if unknown or not w.sources:
        raise ConfigError(f"workflow.sources must be among {', '.join(SOURCES)}, got {w.sources}",
                          field="workflow.sources")
    _positive_ints([w.num_workflows], "workflow.num_workflows")
    _positive_ints([w.max_depth], "workflow.max_depth")
    _positive_ints([w.step_seconds], "workflow.step_seconds")
    bad = [c for c in cfg.conditions if c not in CONDITIONS]
    if bad or not cfg.conditions:
        raise ConfigError(f"conditions must be among {', '.join(CONDITIONS)}, got {cfg.conditions}",
                          field="conditions")
    _positive_ints(cfg.top_k_sweep, "top_k_sweep")
    _positive_ints(cfg.budget_sweep, "budget_sweep")
    _positive_ints([cfg.sweep_budget], "sweep_budget")
    if cfg.budget_top_k is not None:
        _positive_ints([cfg.budget_top_k], "budget_top_k")
    return cfg
