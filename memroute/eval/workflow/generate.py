"""The workflows: seeded ones (deterministic from a seed) and ones derived from LoCoMo.

A workflow is a chain of step tasks. Depth ``d`` of a workflow is its first ``d`` steps: a
seeded workflow's steps do not depend on how deep it is generated, so one run to ``max_depth``
measures every depth at once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

START_TIME = 1767603600  # 2026-01-05 09:00 UTC: fixed, so the dated memory block counts alike

# Task templates of an agent's steps. No change cue ("now", "update", "instead": supersession)
# and no date words (the temporal filter): the chain is stored and retrieved as plain turns.
TEMPLATES = (
    "Look up the {record} for {entity}.",
    "Extract the {record} from the {doc} of {entity}.",
    "Compute the {metric} of {entity} from the figures found so far.",
    "Verify the {metric} of {entity} against the {doc}.",
    "Summarize the {doc} of {entity} in two sentences.",
    "Draft a short message to {person} about the {record} of {entity}.",
    "List the open questions about the {doc} for {person}.",
    "Estimate the {metric} if the volume grows by {pct} percent.",
    "Check whether the {record} of {entity} matches the {doc}.",
    "Prepare a table of the {metric} per {unit} for {person}.",
)
ENTITIES = ("Alder Corp", "Birch Labs", "Cedar Health", "Dune Freight", "Elm Robotics",
            "Fjord Energy", "Granite Bank", "Harbor Foods")
PEOPLE = ("Maria Lopez", "Kenji Sato", "Amara Okafor", "Lena Fischer", "Ravi Menon", "Tom Byrne")
RECORDS = ("invoice total", "contract end date", "open ticket count", "account owner",
           "renewal price", "shipping address", "credit limit", "support tier")
DOCS = ("quarterly report", "service agreement", "audit memo", "price sheet", "incident log",
        "onboarding checklist")
METRICS = ("gross margin", "churn rate", "average order value", "cost per ticket",
           "delivery delay", "utilization")
UNITS = ("region", "product line", "team", "month")


@dataclass(frozen=True)
class Workflow:
    source: str  # seeded | locomo
    workflow_id: str  # unique within the run: user ids and session ids derive from it
    steps: tuple[str, ...]


def seeded_step(rng: random.Random) -> str:
    template = rng.choice(TEMPLATES)
    return template.format(record=rng.choice(RECORDS), entity=rng.choice(ENTITIES),
                           doc=rng.choice(DOCS), metric=rng.choice(METRICS),
                           person=rng.choice(PEOPLE), unit=rng.choice(UNITS),
                           pct=rng.randrange(5, 60, 5))


def seeded_workflows(seed: int, count: int, depth: int) -> list[Workflow]:
    """``count`` workflows of ``depth`` steps; workflow ``w``'s steps come from its own stream
    (``seed``, ``w``), so they are the same whatever ``count`` and ``depth``."""
    out = []
    for w in range(count):
        rng = random.Random(seed * 1_000_003 + w)
        out.append(Workflow("seeded", f"seeded-s{seed}-w{w}",
                            tuple(seeded_step(rng) for _ in range(depth))))
    return out


def locomo_workflows(path: str | Path, sample_ids: list[str], categories: list[int], count: int,
                     depth: int) -> list[Workflow]:
    """Consecutive runs of ``depth`` questions of the conversations ``sample_ids`` names (in
    file order; ``[all]``: every one), at most ``count`` workflows. A conversation's questions
    are what its user asked about it, so a run of them is a realistic chain of requests."""
    from memroute.datasets.locomo import load_locomo

    ids = None if sample_ids == ["all"] else sample_ids
    out: list[Workflow] = []
    for conv in load_locomo(path, sample_ids=ids, categories=categories):
        questions = [q.question for q in conv.qa]
        for start in range(0, len(questions) - depth + 1, depth):
            if len(out) == count:
                return out
            out.append(Workflow("locomo", f"locomo-{conv.sample_id}-q{start}",
                                tuple(questions[start:start + depth])))
    return out


def step_query(workflow: Workflow, k: int, previous_answer: str | None, handoff: bool) -> str:
    """Step ``k``'s question (1-based): the task, with the previous step's answer when the
    chain hands it off."""
    text = f"Step {k}: {workflow.steps[k - 1]}"
    if handoff and previous_answer:
        text += f" Result of the previous step: {previous_answer}"
    return text


def step_time(workflow_index: int, k: int, step_seconds: int) -> int:
    """A deterministic session time: one day per workflow, ``step_seconds`` per step."""
    return START_TIME + workflow_index * 86_400 + k * step_seconds
