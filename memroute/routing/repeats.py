"""One memory per repeated question: the copies of a question a user asked again collapse to one.

Users ask the same thing again and again ("what is my building gate code?", then "Can you remind
me: what's my gate code? Thanks!"), and every answered turn is stored. By the last window of a
replay, four of a request's five retrieved memories can be the same question with the same answer
(seed 17: "How many days are there from 15 October 2010 to 6 February 2011? / 185 days" four
times). The copies cost tokens on every tier, the 1.5B's most of all, and they push out what the
question needs: "which city does my sister live in?" was escalated with three copies of an old
answer, and the statement "My sister moved again, to Tbilisi" was not among its memories.

Two question pairs are copies when their answers are the same words and their questions share
``SUBJECT_OVERLAP`` of the shorter one's subject words
(:func:`memroute.routing.grounding.subject_words`, which leave out conversational filler: "Can
you remind me: in what city is my sister living? Thanks!" and "Hey, which city does my sister
live in?" share city, sister, live; "Which city does my cousin live in?" shares two of its
three and stays apart, Boise or not). Statements are never collapsed: each is the user's own
evidence. Of a group the router keeps the copy from the most trusted source (the user's own
history or a dataset, then the strongest tier, then the newest), at the rank of the group's
best hit, so grounding reads the strongest tier's answer where there is one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace

from memroute.text.memory_line import split_memory_text
from memroute.routing.grounding import subject_words
from memroute.text.turn_kind import asks_something
from memroute.types import Memory, RetrievalHit, replied_here

SUBJECT_OVERLAP = 0.75  # share of the shorter question's subject words the other must have


def trust_by(tier_models: Sequence[str]) -> Callable[[Memory], int]:
    """How far a stored reply is believed, given the cascade's models cheapest first: a user's
    or a dataset's most, then by the strength of the tier that gave it; another model least."""
    rank = {model_id: t for t, model_id in enumerate(tier_models)}
    return lambda m: len(rank) if not replied_here(m.source_model) else rank.get(m.source_model, -1)


def _answer_key(answer: str) -> str:
    return " ".join(re.findall(r"[\w'-]+", answer.lower()))


def _copies(a: tuple[frozenset[str], str], b: tuple[frozenset[str], str]) -> bool:
    (sa, ka), (sb, kb) = a, b
    if ka != kb:
        return False
    shorter = min(len(sa), len(sb))
    return shorter > 0 and len(sa & sb) >= SUBJECT_OVERLAP * shorter


def collapse_repeats(hits: Sequence[RetrievalHit], trust: Callable[[Memory], int]
                     ) -> list[RetrievalHit]:
    """``hits`` with each group of copies replaced by its most trusted member (``trust``, ties
    to the newest), in the rank of the group's first hit and with its score."""
    groups: list[list[RetrievalHit]] = []
    keys: list[tuple[frozenset[str], str] | None] = []
    for hit in hits:
        question, answer = split_memory_text(hit.memory.text)
        key = None
        if answer and asks_something(question):
            key = (subject_words(question), _answer_key(answer))
        for g, k in zip(groups, keys):
            if key is not None and k is not None and _copies(key, k):
                g.append(hit)
                break
        else:
            groups.append([hit])
            keys.append(key)
    out = []
    for g in groups:
        best = max(g, key=lambda h: (trust(h.memory), h.memory.session_time))
        out.append(best if best is g[0] else replace(best, score=g[0].score))
    return out
