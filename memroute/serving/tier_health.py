"""Each tier's recent health as the requests saw it, for ``/readyz``.

A tier is *failing* when its latest call failed (down, timed out, crashed) and no call has
succeeded since; requests then escalate past it (``RouteDecision.tiers_skipped``). The endpoint
is not ready only when every tier is failing: one tier down degrades cost or quality, not service.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from memroute.errors import NoTierAnswered
from memroute.types import RouteResult


@dataclass
class _Tier:
    failures: int = 0
    last_failure_at: float | None = None
    last_success_at: float | None = None

    @property
    def failing(self) -> bool:
        return self.last_failure_at is not None and (
            self.last_success_at is None or self.last_failure_at > self.last_success_at)


class TierHealth:
    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self._tiers = [_Tier() for _ in names]
        self._lock = threading.Lock()

    def observe(self, results: Sequence[RouteResult | Exception]) -> None:
        """Record a routed batch: the tiers each request called successfully or skipped."""
        now = time.time()
        with self._lock:
            for r in results:
                if isinstance(r, RouteResult):
                    for c in r.calls:
                        self._tiers[c.tier].last_success_at = now
                    skipped = r.decision.tiers_skipped
                elif isinstance(r, NoTierAnswered):
                    skipped = range(len(self._tiers))
                else:
                    continue
                for t in skipped:
                    self._tiers[t].failures += 1
                    self._tiers[t].last_failure_at = now

    def report(self) -> tuple[list[dict], list[str]]:
        """Per-tier status, and the readiness problem when every tier is failing."""
        with self._lock:
            status = [
                {"name": n, "state": "failing" if t.failing else "ok", "failures": t.failures,
                 "last_failure_at": t.last_failure_at, "last_success_at": t.last_success_at}
                for n, t in zip(self.names, self._tiers)
            ]
        failing = all(s["state"] == "failing" for s in status)
        problems = ["every model tier is failing: requests get 503"] if failing and status else []
        return status, problems
