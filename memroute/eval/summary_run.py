"""The benchmark's summary-tree conditions: build each user's tree, price its compaction per answer.

The trees are built the way a served user's would be: turn by turn in conversation order (every
user's i-th turn together, so the compaction calls of many users share engine batches), a session
compacted when the next one starts or when it grows past ``summary.leaf_trigger_tokens``.
The compaction's cost is part of the strategy's cost: each answer of a ``*_summary`` condition
carries its share of its user's compaction calls (``compaction_*`` columns, the user's total over
the user's questions), and the report shows EffCost with it (``EffCost+compaction``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl

from memroute.accounting.cost import eff_cost
from memroute.config.summary import SummaryConfig
from memroute.datasets.records import EvalConversation
from memroute.eval.conditions import CONDITIONS
from memroute.eval.report import to_markdown
from memroute.memory.summary import Compactor, SummaryMemory
from memroute.routing.router import Tier

TREES_FILE = "summary_trees.json"  # every node (merged ones too) and every compaction call


def build_summary_memory(convs: Sequence[EvalConversation], tier: Tier, cfg: SummaryConfig,
                         *, tier_index: int, batch_size: int = 16, progress: bool = True,
                         run_dir: Path | None = None) -> SummaryMemory:
    from tqdm.auto import tqdm

    compactor = Compactor(tier.backend, tier.pricing, tier=tier_index,
                          node_tokens=cfg.node_tokens, batch_size=batch_size)
    memory = SummaryMemory(cfg, compactor)
    turns = [[r.pair for r in c.records] for c in convs]
    total = sum(map(len, turns))
    with tqdm(total=total, desc="summary trees", unit="turn", disable=not progress) as bar:
        for i in range(max(map(len, turns), default=0)):
            step = [t[i] for t in turns if i < len(t)]
            memory.remember(step)
            bar.update(len(step))
            bar.set_postfix(compactions=sum(map(len, memory.calls.values())), refresh=False)
    if run_dir is not None:
        memory.save(run_dir / TREES_FILE)
    return memory


def add_compaction_costs(df: pl.DataFrame, memory: SummaryMemory | None,
                         prod_params: Mapping[str, float]) -> pl.DataFrame:
    """``compaction_calls / _tokens / _eff_cost / _eff_cost_prod``: on each ``*_summary`` answer,
    its user's compaction totals divided over that user's questions (0 on other conditions)."""
    if memory is None:
        return df
    per_user: dict[str, dict[str, float]] = {}
    for user, calls in memory.calls.items():
        per_user[user] = {
            "compaction_calls": float(len(calls)),
            "compaction_tokens": float(sum(c.input_tokens + c.output_tokens for c in calls)),
            "compaction_eff_cost": sum(c.eff_cost for c in calls),
            "compaction_eff_cost_prod": sum(
                eff_cost(c.input_tokens, c.output_tokens, prod_params.get(c.model_id, c.params_b))
                for c in calls),
        }
    summary_conds = [c for c in df["condition"].unique().to_list()
                     if c in CONDITIONS and CONDITIONS.get(c).summary]
    asked = df.filter(pl.col("condition").is_in(summary_conds)).group_by(
        "condition", "sample_id").len()
    n_q = {(r["condition"], r["sample_id"]): r["len"] for r in asked.iter_rows(named=True)}
    cols: dict[str, list[float]] = {k: [] for k in
                                    ("compaction_calls", "compaction_tokens", "compaction_eff_cost",
                                     "compaction_eff_cost_prod")}
    for cond, user in df.select("condition", "sample_id").iter_rows():
        share = per_user.get(user) if cond in summary_conds else None
        for k in cols:
            cols[k].append(share[k] / n_q[(cond, user)] if share else 0.0)
    return df.with_columns(pl.Series(k, v, dtype=pl.Float64) for k, v in cols.items())


def lost_by_group(df: pl.DataFrame, group_col: str) -> pl.DataFrame:
    """Per summary condition and ``group_col`` (fact type, category): questions, wrong answers,
    and how many the compaction lost (cause ``compacted_away``)."""
    conds = [c for c in df["condition"].unique(maintain_order=True).to_list()
             if c in CONDITIONS and CONDITIONS.get(c).summary]
    return (df.filter(pl.col("condition").is_in(conds))
            .group_by("condition", group_col, maintain_order=True)
            .agg(pl.len().alias("n"), pl.col("cause").is_not_null().sum().alias("wrong"),
                 (pl.col("cause") == "compacted_away").sum().alias("compacted_away"))
            .sort("condition", group_col))


def compaction_section(memory: SummaryMemory | None, df: pl.DataFrame,
                       group_col: str = "category") -> list[str]:
    """What compacting cost, what the trees look like, and which facts they lost."""
    if memory is None:
        return []
    s = memory.stats()
    per_cond = (
        df.filter(pl.col("compaction_calls") > 0).group_by("condition", maintain_order=True).agg(
            pl.len().alias("n"),
            pl.col("eff_cost").sum().round(0).alias("answer EffCost"),
            pl.col("compaction_eff_cost").sum().round(0).alias("compaction EffCost"),
            pl.col("compaction_eff_cost_prod").sum().round(0).alias("compaction EffCost@prod"),
            pl.col("memory_bytes").mean().round(0).alias("mem B/q"),
        )
    )
    cfg = memory.cfg
    head = (f"Summary trees (budget {cfg.budget_tokens} tokens, node {cfg.node_tokens}, fan-in "
            f"{cfg.fan_in}, leaf trigger {cfg.leaf_trigger_tokens}, written by tier {cfg.tier}): "
            f"{s['users']} users, {s['nodes']} nodes up to level {s['max_level']}, largest view "
            f"{s['max_view_tokens']} tokens; {s['compaction_calls']} compaction calls, "
            f"{s['compaction_in']} tokens in, {s['compaction_out']} out, EffCost "
            f"{s['compaction_eff_cost']:.0f} (each answer of a *_summary condition carries its "
            f"user's share; {TREES_FILE} keeps every node and call)")
    lost = ("What the compaction lost, per " + group_col + " (wrong answers whose evidence reached "
            "the prompt only in summaries that no longer hold the answer):\n\n"
            + to_markdown(lost_by_group(df, group_col)))
    return [head + "\n\n" + to_markdown(per_cond), lost]
