"""Confidence from a model's own token log-probabilities (paper Eq. 1 and two variants).

All variants map to [0, 1] with the same floor ``l_min`` so one ``tau`` means the same
thing across them: ``c = clamp((x - l_min) / |l_min|, 0, 1)``.
"""

from __future__ import annotations

from typing import Callable

from memroute.registry import Registry
from memroute.types import ModelReply

ConfidenceFn = Callable[[ModelReply, float], float]
CONFIDENCE: Registry[ConfidenceFn] = Registry("confidence")


def normalize(value: float, l_min: float) -> float:
    """Eq. 1: ``l_min`` maps to 0, 0 maps to 1, clamped to [0, 1]."""
    if l_min >= 0:
        raise ValueError(f"l_min must be negative, got {l_min}")
    return min(1.0, max(0.0, (value - l_min) / abs(l_min)))


@CONFIDENCE.register("mean_logprob")
def mean_logprob(reply: ModelReply, l_min: float = -3.0) -> float:
    """The paper's signal: mean log-probability over all generated tokens."""
    if not reply.logprobs:
        return 0.0  # nothing generated: never accept silently
    return normalize(sum(reply.logprobs) / len(reply.logprobs), l_min)


@CONFIDENCE.register("min_token")
def min_token(reply: ModelReply, l_min: float = -3.0) -> float:
    """The least likely token decides: one hallucinated entity is enough to escalate."""
    if not reply.logprobs:
        return 0.0
    return normalize(min(reply.logprobs), l_min)


@CONFIDENCE.register("top2_margin")
def top2_margin(reply: ModelReply, l_min: float = -3.0) -> float:
    """Mean gap between the chosen token and the runner-up, in nats (0 gap -> 0, |l_min| -> 1).

    A small gap means the model was torn between two continuations even when the chosen
    token's own probability looks fine.
    """
    if not reply.logprobs or not reply.alt_logprobs:
        return 0.0
    margins = [c - a for c, a in zip(reply.logprobs, reply.alt_logprobs)]
    return normalize(sum(margins) / len(margins) + l_min, l_min)


def confidence(reply: ModelReply, name: str = "mean_logprob", l_min: float = -3.0) -> float:
    return CONFIDENCE.get(name, field="router.confidence")(reply, l_min)
