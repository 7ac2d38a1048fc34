"""Which of a request's retrieved memories each tier of the cascade reads.

The retriever returns the request's candidates once: ``top_k`` of them, or twice that when
copies of a repeated question may be collapsed (:mod:`memroute.routing.repeats`), so that what
the copies leave is filled from further down the ranking. Then, per tier:

- ``router.repeats``: ``keep`` every copy; ``collapse`` them for every tier; ``escalation``:
  only for the tiers above the first. The 0.5B reads copies as votes: with one copy of "What's
  the code for my locker? / ZY-1685" left among five memories it answered with the gate code
  (seed 17), so the first tier may keep them while the tiers priced 30x read each once.
- ``router.escalation_memories=subject``: an escalation of a question reads only the memories
  on its subject (:func:`memroute.routing.grounding.on_subject`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from memroute.routing.grounding import on_subject
from memroute.routing.repeats import collapse_repeats
from memroute.text.turn_kind import asks_something
from memroute.types import Memory, RetrievalHit

REPEATS = ("keep", "collapse", "escalation")  # router.repeats


def candidates_k(top_k: int, repeats: str) -> int:
    """How many memories to retrieve for ``top_k`` to read."""
    return top_k if repeats == "keep" else 2 * top_k


def memories_for(t: int, hits: Sequence[RetrievalHit], query: str, *, top_k: int, repeats: str,
                 escalation_memories: str, trust: Callable[[Memory], int]) -> list[RetrievalHit]:
    """What tier ``t`` (0: the first) reads of the retrieved ``hits`` for ``query``."""
    if repeats == "collapse" or (repeats == "escalation" and t > 0):
        hits = collapse_repeats(hits, trust)
    chosen = list(hits[:top_k])
    if t > 0 and escalation_memories == "subject" and asks_something(query):
        chosen = on_subject(chosen, query)
    return chosen
