"""The mock engine's rules (``engine_args.rules``): which answer and log-probs a request gets.

Checked at load, so a bad rule fails with its field named rather than on a request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memroute.errors import ConfigError
from memroute.text.memory_line import last_bulleted_line, parse_memory_line

TEMPLATE_FIELDS = ("query", "memory", "memory_q", "memory_a", "tool_result")
_RULE_KEYS = ("match", "memories", "logprob", "margin", "answer")


@dataclass(frozen=True)
class Rule:
    """Matched on the last user message (``re.search``) and/or on injected memories.

    ``logprob``: one value, or a list cycled over the tokens (so min-token and mean differ);
    ``margin``: nats between each chosen token and its runner-up (top-2 confidence);
    ``answer``: a template with ``{query}``, ``{memory}``, ``{memory_q}``, ``{memory_a}``
    (and ``{tool_result}``, the last tool message's content, empty without one).
    """

    match: re.Pattern[str] | None
    memories: bool | None
    logprob: tuple[float, ...] | None
    margin: float | None
    answer: str | None

    def applies(self, query: str, has_memories: bool) -> bool:
        if self.memories is not None and self.memories != has_memories:
            return False
        return self.match is None or self.match.search(query) is not None


def logprob_values(value: Any, field: str) -> tuple[float, ...]:
    values = value if isinstance(value, (list, tuple)) else [value]
    if not values or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0 for v in values
    ):
        raise ConfigError(
            f"{field} must be a log-probability <= 0 or a non-empty list of them, got {value!r}",
            field=field,
        )
    return tuple(float(v) for v in values)


def non_negative(value: Any, field: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{field} must be a number >= 0, got {value!r}", field=field)
    return float(value)


def answer_template(value: Any, field: str) -> str:
    """An answer template, checked now so a stray brace fails at load, not on a request."""
    try:
        value.format(**dict.fromkeys(TEMPLATE_FIELDS, ""))
    except (AttributeError, KeyError, IndexError, ValueError) as exc:
        names = ", ".join(f"{{{f}}}" for f in TEMPLATE_FIELDS)
        raise ConfigError(
            f"{field} must be a string using only {names}: {exc!r}", field=field
        ) from None
    return value


def parse_rule(raw: Any, field: str) -> Rule:
    """One ``engine_args.rules`` entry, refused with the offending field named."""
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"{field} must be a mapping with keys {', '.join(_RULE_KEYS)}", field=field
        )
    unknown = sorted(set(raw) - set(_RULE_KEYS))
    if unknown:
        raise ConfigError(
            f"{field}.{unknown[0]} is not a rule key. Available: {', '.join(_RULE_KEYS)}",
            field=f"{field}.{unknown[0]}",
        )
    match = raw.get("match")
    try:
        pattern = re.compile(match) if match is not None else None
    except (re.error, TypeError) as exc:
        raise ConfigError(
            f"{field}.match is not a regular expression: {exc}", field=f"{field}.match"
        ) from None
    memories = raw.get("memories")
    if memories is not None and not isinstance(memories, bool):
        raise ConfigError(
            f"{field}.memories must be true, false or null", field=f"{field}.memories"
        )
    answer = raw.get("answer")
    answer = answer_template(answer, f"{field}.answer") if answer is not None else None
    logprob = (
        logprob_values(raw["logprob"], f"{field}.logprob") if raw.get("logprob") is not None else None
    )
    margin = (
        non_negative(raw["margin"], f"{field}.margin") if raw.get("margin") is not None else None
    )
    return Rule(pattern, memories, logprob, margin, answer)


def latest_memory(system: str) -> tuple[str, str, str] | None:
    """``(memory, question, answer)`` of the latest injected memory, or None; a memory shown
    without its reply answers with its user turn.

    Found by the memory lines' own shape, not by the routing layer's block header (back ends sit
    below routing). The block closes the system prompt in chronological order: the last is newest.
    """
    line = last_bulleted_line(system)  # an injected memory: "- " + TurnPair.text()
    if line is None:
        return None
    parsed = parse_memory_line(line)
    if parsed is None:
        return None
    # No reply shown (a statement's acknowledgement is hidden): what it says is the user's turn.
    return line, parsed.turn, parsed.reply or parsed.turn
