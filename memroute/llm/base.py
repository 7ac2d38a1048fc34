"""The back-end protocol every model engine implements (vLLM, transformers, OpenAI HTTP)."""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from memroute.types import Message, ModelReply


@runtime_checkable
class Backend(Protocol):
    """A chat model that returns per-token log-probabilities.

    Decoding is greedy when ``temperature == 0`` so runs are reproducible.
    ``count_tokens`` renders ``messages`` with the model's own chat template
    (generation prompt included) and counts them with the model's own tokenizer,
    so it equals ``ModelReply.prompt_tokens`` for the same messages.
    """

    model_id: str

    def generate(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 32,
        stop: Sequence[str] | None = None,
        temperature: float = 0.0,
    ) -> ModelReply: ...

    def generate_many(
        self,
        batch: Sequence[Sequence[Message]],
        *,
        max_tokens: int = 32,
        stop: Sequence[str] | None = None,
        temperature: float = 0.0,
    ) -> list[ModelReply]: ...

    def count_tokens(self, messages: Sequence[Message]) -> int: ...

    def count_text_tokens(self, text: str) -> int: ...

    def close(self) -> None: ...
