"""The replay against a running memroute endpoint: the Serve app through the ``openai`` client.

Each wave's requests (distinct users) go out concurrently, one thread each, exactly as a drop-in
agent would send them (its ``messages``, ``user``, the API key from ``api_key_env``); the routing
report comes back in the response's ``memroute`` object. Every request carries
``Idempotency-Key: <run>:<request id>``: a request that was in flight when a replay was killed is
sent again on resume, and the server answers it from its idempotency table instead of routing
and storing it a second time. The API key picks the tenant, so the trace's ``tenant`` column is
not sent; the server numbers its own turn-pairs, so evidence hits are not measured over HTTP.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from memroute.config.replay import ReplayConfig
from memroute.datasets.records import TraceRequest
from memroute.errors import ConfigError
from memroute.eval.replay.driver import Checkpoint, replay_strategy
from memroute.eval.replay.outcome import Outcome, TierPrice, from_memroute_report
from memroute.eval.replay.progress import Progress
from memroute.eval.replay.strategies import Wave


class HttpStrategy:
    """memroute behind HTTP, seen as a replay strategy."""

    stores_memory = False  # the server stores, but with its own turn-pair ids

    def __init__(self, client: Any, model: str, prices: Sequence[TierPrice], run: str,
                 concurrency: int, name: str = "memroute") -> None:
        self.client = client
        self.model = model
        self.prices = list(prices)
        self.run = run
        self.name = name
        self.pool = ThreadPoolExecutor(max_workers=concurrency)

    def _one(self, req: TraceRequest) -> Outcome:
        reply = self.client.chat.completions.create(
            model=self.model, user=req.user_id,
            messages=[{"role": m.role, "content": m.content} for m in req.messages],
            extra_headers={"Idempotency-Key": f"{self.run}:{req.request_id}"},
        )
        report = (reply.model_extra or {}).get("memroute")
        if report is None:
            raise ConfigError("the target answered without a memroute object: is it a memroute "
                              "endpoint?", field="target")
        return from_memroute_report(reply.choices[0].message.content or "", report, self.prices)

    def answer_many(self, wave: Wave) -> list[Outcome]:
        return list(self.pool.map(self._one, [req for _, req in wave]))

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def client_for(cfg: ReplayConfig) -> Any:
    from openai import OpenAI

    key = os.environ.get(cfg.api_key_env)
    if not key:
        raise ConfigError(f"environment variable {cfg.api_key_env!r} (api_key_env) holds no API key "
                          f"for {cfg.target}", field="api_key_env")
    base = cfg.target.rstrip("/")
    # max_retries=0: a retry is the replay's own decision (resume), always with the same key.
    return OpenAI(base_url=f"{base}/v1", api_key=key, timeout=cfg.http_timeout_s, max_retries=0)


def replay_http(cfg: ReplayConfig, prices: Sequence[TierPrice], requests: Sequence[TraceRequest],
                checkpoint: Checkpoint, *, run: str, progress: bool = True,
                client: Any | None = None, timing: dict[str, float] | None = None) -> None:
    strategy = HttpStrategy(client or client_for(cfg), "memroute", prices, run, cfg.concurrency)
    bar = Progress(len(requests), len(checkpoint.done), enabled=progress)
    bar.start("memroute (http)")
    try:
        replay_strategy(strategy, requests, checkpoint, concurrency=cfg.concurrency,
                        on_wave=bar.update, timing=timing)
    finally:
        bar.close()
        strategy.close()
