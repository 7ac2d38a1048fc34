"""Grounding: an extracted fact is kept only if its source turn says it, for one key only.

A small model under a grammar produces schema-valid facts that no turn states: measured on the
built-in set with Qwen2.5-0.5B (25 keys, 4 turns per call), 126 of 160 facts had a value that
does not occur in the turn they cite, and a name in a turn was filed under every name-like key
(dog, cat, niece, manager). Two checks, applied per fact after the strict parse:

- **the value occurs in its source turn**, compared on lower-cased letters and digits at word
  boundaries ("10:15" matches "10:15 am"; "$80" matches "80"): in the user's words for an
  ``explicit`` fact, anywhere in the turn for an ``inferred`` one;
- **one key per (turn, value)**: a value the output files under several keys from one turn is
  ambiguous, and all of those facts are dropped.

This is a filter on a valid output, not a repair: the output was parsed whole first (one bad
item refuses it), and what is dropped is counted (``ExtractionResult.ungrounded``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence

from memroute.memory.facts.types import EXPLICIT, FactInput
from memroute.types import TurnPair

_WORD = re.compile(r"[^\W_]+")


def normalized(text: str) -> str:
    """Lower-cased words (letters and digits), single-spaced, padded for boundary matches."""
    return " " + " ".join(_WORD.findall(text.lower())) + " "


def grounded(fact: FactInput, turn: TurnPair) -> bool:
    """Whether ``turn`` states ``fact``'s value (see the module doc)."""
    value = normalized(fact.value)
    if not value.strip():
        return False
    said = turn.user_text if fact.source == EXPLICIT else f"{turn.user_text}\n{turn.assistant_text}"
    return value in normalized(said)


def ground(facts: Sequence[FactInput], turns: Mapping[int, TurnPair]
           ) -> tuple[list[FactInput], int]:
    """The facts that pass both checks, in order, and how many were dropped; ``turns``: the
    call's turns by ``TurnPair.id`` (a fact's ``turn_id``)."""
    keys: dict[tuple[int | None, str], set[str]] = defaultdict(set)
    for f in facts:
        keys[(f.turn_id, normalized(f.value))].add(f.key)
    kept = [f for f in facts
            if f.turn_id in turns and grounded(f, turns[f.turn_id])
            and len(keys[(f.turn_id, normalized(f.value))]) == 1]
    return kept, len(facts) - len(kept)


__all__ = ["ground", "grounded", "normalized"]
