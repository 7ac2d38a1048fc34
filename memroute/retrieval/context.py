"""Query handling and session context around the fused ranking.

Two small, measured adjustments (LoCoMo, 10 conversations, turn-level Recall@5, MiniLM):

- :func:`focus_query` leaves out of the *dense* query the words that nearly every memory of the
  user contains. In a two-person chat the speakers' names are in every turn-pair; MiniLM gives
  them a large share of the query vector, so "When did Caroline paint a sunrise?" lands on any
  turn with Caroline in it. Dense alone: 0.43 -> 0.56. BM25 needs no such help: its idf already
  weighs those words near zero.
- :func:`add_session_context` lets a candidate borrow from its neighbours: evidence often spans
  adjacent turn-pairs of one session (a question, then the detail two turns later), and a pair
  next to a strong hit is more likely to be relevant than an isolated one. Hybrid: +0.03.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from memroute.retrieval.fusion import FusedHit
from memroute.types import Memory

# Below this many memories a word's document share says little (with 3 memories, 2 of them
# make 67%), so the query is left as it is.
MIN_DOCS_FOR_FOCUS = 20
_WORD = re.compile(r"\S+")


def focus_query(
    query: str, df_ratio: Callable[[str], float], threshold: float, num_docs: int
) -> str:
    """``query`` without the words found in at least ``threshold`` of the user's memories.

    ``df_ratio(word)`` is the share of memories containing the word. Returns the query unchanged
    when focusing is off (``threshold >= 1``), the user has few memories, or nothing would remain.
    """
    if threshold >= 1.0 or num_docs < MIN_DOCS_FOR_FOCUS:
        return query
    kept = [w for w in _WORD.findall(query) if df_ratio(w) < threshold]
    return " ".join(kept) if kept else query


def add_session_context(
    fused: Sequence[FusedHit], memories: Mapping[int, Memory], weight: float
) -> list[FusedHit]:
    """Each candidate's score plus ``weight`` x the best score among the candidates that are its
    neighbours (turn_index +/- 1 in the same session); re-sorted, ties keep the fused order.

    Scores are min-max normalized over the candidates first, so the weight means the same for
    every fusion: RRF scores are nearly flat (1/61, 1/62, ...) and a raw bonus would swamp them.
    """
    if weight <= 0 or not fused:
        return list(fused)
    lo = min(h.score for h in fused)
    span = max(h.score for h in fused) - lo
    norm = {h.id: (h.score - lo) / span if span > 0 else 1.0 for h in fused}
    score_at = {(memories[h.id].session_id, memories[h.id].turn_index): norm[h.id] for h in fused}
    boosted = []
    for position, h in enumerate(fused):
        m = memories[h.id]
        near = [score_at.get((m.session_id, m.turn_index + d)) for d in (-1, 1)]
        best = max((s for s in near if s is not None), default=0.0)
        # Move toward a stronger neighbour, never past it: the top candidate stays on top, so an
        # exact keyword hit is not overtaken by a cluster of look-alikes next to each other.
        boosted.append((norm[h.id] + weight * max(0.0, best - norm[h.id]), position, h))
    boosted.sort(key=lambda t: (-t[0], t[1]))
    return [h._replace(score=s) for s, _, h in boosted]
