"""What a :class:`ModelReply` holds, so the engines agree: log-prob helpers, stop strings, tool
calls in the text.

Conventions (identical for transformers, vLLM, OpenAI HTTP and the mock):

* ``prompt_tokens`` is the length of the prompt rendered with the model's own chat template with
  the generation prompt (``apply_chat_template(..., add_generation_prompt=True, tokenize=True)``),
  offered tools included (:func:`memroute.llm.chat.chat_prompt_ids`).
* ``logprobs`` / ``alt_logprobs`` cover exactly the tokens that make up the returned text: the
  end-of-sequence token and the tokens of a matched stop string are excluded (vLLM reports both,
  transformers generates both), and ``completion_tokens == len(logprobs)``. A reply that called
  tools keeps the log-probs of every generated token (the call's tokens included) although its
  ``text`` is only the content around the calls.
* ``alt_logprobs[i]`` is the log-prob of the best token other than the chosen one at position
  ``i`` (from the engine's top-2), for a top-2 margin confidence. With greedy decoding it is
  ``<= logprobs[i]`` (equal on an exact tie).
* Log-probs are those of the model's raw distribution (before temperature and penalties), as
  vLLM reports them.
* ``token_texts`` / ``top_logprobs`` (only when ``options.logprobs``) cover the same tokens as
  ``logprobs``: each token's decoded text, and the ``options.top_logprobs`` most likely tokens at
  that position as ``(text, logprob)``, best first.
* ``latency_s`` is the wall time of the engine call that produced the reply: for an in-process
  batch (``generate_many`` on transformers / vLLM) every reply carries the whole batch's time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memroute.llm.options import GenerationOptions
    from memroute.types import ModelReply


def alt_logprob(candidates: Iterable[tuple[object, float]], chosen: object) -> float:
    """Best log-prob among ``candidates`` other than ``chosen`` (one occurrence of it is skipped).

    ``candidates`` are ``(token, logprob)`` pairs from an engine's top-k (token ids, or token
    strings for an OpenAI server). ``-inf`` when the engine reported no other token.
    """
    best = -math.inf
    skipped = False
    for token, lp in candidates:
        if not skipped and token == chosen:
            skipped = True
            continue
        if lp > best:
            best = float(lp)
    return best


def top_n(candidates: Iterable[tuple[str, float]], n: int) -> list[tuple[str, float]]:
    """The ``n`` best ``(text, logprob)`` candidates, best first (stable on ties)."""
    if n <= 0:
        return []
    ranked = sorted(((str(t), float(lp)) for t, lp in candidates), key=lambda c: -c[1])
    return ranked[:n]


def apply_tool_calls(reply: ModelReply, options: GenerationOptions | None) -> ModelReply:
    """Parse ``reply.text`` for calls of the offered tools (when tools are on): ``tool_calls``
    set, ``finish_reason = "tool_calls"``, ``text`` the remaining content. Log-probs stay."""
    if options is None or not options.tools_on:
        return reply
    from memroute.llm.tool_calls import parse_tool_calls

    content, calls = parse_tool_calls(reply.text, options.tools)
    if calls:
        reply.text, reply.tool_calls, reply.finish_reason = content, calls, "tool_calls"
    return reply


def find_stop(text: str, stop: Sequence[str] | None) -> int | None:
    """Index of the earliest stop-string occurrence in ``text`` (None when there is none)."""
    positions = [text.find(s) for s in (stop or ()) if s]
    positions = [p for p in positions if p >= 0]
    return min(positions) if positions else None


def token_starts(pieces: Sequence[str]) -> list[int]:
    """Character offset where each token's text starts, from the per-token decoded pieces."""
    starts, pos = [], 0
    for p in pieces:
        starts.append(pos)
        pos += len(p)
    return starts


def tokens_before(starts: Sequence[int], end: int) -> int:
    """Number of tokens whose text starts before character ``end``.

    These are the tokens that contribute to ``text[:end]``; a token that straddles the cut is
    kept, a token lying entirely inside a stop string (or after it) is dropped.
    """
    return sum(1 for s in starts if s < end)


def cut_at_stop(
    text: str, starts: Sequence[int], stop: Sequence[str] | None
) -> tuple[str, int, bool]:
    """Truncate ``text`` at the earliest stop string.

    Returns ``(text, tokens_to_keep, stopped)``; ``tokens_to_keep`` is ``len(starts)`` when no
    stop string occurs.
    """
    pos = find_stop(text, stop)
    if pos is None:
        return text, len(starts), False
    return text[:pos], tokens_before(starts, pos), True
