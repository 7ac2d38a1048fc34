"""The compacting summary tree (:mod:`memroute.memory.summary`): the memory strategy that keeps
summaries of a user's sessions instead of verbatim turn-pairs, merged upward under a budget."""

from __future__ import annotations

from dataclasses import dataclass

from memroute.errors import ConfigError


@dataclass
class SummaryConfig:
    # Tokens (the compacting tier's tokenizer) the view may hold: every top-level summary plus
    # the open session's verbatim turns. Keep it within retrieval.probe_token_budget, or the
    # router drops the oldest summaries to fit its own budget.
    budget_tokens: int = 448
    node_tokens: int = 96  # the most one summary may hold (the compaction's max_tokens)
    fan_in: int = 2  # summaries merged into one parent when the view is over budget
    # an open session is compacted into a leaf once its verbatim turns reach this many tokens
    # (a closed session always is: the next session's first turn closes it)
    leaf_trigger_tokens: int = 256
    tier: int = 0  # the cascade tier that writes the summaries (0: the cheapest)


def check_summary_config(cfg: SummaryConfig, n_tiers: int | None = None) -> SummaryConfig:
    def positive(name: str) -> int:
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ConfigError(f"{name} must be a positive integer, got {v!r}", field=f"summary.{name}")
        return v

    budget, node = positive("budget_tokens"), positive("node_tokens")
    positive("leaf_trigger_tokens")
    if positive("fan_in") < 2:
        raise ConfigError(f"fan_in must be at least 2, got {cfg.fan_in}", field="summary.fan_in")
    if node * 2 > budget:  # a merge must be able to bring the view under budget
        raise ConfigError(f"budget_tokens {budget} must hold at least two summaries of node_tokens "
                          f"{node}", field="summary.budget_tokens")
    if cfg.leaf_trigger_tokens > budget - node:
        raise ConfigError(f"leaf_trigger_tokens {cfg.leaf_trigger_tokens} leaves no room for a "
                          f"summary under budget_tokens {budget}", field="summary.leaf_trigger_tokens")
    if isinstance(cfg.tier, bool) or not isinstance(cfg.tier, int) or cfg.tier < 0 or (
            n_tiers is not None and cfg.tier >= n_tiers):
        raise ConfigError(f"tier {cfg.tier!r} is not a tier of the {n_tiers}-tier cascade",
                          field="summary.tier")
    return cfg
