"""The compaction call: one model (a cascade tier) writes a summary of at most ``node_tokens``.

Every call is a :class:`~memroute.types.CallRecord` priced like any other (EffCost with the
tier's P), so a strategy that compacts pays for it in the same currency as the answers it saves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memroute.accounting.cost import Pricing
from memroute.llm.base import Backend
from memroute.types import CallRecord, Message

COMPACT_SYSTEM = (
    "You compact a user's chat history into a short note that an assistant will later use to "
    "answer questions about this user. Keep every specific detail: names, numbers, dates, times, "
    "codes, places, decisions, and what the user does not do. When a value changed, keep only the "
    "newest value and say that it replaced the old one. Write plain sentences, at most {words} "
    "words, no preamble."
)
COMPACT_USER = "Compact this history:\n\n{text}"


@dataclass(frozen=True)
class Compaction:
    summary: str
    call: CallRecord


def fit_tokens(text: str, limit: int, count_text_tokens) -> str:  # type: ignore[no-untyped-def]
    """``text`` cut at a word boundary so it counts at most ``limit`` tokens (a model's reply can
    count a token more as text than as generated ids)."""
    words = text.split()
    while words and count_text_tokens(" ".join(words)) > limit:
        words = words[: max(0, len(words) - max(1, len(words) // 16))]
    return " ".join(words)


class Compactor:
    def __init__(self, backend: Backend, pricing: Pricing, *, tier: int, node_tokens: int,
                 batch_size: int = 16) -> None:
        self.backend = backend
        self.pricing = pricing
        self.tier = tier
        self.node_tokens = node_tokens
        self.batch_size = max(1, batch_size)

    def messages(self, text: str) -> list[Message]:
        words = max(8, int(self.node_tokens * 0.7))  # ~0.75 words per token, with room to spare
        return [Message("system", COMPACT_SYSTEM.format(words=words)),
                Message("user", COMPACT_USER.format(text=text))]

    def count_text_tokens(self, text: str) -> int:
        return self.backend.count_text_tokens(text)

    def compact_many(self, texts: Sequence[str]) -> list[Compaction]:
        out: list[Compaction] = []
        for lo in range(0, len(texts), self.batch_size):
            prompts = [self.messages(t) for t in texts[lo:lo + self.batch_size]]
            for reply in self.backend.generate_many(prompts, max_tokens=self.node_tokens):
                summary = fit_tokens(reply.text.strip(), self.node_tokens, self.count_text_tokens)
                call = CallRecord(
                    tier=self.tier, model_id=self.backend.model_id,
                    base_prompt_tokens=reply.prompt_tokens, injected_tokens=0,
                    output_tokens=reply.completion_tokens,
                    eff_cost=self.pricing.eff_cost(reply.prompt_tokens, reply.completion_tokens,
                                                   reply.cached_tokens),
                    latency_s=reply.latency_s, confidence=0.0, accepted=True,
                    params_b=self.pricing.params_b, cached_tokens=reply.cached_tokens,
                )
                out.append(Compaction(summary, call))
        return out
