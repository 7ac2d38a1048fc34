"""Evaluation conditions of the paper (Sec. IV-D), selectable by name.

Each condition picks cascade tiers and switches memory / routing; everything else
(models, retrieval, tau) comes from the same config, so conditions differ only in what
the name says. ``full_context`` conditions do not go through the router: the whole conversation
is the prompt (:mod:`memroute.eval.full_context`). ``facts`` conditions are their warm
counterparts with the user's active facts injected before the turn-pairs, the facts extracted by
the first model over the user's conversation (:mod:`memroute.eval.fact_layer`). ``units``
conditions retrieve that extraction's atomic context units beside the turn-pairs
(:mod:`memroute.retrieval.with_units`). ``summary`` conditions read a compacting summary tree
of each user's sessions instead of the verbatim turn-pairs (:mod:`memroute.memory.summary`).
"""

from __future__ import annotations

from dataclasses import dataclass

from memroute.registry import Registry


@dataclass(frozen=True)
class Condition:
    name: str
    tiers: str  # "first" | "all" | "last"
    use_memory: bool
    use_routing: bool
    description: str
    full_context: bool = False  # the whole conversation as history instead of retrieved memories
    facts: bool = False  # the fact layer's active facts injected too (needs the extracted store)
    units: bool = False  # atomic context units retrieved beside the turn-pairs (fact layer's)
    summary: bool = False  # the summary tree's view instead of the turn-pairs (summary.tier's)

    def tier_indexes(self, n_tiers: int) -> list[int]:
        return {"first": [0], "all": list(range(n_tiers)), "last": [n_tiers - 1]}[self.tiers]


CONDITIONS: Registry[Condition] = Registry("condition")
for _c in (
    Condition("cold_small", "first", False, False, "small model, no memory, no routing"),
    Condition("cold_compound", "all", False, True, "no memory + confidence routing"),
    Condition("warm_memory_only", "first", True, False, "memory injected, small model only"),
    Condition("warm_compound", "all", True, True, "memory + routing: the full pipeline"),
    Condition("warm_memory_facts", "first", True, False,
              "active facts + memory injected, small model only", facts=True),
    Condition("warm_compound_facts", "all", True, True,
              "active facts + memory + routing", facts=True),
    Condition("warm_memory_units", "first", True, False,
              "memory with atomic units beside the turn-pairs, small model only", units=True),
    Condition("warm_compound_units", "all", True, True,
              "memory with atomic units beside the turn-pairs + routing", units=True),
    Condition("warm_summary_only", "first", True, False,
              "summary tree of the sessions injected, small model only", summary=True),
    Condition("warm_compound_summary", "all", True, True,
              "summary tree of the sessions + routing", summary=True),
    Condition("cold_large", "last", False, False, "largest model, no memory, no routing"),
    Condition("full_context_large", "last", False, False,
              "largest model, the whole conversation as history (no retrieval, no routing)",
              full_context=True),
):
    CONDITIONS.add(_c.name, _c)
del _c
