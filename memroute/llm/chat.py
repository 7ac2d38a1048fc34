"""Helpers the back ends share, so the three engines agree on what a :class:`ModelReply` holds.

Conventions (identical for transformers, vLLM and OpenAI HTTP):

* ``prompt_tokens`` is the length of the prompt rendered with the model's own chat template with
  the generation prompt (``apply_chat_template(..., add_generation_prompt=True, tokenize=True)``).
* ``logprobs`` / ``alt_logprobs`` cover exactly the tokens that make up the returned text: the
  end-of-sequence token and the tokens of a matched stop string are excluded (vLLM reports both,
  transformers generates both), and ``completion_tokens == len(logprobs)``.
* ``alt_logprobs[i]`` is the log-prob of the best token other than the chosen one at position
  ``i`` (from the engine's top-2), for a top-2 margin confidence. With greedy decoding it is
  ``<= logprobs[i]`` (equal on an exact tie).
* Log-probs are those of the model's raw distribution (before temperature), as vLLM reports them.
* ``latency_s`` is the wall time of the engine call that produced the reply: for an in-process
  batch (``generate_many`` on transformers / vLLM) every reply carries the whole batch's time.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from memroute.errors import InvalidRequest
from memroute.types import Message

ROLES = ("system", "user", "assistant")


def to_chat_dicts(messages: Sequence[Message | Mapping[str, Any]]) -> list[dict[str, str]]:
    """Messages -> ``[{"role", "content"}]`` for a chat template or an OpenAI request.

    Accepts :class:`Message` objects or mappings with ``role``/``content``; raises
    :class:`InvalidRequest` naming the bad message so nothing malformed reaches a model.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidRequest("messages must be a list of messages", field="messages")
    if not messages:
        raise InvalidRequest("messages must not be empty", field="messages")
    out: list[dict[str, str]] = []
    for i, m in enumerate(messages):
        if isinstance(m, Message):
            role, content = m.role, m.content
        elif isinstance(m, Mapping):
            role, content = m.get("role"), m.get("content")
        else:
            raise InvalidRequest(
                f"messages[{i}] must be a Message or a mapping, got {type(m).__name__}",
                field=f"messages[{i}]",
            )
        if role not in ROLES:
            raise InvalidRequest(
                f"messages[{i}].role {role!r} is invalid: use one of {', '.join(ROLES)}",
                field=f"messages[{i}].role",
            )
        if not isinstance(content, str):
            raise InvalidRequest(
                f"messages[{i}].content must be a string, got {type(content).__name__}",
                field=f"messages[{i}].content",
            )
        out.append({"role": role, "content": content})
    return out


def chat_prompt_ids(tokenizer: Any, messages: Sequence[Message | Mapping[str, Any]]) -> list[int]:
    """Token ids of ``messages`` rendered with the tokenizer's chat template + generation prompt."""
    ids = tokenizer.apply_chat_template(
        to_chat_dicts(messages), add_generation_prompt=True, tokenize=True
    )
    # transformers 5 returns a BatchEncoding here; 4.x (and vLLM's wrappers on it) a plain list.
    if isinstance(ids, Mapping) or hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if ids and isinstance(ids[0], list):  # batched shape [[...]]
        ids = ids[0]
    return [int(t) for t in ids]


def text_token_count(tokenizer: Any, text: str) -> int:
    """Plain tokenizer count of ``text``: no chat template, no special tokens."""
    return len(tokenizer.encode(text, add_special_tokens=False))


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
