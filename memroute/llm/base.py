"""The back-end protocol every model engine implements (vLLM, transformers, OpenAI HTTP)."""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Protocol, Sequence, runtime_checkable

from memroute.llm.options import GenerationOptions
from memroute.types import Message, ModelReply


@runtime_checkable
class Backend(Protocol):
    """A chat model that returns per-token log-probabilities.

    Decoding is greedy when ``temperature == 0`` so runs are reproducible.
    ``count_tokens`` renders ``messages`` with the model's own chat template
    (generation prompt included) and counts them with the model's own tokenizer,
    so it equals ``ModelReply.prompt_tokens`` for the same messages (and the same ``tools``:
    offered tools are part of the prompt).

    ``options`` (:mod:`memroute.llm.options`): top_p, seed, penalties, token log-probs for the
    client, tools. With tools offered, a reply that calls them has ``tool_calls`` set and
    ``finish_reason == "tool_calls"``; its log-probs cover the call's tokens.

    ``stream`` generates one answer piece by piece as the engine produces it (the text
    increments, then the complete :class:`ModelReply`, as ``generate`` would return it): the
    tier that answers a streaming request for sure streams live (:mod:`memroute.routing.live`).
    """

    model_id: str

    def generate(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 32,
        stop: Sequence[str] | None = None,
        temperature: float = 0.0,
        options: GenerationOptions | None = None,
    ) -> ModelReply: ...

    def generate_many(
        self,
        batch: Sequence[Sequence[Message]],
        *,
        max_tokens: int = 32,
        stop: Sequence[str] | None = None,
        temperature: float = 0.0,
        options: GenerationOptions | None = None,
    ) -> list[ModelReply]: ...

    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 32,
        stop: Sequence[str] | None = None,
        temperature: float = 0.0,
        options: GenerationOptions | None = None,
    ) -> Iterator[str | ModelReply]: ...

    def count_tokens(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] = (),
        tool_choice: str | Mapping[str, Any] | None = None,
    ) -> int: ...

    def count_text_tokens(self, text: str) -> int: ...

    def close(self) -> None: ...
