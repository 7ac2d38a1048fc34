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
from collections.abc import Sequence
from dataclasses import dataclass

from ray import serve

from memroute.config.schema import AssetsConfig, ModelConfig
from memroute.types import Message, ModelReply


@dataclass(frozen=True)
class GenerateCall:
    """One caller's batch of prompts and its decoding settings."""

    prompts: tuple[tuple[Message, ...], ...]
    max_tokens: int = 32
    temperature: float = 0.0
    stop: tuple[str, ...] | None = None


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

    def _run(self, calls: Sequence[GenerateCall]) -> list[list[ModelReply]]:
        """Calls with the same decoding settings share one engine batch; replies go back in order."""
        out: list[list[ModelReply]] = [[] for _ in calls]
        groups: dict[tuple[object, ...], list[int]] = {}
        for i, c in enumerate(calls):
            groups.setdefault((c.max_tokens, c.temperature, c.stop), []).append(i)
        for (max_tokens, temperature, stop), members in groups.items():
            prompts = [list(p) for i in members for p in calls[i].prompts]
            with self._engine_lock:
                replies = self.backend.generate_many(
                    prompts, max_tokens=max_tokens, temperature=temperature, stop=stop
                )
            pos = 0
            for i in members:
                n = len(calls[i].prompts)
                out[i] = replies[pos : pos + n]
                pos += n
        return out

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return self.backend.count_tokens(messages)

    def count_text_tokens(self, text: str) -> int:
        return self.backend.count_text_tokens(text)

    def model_id(self) -> str:
        return self.backend.model_id

    def __del__(self) -> None:
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.close()
