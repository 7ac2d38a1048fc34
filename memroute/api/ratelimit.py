"""Per-tenant rate limits (``api.rate_limits``, ``api.tenant_rate_limits``): token buckets.

Each tenant has up to two buckets:

- requests: holds up to ``burst`` requests and refills at ``requests_per_s``; each admitted
  request takes one. Refused: ``retry_after_s`` is when the bucket holds one request again.
- tokens: holds up to ``tokens_per_min`` and refills at ``tokens_per_min / 60`` per second. A
  request is admitted while the bucket is not in debt (>= 0); its actual prompt + completion
  tokens are charged once it is answered (:meth:`TenantLimiter.charge`) and may take the bucket
  below zero. Refused: ``retry_after_s`` is when the refill brings it back to zero.

A request is admitted only when both buckets allow it, and a refused request takes nothing
(``retry_after_s`` is then the later of the two waits, so a retry at that time is admitted
unless other requests got there first). The limiter is thread-safe (one lock; every operation is
O(1)), keeps no global state, and tracks at most ``max_tenants`` tenants (least recently seen
dropped first: a dropped tenant starts again with full buckets, the lenient side).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from memroute.config.api import ApiConfig, RateLimitConfig
from memroute.errors import RateLimited

# Float slack: a retry exactly ``retry_after_s`` later must be admitted despite rounding.
_EPS = 1e-9


@dataclass
class _Buckets:
    limits: RateLimitConfig
    capacity: int | None  # request bucket size (None: no request limit)
    requests: float  # requests available
    tokens: float  # tokens available (may be negative: charged after the answer)
    at: float  # clock time of the last refill


class TenantLimiter:
    """Token buckets per tenant; :meth:`admit` before the work, :meth:`charge` after it."""

    def __init__(
        self,
        default: RateLimitConfig,
        overrides: Mapping[str, RateLimitConfig] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_tenants: int = 100_000,
    ) -> None:
        if max_tenants < 1:
            raise ValueError("max_tenants must be at least 1")
        self.default = default
        self.overrides = dict(overrides or {})
        self.clock = clock
        self.max_tenants = max_tenants
        self._buckets: OrderedDict[str, _Buckets] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def from_config(
        cls, cfg: ApiConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> TenantLimiter | None:
        """The limiter of ``api.rate_limits`` / ``api.tenant_rate_limits``; None without limits."""
        if not cfg.rate_limits.limited and not any(
            lim.limited for lim in cfg.tenant_rate_limits.values()
        ):
            return None
        return cls(cfg.rate_limits, cfg.tenant_rate_limits, clock=clock)

    def limits_of(self, tenant: str) -> RateLimitConfig:
        """The tenant's override if it has one (as a whole), else the default."""
        return self.overrides.get(tenant, self.default)

    # -- the two operations ----------------------------------------------------------------------

    def admit(self, tenant: str) -> None:
        """Take one request from ``tenant``'s buckets, or raise :class:`RateLimited` (taking
        nothing) with the time until a retry is admitted."""
        with self._lock:
            b = self._refilled(tenant)
            lim = b.limits
            waits: list[tuple[float, str]] = []
            if b.capacity is not None and b.requests < 1.0 - _EPS:
                waits.append(((1.0 - b.requests) / lim.requests_per_s, "requests"))
            if lim.tokens_per_min is not None and b.tokens < -_EPS:
                waits.append((-b.tokens / (lim.tokens_per_min / 60.0), "tokens"))
            if not waits:
                if b.capacity is not None:
                    b.requests = max(b.requests - 1.0, 0.0)
                return
            retry_after, kind = max(waits)
            headers = self._headers(b)
        if kind == "requests":
            what = f"{_num(lim.requests_per_s)} requests/s"
        else:
            what = f"{_num(lim.tokens_per_min)} tokens/min"
        raise RateLimited(
            f"tenant {tenant} is over its limit of {what}; retry after {_num(max(retry_after, 0.001))} s",
            retry_after_s=retry_after,
            tenant=tenant,
            limit_type=kind,
            headers=headers,
        )

    def charge(self, tenant: str, tokens: int) -> None:
        """Charge an answered request's prompt + completion tokens (no-op without a token
        limit); the bucket may go into debt, refusing the tenant's next requests until refilled."""
        if tokens <= 0:
            return
        with self._lock:
            b = self._refilled(tenant)
            if b.limits.tokens_per_min is not None:
                b.tokens -= tokens

    # -- introspection (tests, headers) ----------------------------------------------------------

    def available(self, tenant: str) -> tuple[float | None, float | None]:
        """``(requests, tokens)`` available to ``tenant`` now (None where unlimited)."""
        with self._lock:
            b = self._refilled(tenant)
            return (
                b.requests if b.capacity is not None else None,
                b.tokens if b.limits.tokens_per_min is not None else None,
            )

    def __len__(self) -> int:
        with self._lock:
            return len(self._buckets)

    # -- internals (the lock is held) ------------------------------------------------------------

    def _refilled(self, tenant: str) -> _Buckets:
        now = self.clock()
        b = self._buckets.get(tenant)
        if b is None:
            lim = self.limits_of(tenant)
            cap = lim.request_burst
            b = _Buckets(lim, cap, float(cap or 0), float(lim.tokens_per_min or 0), now)
            self._buckets[tenant] = b
            while len(self._buckets) > self.max_tenants:
                self._buckets.popitem(last=False)
            return b
        self._buckets.move_to_end(tenant)
        elapsed = max(now - b.at, 0.0)  # a clock that steps back refills nothing
        b.at = max(now, b.at)
        lim = b.limits
        if b.capacity is not None:
            b.requests = min(float(b.capacity), b.requests + elapsed * lim.requests_per_s)
        if lim.tokens_per_min is not None:
            refill = elapsed * lim.tokens_per_min / 60.0
            b.tokens = min(float(lim.tokens_per_min), b.tokens + refill)
        return b

    @staticmethod
    def _headers(b: _Buckets) -> dict[str, str]:
        """OpenAI's ``x-ratelimit-*`` headers: the bucket size, what is left, and the time until
        the bucket is full again (``reset``)."""
        lim, out = b.limits, {}
        if b.capacity is not None:
            full_in = (b.capacity - b.requests) / lim.requests_per_s
            out["x-ratelimit-limit-requests"] = str(b.capacity)
            out["x-ratelimit-remaining-requests"] = str(max(math.floor(b.requests + _EPS), 0))
            out["x-ratelimit-reset-requests"] = f"{_num(full_in)}s"
        if lim.tokens_per_min is not None:
            full_in = (lim.tokens_per_min - b.tokens) / (lim.tokens_per_min / 60.0)
            out["x-ratelimit-limit-tokens"] = str(lim.tokens_per_min)
            out["x-ratelimit-remaining-tokens"] = str(max(math.floor(b.tokens + _EPS), 0))
            out["x-ratelimit-reset-tokens"] = f"{_num(full_in)}s"
        return out


def _num(x: float) -> str:
    """5.0 -> "5", 0.2000000001 -> "0.2", 1234.5678 -> "1234.568"."""
    return f"{round(x, 3):.15g}"


def retry_after_headers(retry_after_s: float) -> dict[str, str]:
    """``retry-after`` in whole seconds (rounded up, at least 1) and the exact ``retry-after-ms``
    (which the openai client prefers)."""
    return {
        "retry-after": str(max(1, math.ceil(retry_after_s - _EPS))),
        "retry-after-ms": str(max(1, math.ceil(retry_after_s * 1000.0 - 1e-6))),
    }
