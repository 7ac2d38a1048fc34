"""Inject retrieved memories into a chat prompt within a token budget.

Memories go into the system context (the paper's "system-context messages"), appended to the
client's own system prompt when it sent one: the user's current facts first when the router has
a facts provider (:mod:`memroute.routing.facts_block`), then the retrieved turn-pairs. With
``position="before_question"`` the turn-pairs, which change with every question, go into a
system message of their own right before the question instead, so everything that repeats across
a user's requests (system prompt, tools, facts, the conversation so far) is a prefix an engine's
prefix cache reuses. The budget is counted with the *target* model's tokenizer, so the same memories may fit one tier
and not another; the probe tier can be given a smaller budget than escalations. The client's
earlier turns follow the system message, trimmed oldest-first to what the tier's context
leaves (:func:`trim_history`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from memroute.config.schema import RouterConfig
from memroute.errors import ConfigError
from memroute.routing.memory_view import (DATE_MODES, dates_for, only_asks, shown_reply,
                                          shows_date)
from memroute.text.memory_line import split_memory_text
from memroute.text.turn_kind import only_states
from memroute.types import Message, RetrievalHit, chronological_key, format_session_date

MEMORY_HEADER = "Memories of earlier conversations with this user (oldest first):"
RELEVANCE_HEADER = "Memories of earlier conversations with this user (most relevant first):"
NEWEST_HEADER = "Memories of earlier conversations with this user (newest first):"
TODAY = "Today is"
MEMORY_BLOCK_STARTS = (TODAY, MEMORY_HEADER, RELEVANCE_HEADER, NEWEST_HEADER)  # a block opens so
LATEST_WINS = "When memories disagree, the most recent one is correct."
TURN_OVERHEAD_TOKENS = 6  # role markers and separators of one chat turn, about, across templates
ORDERS = ("chronological", "relevance", "newest_first")
POSITIONS = ("system", "before_question")


@dataclass(frozen=True)
class MemoryLayout:
    """How the memory block shows time (each switch measured alone in docs/BENCHMARKS.md):
    ``dates``: which memories keep their ``[date]`` (``all``, ``none``, ``relative``: those with
    a relative time word, ``auto``: ``relative`` for a question asking a stated date or time,
    else ``all``; :mod:`memroute.routing.memory_view`; :meth:`for_question` resolves it);
    ``order``: chronological (oldest first, so a change reads after the value it replaces),
    relevance (retrieval rank) or newest_first (a small model leans on what it reads first: the
    latest statement leads); ``today``: the question's date heads the block (when:
    :meth:`dates_today`); ``latest_wins``: one instruction that the newest wins; ``position``:
    where the block goes (module doc);
    ``replies_hidden_from``: models whose stored replies this prompt leaves out (an escalation's:
    the cheaper tiers', :meth:`for_tier`)."""

    dates: str = "auto"
    order: str = "chronological"
    today: bool = False
    latest_wins: bool = False
    position: str = "system"
    replies_hidden_from: frozenset[str] = frozenset()

    def header(self, now: float | None, dated: bool = True) -> str:
        """The block's opening lines; "Today is ..." only when ``dated`` (:meth:`dates_today`)."""
        lines = []
        if self.today and dated and now is not None:
            lines.append(f"{TODAY} {format_session_date(int(now))}.")
        head = {"chronological": MEMORY_HEADER, "relevance": RELEVANCE_HEADER,
                "newest_first": NEWEST_HEADER}[self.order]
        lines.append(f"{head} {LATEST_WINS}" if self.latest_wins else head)
        return "\n".join(lines)

    def dates_today(self, hits: Sequence[RetrievalHit]) -> bool:
        """Whether the block says today's date: always, except for a question asking a stated
        date or time (``dates`` resolved to ``relative``) when no memory shown keeps its label.
        There the date is only one to copy: the 0.5B answered "On what day is my father's
        birthday?" with today's date over "my father's birthday is 7 August" (6 escalations on
        seed 31's 480 requests, 13 on the 2,000 trace; docs/BENCHMARKS.md, stop 47). A relative
        time word keeps its label, and so today's date beside it."""
        return self.dates != "relative" or any(shows_date(self.dates, h.memory) for h in hits)

    def for_question(self, question: str | None) -> MemoryLayout:
        """This layout with ``dates="auto"`` resolved for ``question``."""
        return replace(self, dates=dates_for(self.dates, question))

    def for_tier(self, cheaper: frozenset[str]) -> MemoryLayout:
        """This layout for a tier above models ``cheaper``: their replies left out."""
        return replace(self, replies_hidden_from=cheaper)

    def line(self, hit: RetrievalHit) -> str:
        shown = hit.memory.source_model not in self.replies_hidden_from  # names, never ""
        return memory_line(hit, shows_date(self.dates, hit.memory), reply=shown)

    def informs(self, hit: RetrievalHit) -> bool:
        """False for a memory this layout would show as a bare question: its reply hidden
        (another tier's, or ``shown_reply``'s rules) and its user turn only asking."""
        question, answer = split_memory_text(hit.memory.text)
        hidden = hit.memory.source_model in self.replies_hidden_from or not shown_reply(hit.memory)
        return not (answer and hidden and only_asks(question))


def system_prompt_for(cfg: RouterConfig, query: str, client_system: str | None) -> str:
    """The system message: the client's own, else ``router.statement_prompt`` for a turn that
    only states (an acknowledgement, not an answer), else ``router.system_prompt``."""
    if client_system is not None:
        return client_system
    states = cfg.statement_prompt and only_states(query)
    return cfg.statement_prompt if states else cfg.system_prompt


_BOOL_DATES = {"true": "all", "false": "none"}  # the switch was a bool before "auto"


def memory_layout(cfg: RouterConfig) -> MemoryLayout:
    """The layout ``router.memory_*`` / ``current_date`` / ``latest_wins`` ask for (checked)."""
    if cfg.memory_order not in ORDERS:
        raise ConfigError(f"memory_order must be one of {', '.join(ORDERS)}, got "
                          f"{cfg.memory_order!r}", field="router.memory_order")
    if cfg.memory_position not in POSITIONS:
        raise ConfigError(f"memory_position must be one of {', '.join(POSITIONS)}, got "
                          f"{cfg.memory_position!r}", field="router.memory_position")
    dates = _BOOL_DATES.get(str(cfg.memory_dates).lower(), cfg.memory_dates)
    if dates not in DATE_MODES:
        raise ConfigError(f"memory_dates must be one of {', '.join(DATE_MODES)}, got "
                          f"{cfg.memory_dates!r}", field="router.memory_dates")
    return MemoryLayout(dates=dates, order=cfg.memory_order,
                        today=cfg.current_date, latest_wins=cfg.latest_wins,
                        position=cfg.memory_position)


def memory_line(hit: RetrievalHit, dates: bool = True, reply: bool = True) -> str:
    """One memory: ``[date] Q: ... / A: ...``; a reply the prompt does not show (a change
    statement's, ``memory_view.shown_reply``; any, ``reply=False``) is left out."""
    text = hit.memory.text
    question, answer = split_memory_text(text)
    date = text[: text.index("] ") + 2] if dates and text.startswith("[") and "] " in text else ""
    if answer and (not reply or not shown_reply(hit.memory)):
        return f"- {date}Q: {question}"
    return f"- {text}" if dates else f"- Q: {question} / A: {answer}"


def select_within_budget(
    hits: Sequence[RetrievalHit], budget_tokens: int, count_text_tokens: Callable[[str], int],
    layout: MemoryLayout = MemoryLayout(), now: float | None = None,
) -> list[RetrievalHit]:
    """Best-ranked memories whose rendered block fits in ``budget_tokens``.

    Walks the ranking in order and skips a memory that does not fit (a shorter, lower-ranked
    one may still fit), then checks the exact token count of the final block.
    """
    hits = [h for h in hits if layout.informs(h)]  # a bare question tells a tier nothing
    if budget_tokens <= 0 or not hits:
        return []
    chosen: list[RetrievalHit] = []
    used = count_text_tokens(layout.header(now))
    for hit in hits:
        cost = count_text_tokens(layout.line(hit)) + 1  # +1: the joining newline
        if used + cost <= budget_tokens:
            chosen.append(hit)
            used += cost
    # Token counts are not exactly additive across joins; trim until the real block fits.
    while chosen and count_text_tokens(render_memory_block(chosen, layout, now)) > budget_tokens:
        chosen.pop()
    return chosen


def render_memory_block(hits: Sequence[RetrievalHit], layout: MemoryLayout = MemoryLayout(),
                        now: float | None = None) -> str:
    """By default chronological, so a later correction reads after the value it replaces."""
    ordered = list(hits)
    if layout.order in ("chronological", "newest_first"):
        ordered.sort(key=lambda h: chronological_key(h.memory),
                     reverse=layout.order == "newest_first")
    header = layout.header(now, layout.dates_today(ordered))
    return "\n".join([header, *(layout.line(h) for h in ordered)])


def build_messages(
    system_prompt: str,
    query: str,
    hits: Sequence[RetrievalHit] = (),
    history: Sequence[Message] = (),
    tail: Sequence[Message] = (),
    facts: str = "",
    layout: MemoryLayout = MemoryLayout(),
    now: float | None = None,
) -> list[Message]:
    """System prompt (with the facts block and the memory block appended), the conversation so
    far, the question, and what followed it in this turn (the assistant's tool calls and their
    results). ``layout.position == "before_question"``: the memory block is a system message
    of its own between the conversation and the question."""
    memories = render_memory_block(hits, layout, now) if hits else ""
    late = layout.position == "before_question"
    system = "\n\n".join([system_prompt, *(b for b in (facts, "" if late else memories) if b)])
    before = [Message("system", memories)] if late and memories else []
    return [Message("system", system), *history, *before, Message("user", query), *tail]


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
