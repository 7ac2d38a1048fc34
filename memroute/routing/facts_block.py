"""The user's current facts as a prompt block, within the memory token budget.

The router injects this block before the retrieved turn-pairs (:mod:`memroute.routing.prompt`):
the facts are counted first and the turn-pairs fill what the budget leaves. Only facts that are
*active* at the request's time are rendered, so a superseded value is never shown as current
(an old value may still appear in a retrieved turn-pair, dated, as history). Asserted and
inferred facts are kept apart as at session start
(:func:`memroute.memory.facts.session.context_block`), whose lines this block reuses.

The facts come from a *provider*: a :class:`~memroute.memory.facts.FactStore` (anything with
``active(user_id, now=...)``) or a plain callable ``user_id -> facts``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from memroute.errors import ConfigError
from memroute.memory.facts.session import fact_line, context_block
from memroute.memory.facts.types import ACTIVE, INFERRED, Fact
from memroute.routing.prompt import MEMORY_BLOCK_STARTS
from memroute.types import format_session_date

log = logging.getLogger(__name__)

FACTS_HEADER_START = "Current facts about the user (as of "


class ActiveFacts(Protocol):
    def active(self, user_id: str, *, now: float | None = None) -> list[Fact]: ...


FactsSource = ActiveFacts | Callable[[str], Sequence[Fact]]
FactsReader = Callable[[str, float], list[Fact]]  # (user_id, now) -> the active facts


def facts_reader(source: FactsSource) -> FactsReader:
    """One calling convention for both kinds of provider; whatever a provider returns, only
    the facts active and unexpired at ``now`` are kept."""
    active = getattr(source, "active", None)
    if callable(active):
        def read(user_id: str, now: float) -> list[Fact]:
            return current(active(user_id, now=now), now)
    elif callable(source):
        def read(user_id: str, now: float) -> list[Fact]:
            return current(source(user_id), now)  # type: ignore[operator]
    else:
        raise ConfigError("the facts provider must be a fact store (with .active) or a "
                          f"callable user_id -> facts, got {type(source).__name__}", field="facts")
    return read


def read_facts(
    reader: FactsReader, members: Sequence[tuple[int, str, float]], *, isolate: bool,
    degraded: set[int],
) -> dict[int, list[Fact]]:
    """Each member's ``(index, user_id, now)`` active facts. An unreadable fact store
    degrades the member to turn-pairs alone when isolating (its index is added to
    ``degraded``, as for unreadable memory); else the error propagates."""
    out: dict[int, list[Fact]] = {}
    for i, user_id, now in members:
        try:
            out[i] = reader(user_id, now)
        except Exception as exc:
            if not isolate:
                raise
            log.warning("facts of request %d unreadable; answering without them: %s", i, exc)
            degraded.add(i)
    return out


def current(facts: Sequence[Fact], now: float) -> list[Fact]:
    """The facts a prompt may state as current: active and not expired at ``now``."""
    return [f for f in facts if f.status == ACTIVE and f.visible(now)]


def facts_header(as_of: float) -> str:
    return f"{FACTS_HEADER_START}{format_session_date(int(as_of))}):"


def render_facts_block(facts: Sequence[Fact], as_of: float) -> str:
    """The header and the facts by key, asserted before inferred; empty without facts."""
    if not facts:
        return ""
    return f"{facts_header(as_of)}\n{context_block(sorted(facts, key=_by_key))}"


def select_facts(
    facts: Sequence[Fact], budget_tokens: int, count_text_tokens: Callable[[str], int],
    as_of: float,
) -> tuple[list[Fact], str]:
    """The facts whose block fits ``budget_tokens`` and that block. Asserted facts before
    inferred ones, the most recently valid first; a fact that does not fit is skipped (a
    shorter one may still fit), then the exact count of the block is checked."""
    facts = current(facts, as_of)
    if budget_tokens <= 0 or not facts:
        return [], ""
    ranked = sorted(facts, key=lambda f: (f.source == INFERRED, -f.valid_from, f.key))
    # the headers: the block's own, and the asserted / inferred ones of context_block
    used = count_text_tokens(render_facts_block(ranked[:1], as_of)) - count_text_tokens(
        fact_line(ranked[0]))
    chosen: list[Fact] = []
    for f in ranked:
        cost = count_text_tokens(fact_line(f)) + 1  # +1 for the joining newline
        if used + cost <= budget_tokens:
            chosen.append(f)
            used += cost
    # An inferred section adds its own header; and token counts are not additive across joins.
    block = render_facts_block(chosen, as_of)
    while chosen and count_text_tokens(block) > budget_tokens:
        chosen.pop()
        block = render_facts_block(chosen, as_of)
    return sorted(chosen, key=_by_key), block


def injected_facts(system: str) -> str:
    """The facts block inside a prompt's system message ("" when there is none)."""
    start = system.find(FACTS_HEADER_START)
    if start < 0:
        return ""
    ends = [e for mark in MEMORY_BLOCK_STARTS if (e := system.find(f"\n\n{mark}", start)) >= 0]
    return system[start:min(ends)] if ends else system[start:]


def _by_key(f: Fact) -> tuple[str, int]:
    return (f.key, f.id)
