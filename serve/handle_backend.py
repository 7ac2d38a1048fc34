"""A tier deployment seen through its handle as a memroute :class:`~memroute.llm.base.Backend`,
so the Router in the ingress is the Router of the benchmarks, unchanged."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from memroute.errors import BackendUnavailable, MemrouteError
from memroute.llm.options import GenerationOptions
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
        options: GenerationOptions | None = None,
    ) -> ModelReply:
        return self.generate_many([messages], max_tokens=max_tokens, stop=stop,
                                  temperature=temperature, options=options)[0]

    def generate_many(
        self, batch: Sequence[Sequence[Message]], *, max_tokens: int = 32,
        stop: Sequence[str] | None = None, temperature: float = 0.0,
        options: GenerationOptions | None = None,
    ) -> list[ModelReply]:
        if not batch:
            return []
        call = GenerateCall(
            prompts=tuple(tuple(m) for m in batch), max_tokens=max_tokens, temperature=temperature,
            stop=tuple(stop) if stop else None, options=options,
        )
        try:
            return self.handle.generate.remote(call).result(timeout_s=self.timeout_s)
        except Exception as exc:
            raise tier_error(exc, self.model_id) from exc

    def stream(
        self, messages: Sequence[Message], *, max_tokens: int = 32,
        stop: Sequence[str] | None = None, temperature: float = 0.0,
        options: GenerationOptions | None = None,
    ) -> Iterator[str | ModelReply]:
        """The tier's ``generate_stream`` through a streaming handle, iterated synchronously:
        text deltas, then the final :class:`ModelReply`. Errors are translated as
        :func:`tier_error` does for ``generate``; ``timeout_s`` does not apply (a stream has no
        single result to wait for)."""
        call = GenerateCall(
            prompts=(tuple(messages),), max_tokens=max_tokens, temperature=temperature,
            stop=tuple(stop) if stop else None, options=options,
        )
        responses: Any = None
        finished = False
        try:
            responses = self.handle.options(stream=True).generate_stream.remote(call)
            yield from responses
            finished = True
        except Exception as exc:
            raise tier_error(exc, self.model_id) from exc
        finally:
            cancel = getattr(responses, "cancel", None)
            if not finished and callable(cancel):  # the caller stopped early, or it failed
                cancel()

    def count_tokens(
        self, messages: Sequence[Message], *, tools: Sequence[Mapping[str, Any]] = (),
        tool_choice: str | Mapping[str, Any] | None = None,
    ) -> int:
        if self._tokenizer is not None:
            from memroute.llm.chat import chat_prompt_ids

            return len(chat_prompt_ids(self._tokenizer, messages, tools, tool_choice))
        if tools:
            return self.handle.count_tokens.remote(list(messages), [dict(t) for t in tools]).result()
        return self.handle.count_tokens.remote(list(messages)).result()

    def count_text_tokens(self, text: str) -> int:
        if self._tokenizer is not None:
            from memroute.llm.chat import text_token_count

            return text_token_count(self._tokenizer, text)
        return self.handle.count_text_tokens.remote(text).result()

    def close(self) -> None:  # the tier deployment owns the engine
        pass
