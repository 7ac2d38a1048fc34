"""A cascade tier as a Ray Serve deployment: one engine per replica, calls merged into batches.

Our own thin deployment around the memroute back end rather than Ray Serve LLM's: the Router
needs per-token log-probabilities *and* the top-2 alternatives, exact prompt counts with the
model's chat template, and the same code path the benchmarks measure; and ``ray.serve.llm``
would add its own unpinned dependencies (``ray[llm]`` pins a CUDA vLLM) and its placement-group
scheduling, which starves a 2-core machine (see docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ray import serve

from memroute.config.schema import AssetsConfig, ModelConfig
from memroute.llm.options import GenerationOptions
from memroute.types import Message, ModelReply


@dataclass(frozen=True)
class GenerateCall:
    """One caller's batch of prompts and its decoding settings (``options``: the client's
    sampling / log-prob / tool options, None for the engine's defaults)."""

    prompts: tuple[tuple[Message, ...], ...]
    max_tokens: int = 32
    temperature: float = 0.0
    stop: tuple[str, ...] | None = None
    options: GenerationOptions | None = None

    def group_key(self) -> tuple[object, ...]:
        """Calls with equal keys can share one engine batch."""
        return (self.max_tokens, self.temperature, self.stop,
                self.options.key() if self.options is not None else None)


_END = object()


@serve.deployment
class TierDeployment:
    def __init__(
        self, model: ModelConfig, assets: AssetsConfig, max_batch_size: int, batch_wait_timeout_s: float
    ) -> None:
        from memroute import build
        from memroute.logs import quiet_third_party_logs

        quiet_third_party_logs()
        self.backend = build.backend(model, build.asset_store(assets))
        self._engine_lock = threading.Lock()  # one engine batch at a time per replica
        self.generate_batch.set_max_batch_size(max_batch_size)
        self.generate_batch.set_batch_wait_timeout_s(batch_wait_timeout_s)

    async def generate(self, call: GenerateCall) -> list[ModelReply]:
        return await self.generate_batch(call)

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.01)
    async def generate_batch(self, calls: list[GenerateCall]) -> list[list[ModelReply]]:
        return await asyncio.to_thread(self._run, calls)

    async def generate_stream(self, call: GenerateCall) -> AsyncIterator[str | ModelReply]:
        """The back end's stream for the call's one prompt: text deltas, then the reply.

        The back end's iterator runs in a worker thread holding the engine lock (no batch runs
        beside it); items cross to this event loop through a queue. A caller that goes away
        closes the iterator (the engine stops at its next step).
        """
        if len(call.prompts) != 1:
            from memroute.errors import InvalidRequest

            raise InvalidRequest(f"a stream has one prompt, got {len(call.prompts)}",
                                 field="messages")
        loop = asyncio.get_running_loop()
        items: asyncio.Queue = asyncio.Queue()
        cancelled = threading.Event()

        def work() -> None:
            try:
                with self._engine_lock:
                    it = self.backend.stream(
                        list(call.prompts[0]), max_tokens=call.max_tokens,
                        temperature=call.temperature, stop=call.stop, options=call.options,
                    )
                    try:
                        for item in it:
                            loop.call_soon_threadsafe(items.put_nowait, ("item", item))
                            if cancelled.is_set():
                                break
                    finally:
                        close = getattr(it, "close", None)
                        if close is not None:
                            close()
            except BaseException as exc:  # noqa: BLE001 - re-raised on the event loop
                loop.call_soon_threadsafe(items.put_nowait, ("error", exc))
            finally:
                loop.call_soon_threadsafe(items.put_nowait, ("end", _END))

        worker = loop.run_in_executor(None, work)
        try:
            while True:
                kind, item = await items.get()
                if kind == "end":
                    break
                if kind == "error":
                    raise item
                yield item
        finally:
            cancelled.set()
            await asyncio.shield(worker)

    def _run(self, calls: Sequence[GenerateCall]) -> list[list[ModelReply]]:
        """Calls with the same decoding settings share one engine batch; replies go back in order."""
        out: list[list[ModelReply]] = [[] for _ in calls]
        groups: dict[tuple[object, ...], list[int]] = {}
        for i, c in enumerate(calls):
            groups.setdefault(c.group_key(), []).append(i)
        for members in groups.values():
            first = calls[members[0]]
            prompts = [list(p) for i in members for p in calls[i].prompts]
            kwargs: dict[str, Any] = {"max_tokens": first.max_tokens,
                                      "temperature": first.temperature, "stop": first.stop}
            if first.options is not None:  # back ends without options keep working
                kwargs["options"] = first.options
            with self._engine_lock:
                replies = self.backend.generate_many(prompts, **kwargs)
            pos = 0
            for i in members:
                n = len(calls[i].prompts)
                out[i] = replies[pos : pos + n]
                pos += n
        return out

    def count_tokens(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] = ()
    ) -> int:
        if tools:
            return self.backend.count_tokens(messages, tools=tools)
        return self.backend.count_tokens(messages)

    def count_text_tokens(self, text: str) -> int:
        return self.backend.count_text_tokens(text)

    def model_id(self) -> str:
        return self.backend.model_id

    def __del__(self) -> None:
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.close()
