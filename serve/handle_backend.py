"""A tier deployment seen through its handle as a memroute :class:`~memroute.llm.base.Backend`,
so the Router in the ingress is the Router of the benchmarks, unchanged."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memroute.errors import BackendUnavailable, MemrouteError
from memroute.types import Message, ModelReply
from serve.tier import GenerateCall


def tier_error(exc: BaseException, model_id: str) -> BaseException:
    """What a failed handle call means to the Router: the replica's own MemrouteError (Ray wraps
    it in a RayTaskError), BackendUnavailable when the tier cannot be reached or timed out (the
    Router then skips the tier for the whole batch), else the exception itself."""
    from ray import exceptions as ray_errors
    from ray.serve import exceptions as serve_errors

    cause = getattr(exc, "cause", None) if isinstance(exc, ray_errors.RayTaskError) else None
    if isinstance(cause, MemrouteError):
        return cause
    unreachable = (TimeoutError, ray_errors.RayActorError, serve_errors.BackPressureError,
                   serve_errors.DeploymentUnavailableError, serve_errors.RequestCancelledError)
    if isinstance(exc, unreachable):
        return BackendUnavailable(f"tier {model_id} unavailable ({type(exc).__name__})", field="model")
    return exc


class HandleBackend:
    """Blocking calls through a ``DeploymentHandle``: the ingress runs the Router in a worker
    thread, never on the replica's event loop. Token counting uses a local copy of the tier's
    tokenizer when there is one (the same files as the engine's, so the same counts) and saves
    a round trip per memory line; otherwise it asks the tier."""

    def __init__(
        self, handle: Any, model_id: str, tokenizer: Any | None = None, *, timeout_s: float | None = None
    ) -> None:
        self.handle = handle
        self.model_id = model_id
        self._tokenizer = tokenizer
        self.timeout_s = timeout_s  # a call that takes longer: the tier counts as down for it

    def generate(
        self, messages: Sequence[Message], *, max_tokens: int = 32,
        stop: Sequence[str] | None = None, temperature: float = 0.0,
    ) -> ModelReply:
        return self.generate_many([messages], max_tokens=max_tokens, stop=stop, temperature=temperature)[0]

    def generate_many(
        self, batch: Sequence[Sequence[Message]], *, max_tokens: int = 32,
        stop: Sequence[str] | None = None, temperature: float = 0.0,
    ) -> list[ModelReply]:
        if not batch:
            return []
        call = GenerateCall(
            prompts=tuple(tuple(m) for m in batch), max_tokens=max_tokens, temperature=temperature,
            stop=tuple(stop) if stop else None,
        )
        try:
            return self.handle.generate.remote(call).result(timeout_s=self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - translated, never swallowed
            raise tier_error(exc, self.model_id) from exc

    def count_tokens(self, messages: Sequence[Message]) -> int:
        if self._tokenizer is not None:
            from memroute.llm.chat import chat_prompt_ids

            return len(chat_prompt_ids(self._tokenizer, messages))
        return self.handle.count_tokens.remote(list(messages)).result()

    def count_text_tokens(self, text: str) -> int:
        if self._tokenizer is not None:
            from memroute.llm.chat import text_token_count

            return text_token_count(self._tokenizer, text)
        return self.handle.count_text_tokens.remote(text).result()

    def close(self) -> None:  # the tier deployment owns the engine
        pass
