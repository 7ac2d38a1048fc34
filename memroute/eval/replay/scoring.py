"""Per-request scores of a replay: F1 against the references, stale answers, evidence hits, and
whether the answer holds a reference's value at all (F1 scores the 0.5B's right "Our wedding
budget is $19,500." 0.33 against "19,500"; read the two side by side).

Evidence: the memories that should answer a question are the turn-pairs the trace's earlier rows
of the same fact left (a strategy that stores its answers turns row ``seq`` into the turn-pair
``TurnPair(namespace, session_id, seq)``, whose id is deterministic). For a personal fact that is
the statement (or the latest update) and the questions answered after it; for a general question
the earlier answers to it (cross-model memory). A question without such rows has no gold
evidence (its evidence hit is null).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memroute.datasets.records import TraceRequest
from memroute.eval.metrics import f1
from memroute.text.answers import holds_value
from memroute.types import stable_id

WRONG_BELOW = 0.5  # as the benchmark's causes: an answer with F1 < 0.5 is wrong


def memory_id(user_id: str, session_id: str, seq: int) -> str:
    """The id of the turn-pair a stored answer to row ``seq`` becomes (``TurnPair.id``)."""
    return str(stable_id(user_id, session_id, seq))


def best_f1(answer: str, references: tuple[str, ...]) -> float | None:
    return max(f1(answer, r) for r in references) if references else None


@dataclass
class Scores:
    f1: float | None
    stale: bool | None  # closer to a superseded value than to the current one
    evidence_hit: bool | None
    gold: int  # how many gold memories existed
    value: bool | None = None  # holds_value


@dataclass
class EvidenceBook:
    """Tracks, per (user, fact), the memory ids a question about that fact should retrieve."""

    gold: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def score(self, seq: int, req: TraceRequest, user_id: str, answer: str,
              memory_ids: list[str], *, measured: bool) -> Scores:
        """Score row ``seq``, then record it as evidence for later rows of its fact."""
        score = best_f1(answer, req.references)
        stale_f1 = best_f1(answer, req.stale_references)
        stale = None
        if score is not None and stale_f1 is not None:
            stale = stale_f1 >= WRONG_BELOW and stale_f1 > score
        key = (user_id, req.fact_id or "")
        gold = self.gold.get(key, []) if req.fact_id else []
        hit = None
        if measured and gold and req.kind not in ("statement", "update"):
            hit = bool(set(gold) & set(memory_ids))
        if req.fact_id:
            mine = memory_id(user_id, req.session_id, seq)
            if req.kind in ("statement", "update"):
                self.gold[key] = [mine]  # an update supersedes what was said before
            else:
                self.gold.setdefault(key, []).append(mine)
        return Scores(score, stale, hit, len(gold), holds_value(answer, req.references))
