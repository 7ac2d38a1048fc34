"""Grounding: an extracted fact is kept only if its source turn says it, for one key only.

A small model under a grammar produces schema-valid facts that no turn states: measured on the
built-in set with Qwen2.5-0.5B (25 keys, 4 turns per call), 126 of 160 facts had a value that
does not occur in the turn they cite, and a name in a turn was filed under every name-like key
(dog, cat, niece, manager). Two checks, applied per fact after the strict parse:

- **the value occurs in its source turn**, compared on lower-cased letters and digits at word
  boundaries ("10:15" matches "10:15 am"; "$80" matches "80"): in the user's words for an
  ``explicit`` fact, anywhere in the turn for an ``inferred`` one. A value that another turn of
  the same call states instead is moved to the nearest such turn (a turn number one off is the
  0.5B model's usual slip);
- **one key per (turn, value)**: a value the output files under several keys from one turn is
  ambiguous, and all of those facts are dropped.

This is a filter on a valid output, not a repair: the output was parsed whole first (one bad
item refuses it), and what is dropped is counted (``ExtractionResult.ungrounded``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace

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
    call's turns by ``TurnPair.id`` (a fact's ``turn_id``), in conversation order.

    A value the cited turn does not state but another turn of the call does is re-attributed to
    the nearest such turn: the 0.5B model often cites the turn next to the right one (measured
    on the planted corrections: every value right, two of three turn numbers one off)."""
    order = list(turns.values())
    placed: list[FactInput] = []
    for f in facts:
        turn = _stating_turn(f, order, turns.get(f.turn_id))
        if turn is not None:
            placed.append(f if turn.id == f.turn_id else replace(f, turn_id=turn.id))
    keys: dict[tuple[int | None, str], set[str]] = defaultdict(set)
    for f in placed:
        keys[(f.turn_id, normalized(f.value))].add(f.key)
    kept = [f for f in placed if len(keys[(f.turn_id, normalized(f.value))]) == 1]
    return kept, len(facts) - len(kept)


def _stating_turn(fact: FactInput, order: Sequence[TurnPair], cited: TurnPair | None
                  ) -> TurnPair | None:
    """The cited turn if it states the value, else the nearest turn of the call that does."""
    if cited is not None and grounded(fact, cited):
        return cited
    at = order.index(cited) if cited is not None else len(order) - 1
    stating = [(abs(i - at), -i, t) for i, t in enumerate(order) if grounded(fact, t)]
    return min(stating, key=lambda s: s[:2])[2] if stating else None


__all__ = ["ground", "grounded", "normalized"]
