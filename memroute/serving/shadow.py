"""A live estimate of the cheap tier's *confidently wrong* rate while serving.

On a sampled share of the requests a tier below the last one answered (its confidence reached
``tau``), the last tier answers the same prompt (the same query and the same injected memories) in
a background thread, and the two answers are compared by token F1: under ``disagree_below`` the
accepted answer counts as confidently wrong. Serving has no reference answer, so the last tier
stands in for one, as in the replay's calibration (``memroute.eval.replay.calibrate``).

Never on the request path: the response has left before the shadow call runs, a full queue drops
the sample (counted), and a failing shadow call is logged and counted, never raised.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

from memroute.config.serve import ShadowConfig
from memroute.routing.prompt import build_messages
from memroute.routing.router import RouteRequest, Tier
from memroute.text.answers import f1_score
from memroute.types import Message, RouteResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Sample:
    request: RouteRequest
    result: RouteResult


class ShadowJudge:
    def __init__(
        self,
        cfg: ShadowConfig,
        judge: Tier,
        judge_index: int,
        *,
        system_prompt: str,
        max_tokens: int,
        registry: CollectorRegistry,
        prefix: str = "memroute",
    ) -> None:
        self.cfg, self.judge, self.judge_index = cfg, judge, judge_index
        self.system_prompt, self.max_tokens = system_prompt, max_tokens
        self._rng = random.Random(cfg.seed)  # sampling of this replica only, reproducible in tests
        self._queue: queue.Queue[_Sample | None] = queue.Queue(maxsize=cfg.queue_size)
        self._counts_lock = threading.Lock()
        self._samples: dict[str, int] = {}
        self._wrong: dict[str, int] = {}
        p = prefix
        self.m_samples = Counter(f"{p}_shadow_samples", "Accepted answers checked against the last "
                                 "tier, by the tier that answered", ["tier"], registry=registry)
        self.m_wrong = Counter(f"{p}_shadow_confidently_wrong", "Checked answers the last tier "
                               "disagreed with (accepted, yet wrong by the last tier)", ["tier"],
                               registry=registry)
        self.m_rate = Gauge(f"{p}_confidently_wrong_rate", "confidently_wrong / samples of this "
                            "replica since start, by the tier that answered", ["tier"], registry=registry)
        self.m_dropped = Counter(f"{p}_shadow_dropped", "Samples dropped: queue full or the shadow "
                                 "call failed", registry=registry)
        self.m_cost = Counter(f"{p}_shadow_eff_cost", "EffCost of the shadow calls (the price of "
                              "the estimate)", registry=registry)
        self._thread = threading.Thread(target=self._run, name="shadow-judge", daemon=True)
        self._thread.start()

    def offer(self, requests: Sequence[RouteRequest], results: Sequence[RouteResult]) -> int:
        """Queue the sampled accepted-below-the-last-tier answers of one batch; returns how many."""
        queued = 0
        for request, result in zip(requests, results):
            if result.decision.answered_tier >= self.judge_index or self._rng.random() >= self.cfg.share:
                continue
            if result.tool_calls or (request.options is not None and request.options.tools_on):
                continue  # a tool turn is not an answer to compare by token F1
            try:
                self._queue.put_nowait(_Sample(request, result))
                queued += 1
            except queue.Full:
                self.m_dropped.inc()
        return queued

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Block until every queued sample is judged (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self._queue.unfinished_tasks

    def stats(self) -> dict[str, dict[str, int]]:
        with self._counts_lock:
            return {"samples": dict(self._samples), "confidently_wrong": dict(self._wrong)}

    def close(self) -> None:
        try:
            self._queue.put(None, timeout=1.0)
        except queue.Full:
            pass
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                self._queue.task_done()
                return
            batch = [first]
            while len(batch) < 16:  # whatever else waits shares one engine call
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.task_done()
                    self._queue.put(None)  # stop after this batch
                    break
                batch.append(nxt)
            try:
                self._judge(batch)
            except Exception:  # noqa: BLE001 - the estimate is best effort; requests are unaffected
                log.exception("shadow call to the last tier failed")
                self.m_dropped.inc(len(batch))
            finally:
                for _ in batch:
                    self._queue.task_done()

    def _prompt(self, s: _Sample) -> list[Message]:
        """The accepted tier's prompt, as the last tier sees it: the same system prompt, memories
        and conversation (not trimmed again: the last tier has the largest context)."""
        if s.result.messages:
            return list(s.result.messages)
        r = s.request  # a result built without its prompt (tests)
        system = self.system_prompt if r.system is None else r.system
        return build_messages(system, r.query, s.result.decision.memories, r.history)

    def _judge(self, batch: list[_Sample]) -> None:
        backend = self.judge.backend
        prompts = [self._prompt(s) for s in batch]
        replies = backend.generate_many(prompts, max_tokens=self.max_tokens)
        for sample, reply in zip(batch, replies):
            tier = str(sample.result.decision.answered_tier)
            wrong = f1_score(sample.result.answer, reply.text.strip()) < self.cfg.disagree_below
            self.m_cost.inc(self.judge.pricing.eff_cost(reply.prompt_tokens, reply.completion_tokens))
            with self._counts_lock:
                self._samples[tier] = self._samples.get(tier, 0) + 1
                self._wrong[tier] = self._wrong.get(tier, 0) + int(wrong)
                rate = self._wrong[tier] / self._samples[tier]
            self.m_samples.labels(tier=tier).inc()
            if wrong:
                self.m_wrong.labels(tier=tier).inc()
            self.m_rate.labels(tier=tier).set(rate)
