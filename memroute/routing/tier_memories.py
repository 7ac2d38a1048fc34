"""Which of a request's retrieved memories each tier of the cascade reads.

The retriever returns the request's candidates once: twice ``top_k`` of them when a tier may
read past the first ``top_k`` (copies collapsed, a statement's slot; else ``top_k``). Then, per
tier:

- ``router.repeats``: ``keep`` every copy; ``collapse`` them for every tier; ``escalation``:
  only for the tiers above the first. The 0.5B reads copies as votes: with one copy of "What's
  the code for my locker? / ZY-1685" left among five memories it answered with the gate code
  (seed 17), so the first tier may keep them while the tiers priced 30x read each once.
- ``router.statement_slot``: a question whose memories hold no statement of the user's on its
  subject gets the best-ranked such statement among the further candidates in place of its last
  memory. Copies of the question crowd the statements out as a user asks again ("Sorry, I
  forgot: which city does my brother live in? / A: Valencia" twice, "... brother's birthday?"
  twice, above "My brother just moved to Valencia."), and a model's reply is no evidence for its
  own tier or the ones above (:mod:`memroute.routing.grounding`): the small tier's right answer
  was escalated, and the large tier, shown none of it, invented a city.
- ``router.escalation_memories=subject``: an escalation of a question reads only the memories
  on its subject (:func:`memroute.routing.grounding.on_subject`);
  ``router.first_tier_memories=subject``: so does the first tier.
- ``router.statement_memories``: what a turn that only states reads ("We switched our caterer
  to Brightwater."; ``turn_kind.only_states``, not a task). ``none`` (default): nothing. Shown
  five memories, the 0.5B answered 227 of the 2,000-request trace's 502 statements with a
  copy of a memory line ("[22 March 2024] Q: What caterer did we choose? / A: Brightwater"),
  read at 190 injected tokens a statement; ``subject`` reads those on its subject; ``all``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from memroute.config import RouterConfig
from memroute.text.memory_line import split_memory_text
from memroute.routing.grounding import on_subject, subject_words
from memroute.routing.repeats import collapse_repeats
from memroute.text.turn_kind import asks_something, only_states
from memroute.types import Memory, RetrievalHit

REPEATS = ("keep", "collapse", "escalation")  # router.repeats
MEMORY_SCOPES = ("subject", "all")  # router.first_tier_memories, router.escalation_memories
STATEMENT_SCOPES = ("none", *MEMORY_SCOPES)  # router.statement_memories


def candidates_k(top_k: int, cfg: RouterConfig) -> int:
    """How many memories to retrieve for ``top_k`` to read."""
    return top_k if cfg.repeats == "keep" and not cfg.statement_slot else 2 * top_k


def memories_for(t: int, hits: Sequence[RetrievalHit], query: str, cfg: RouterConfig, *,
                 top_k: int, trust: Callable[[Memory], int]) -> list[RetrievalHit]:
    """What tier ``t`` (0: the first) reads of the retrieved ``hits`` for ``query``."""
    if only_states(query):
        if cfg.statement_memories == "none":
            return []
        if cfg.statement_memories == "subject":
            return on_subject(hits[:top_k], query)
    if cfg.repeats == "collapse" or (cfg.repeats == "escalation" and t > 0):
        hits = collapse_repeats(hits, trust)
    chosen = list(hits[:top_k])
    asks = asks_something(query)
    if cfg.statement_slot and asks:
        chosen = with_statement(chosen, hits[top_k:], query)
    if asks and (cfg.escalation_memories if t > 0 else cfg.first_tier_memories) == "subject":
        chosen = on_subject(chosen, query)
    return chosen


def states_on(hit: RetrievalHit, subject: frozenset[str]) -> bool:
    """The memory's user turn states something (asks nothing) sharing a word of ``subject``."""
    said = split_memory_text(hit.memory.text)[0]
    return only_states(said) and bool(subject & subject_words(said))


def with_statement(chosen: list[RetrievalHit], further: Sequence[RetrievalHit],
                   query: str) -> list[RetrievalHit]:
    """``chosen``, or, when none of it states something on ``query``'s subject, ``chosen`` with
    its last memory replaced by the best-ranked of ``further`` that does."""
    subject = subject_words(query)
    if not chosen or any(states_on(h, subject) for h in chosen):
        return chosen
    for h in further:
        if states_on(h, subject):
            return [*chosen[:-1], h]
    return chosen
