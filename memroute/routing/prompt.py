"""Inject retrieved memories into a chat prompt within a token budget.

Memories go into the system context (the paper's "system-context messages"), appended to the
client's own system prompt when it sent one: the user's current facts first when the router has
a facts provider (:mod:`memroute.routing.facts_block`), then the retrieved turn-pairs. The
budget is counted with the *target* model's tokenizer, so the same memories may fit one tier
and not another; the probe tier can be given a smaller budget than escalations. The client's
earlier turns follow the system message, trimmed oldest-first to what the tier's context
leaves (:func:`trim_history`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from memroute.types import Message, RetrievalHit

MEMORY_HEADER = "Memories of earlier conversations with this user (oldest first):"
TURN_OVERHEAD_TOKENS = 6  # role markers and separators of one chat turn, about, across templates


def memory_line(hit: RetrievalHit) -> str:
    return f"- {hit.memory.text}"


def select_within_budget(
    hits: Sequence[RetrievalHit], budget_tokens: int, count_text_tokens: Callable[[str], int]
) -> list[RetrievalHit]:
    """Best-ranked memories whose rendered block fits in ``budget_tokens``.

    Walks the ranking in order and skips a memory that does not fit (a shorter, lower-ranked
    one may still fit), then checks the exact token count of the final block.
    """
    if budget_tokens <= 0 or not hits:
        return []
    chosen: list[RetrievalHit] = []
    used = count_text_tokens(MEMORY_HEADER)
    for hit in hits:
        cost = count_text_tokens(memory_line(hit)) + 1  # +1 for the joining newline
        if used + cost <= budget_tokens:
            chosen.append(hit)
            used += cost
    # Token counts are not exactly additive across joins; trim until the real block fits.
    while chosen and count_text_tokens(render_memory_block(chosen)) > budget_tokens:
        chosen.pop()
    return chosen


def render_memory_block(hits: Sequence[RetrievalHit]) -> str:
    """Chronological order, so a later correction reads after the value it replaces."""
    ordered = sorted(hits, key=lambda h: (h.memory.session_time, h.memory.session_id, h.memory.turn_index))
    return "\n".join([MEMORY_HEADER, *map(memory_line, ordered)])


def build_messages(
    system_prompt: str,
    query: str,
    hits: Sequence[RetrievalHit] = (),
    history: Sequence[Message] = (),
    tail: Sequence[Message] = (),
    facts: str = "",
) -> list[Message]:
    """System prompt (with the facts block and the memory block appended), the conversation so
    far, the question, and what followed it in this turn (the assistant's tool calls and their
    results)."""
    blocks = [b for b in (facts, render_memory_block(hits) if hits else "") if b]
    system = "\n\n".join([system_prompt, *blocks])
    return [Message("system", system), *history, Message("user", query), *tail]


def trim_history(
    history: Sequence[Message], budget_tokens: int, count_text_tokens: Callable[[str], int]
) -> list[Message]:
    """The most recent turns that fit ``budget_tokens`` (oldest dropped first), in order.
    Each turn costs its text plus a few tokens of chat template; the caller checks the exact
    count of the whole prompt and drops more if the estimate was short."""
    kept: list[Message] = []
    used = 0
    for m in reversed(history):
        cost = count_text_tokens(m.content) + TURN_OVERHEAD_TOKENS
        if used + cost > budget_tokens:
            break
        kept.append(m)
        used += cost
    return kept[::-1]


def history_within(
    history: Sequence[Message],
    room: int,
    build: Callable[[Sequence[Message]], list[Message]],
    count: Callable[[list[Message]], int],
    count_text_tokens: Callable[[str], int],
) -> list[Message]:
    """The most recent turns of ``history`` with which the prompt ``build(turns)`` counts at
    most ``room`` tokens (``count``: the tier's exact prompt count); oldest dropped first."""
    kept = trim_history(history, room - count(build(())), count_text_tokens)
    while kept and count(build(kept)) > room:
        kept = kept[1:]  # the estimate was short: drop the oldest until it fits
    return kept
