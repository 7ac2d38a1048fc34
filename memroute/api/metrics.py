"""Prometheus metrics of the routed endpoint, on a registry the caller owns.

Nothing is registered at import: :class:`ApiMetrics` puts its collectors on the
``CollectorRegistry`` it is given (one per deployment replica, or one per test), never on
prometheus_client's global registry. Label values are bounded: tiers are cascade indexes,
tenants come from the API-key table (or are hashed, or merged into one ``all``:
``api.metrics_tenant_labels``), statuses are HTTP codes.
"""

from __future__ import annotations

import hashlib

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

from memroute.types import RouteResult

CONTENT_TYPE = CONTENT_TYPE_LATEST
UNKNOWN_TENANT = "unknown"  # requests refused before the API key was checked
COMPONENTS = ("base", "injected", "history", "output")

_CONFIDENCE_BUCKETS = tuple(i / 10 for i in range(1, 11))
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# EffCost = (in + 4 out) * P / 8 spans ~10 (0.5B, short) to ~1e6 (235B, long).
_EFF_COST_BUCKETS = (10.0, 30.0, 100.0, 300.0, 1e3, 3e3, 1e4, 3e4, 1e5, 3e5, 1e6)


def tenant_label(tenant: str, mode: str = "plain") -> str:
    """The tenant as a metric label: itself, ``t-`` + 12 hex of its SHA-256, or ``all``."""
    if mode == "off":
        return "all"
    if mode == "hashed":
        return "t-" + hashlib.sha256(tenant.encode()).hexdigest()[:12]
    return tenant


class ApiMetrics:
    def __init__(
        self, registry: CollectorRegistry, *, prefix: str = "memroute", tenant_labels: str = "plain"
    ) -> None:
        self.registry = registry
        self.tenant_labels = tenant_labels
        p = prefix
        self.requests = Counter(
            f"{p}_requests", "Chat requests by HTTP status and tenant",
            ["status", "tenant"], registry=registry,
        )
        self.escalations = Counter(
            f"{p}_escalations", "Requests answered above the first tier", ["tenant"],
            registry=registry,
        )
        self.answered = Counter(
            f"{p}_answered", "Requests by the tier that answered", ["tier"], registry=registry
        )
        self.confidence = Histogram(
            f"{p}_confidence", "Confidence of each tier call", ["tier"],
            buckets=_CONFIDENCE_BUCKETS, registry=registry,
        )
        self.tokens = Counter(
            f"{p}_tokens", "Tokens by component (base prompt, injected memories, history, output) and tier",
            ["tier", "component"], registry=registry,
        )
        self.eff_cost = Counter(
            f"{p}_eff_cost", "EffCost summed over calls, by tier", ["tier"], registry=registry
        )
        self.request_eff_cost = Histogram(
            f"{p}_request_eff_cost", "EffCost of one request (all tiers tried)",
            buckets=_EFF_COST_BUCKETS, registry=registry,
        )
        self.tier_latency = Histogram(
            f"{p}_tier_latency_seconds", "Model call latency by tier", ["tier"],
            buckets=_LATENCY_BUCKETS, registry=registry,
        )
        self.memory_degraded = Counter(
            f"{p}_memory_degraded", "Requests answered without memory because it could not be "
            "read (store or embedder failing)", registry=registry,
        )
        self.tier_skipped = Counter(
            f"{p}_tier_skipped", "Requests that skipped a tier because it failed (down, timed "
            "out), by tier", ["tier"], registry=registry,
        )
        self.replays = Counter(
            f"{p}_idempotent_replays", "Requests answered from the Idempotency-Key table "
            "(no model work)", ["tenant"], registry=registry,
        )
        self.request_latency = Histogram(
            f"{p}_request_latency_seconds", "End-to-end request latency by answering tier",
            ["tier"], buckets=_LATENCY_BUCKETS, registry=registry,
        )

    def record(
        self, result: RouteResult, tenant: str, latency_s: float, *, status: int = 200
    ) -> None:
        """One answered request: its status, routing, per-call tokens, cost and latency."""
        tenant = tenant_label(tenant, self.tenant_labels)
        self.requests.labels(status=str(status), tenant=tenant).inc()
        d = result.decision
        answered = str(d.answered_tier)
        self.answered.labels(tier=answered).inc()
        if d.escalated:
            self.escalations.labels(tenant=tenant).inc()
        if d.memory_degraded:
            self.memory_degraded.inc()
        for t in d.tiers_skipped:
            self.tier_skipped.labels(tier=str(t)).inc()
        for c in result.calls:
            tier = str(c.tier)
            self.confidence.labels(tier=tier).observe(c.confidence)
            for component, n in zip(
                COMPONENTS,
                (c.base_prompt_tokens, c.injected_tokens, c.history_tokens, c.output_tokens),
            ):
                self.tokens.labels(tier=tier, component=component).inc(max(n, 0))
            self.eff_cost.labels(tier=tier).inc(max(c.eff_cost, 0.0))
            self.tier_latency.labels(tier=tier).observe(c.latency_s)
        self.request_eff_cost.observe(result.eff_cost)
        self.request_latency.labels(tier=answered).observe(latency_s)

    def record_replay(self, tenant: str) -> None:
        """A retried request answered with its first answer: a 200, but no routing counted twice."""
        tenant = tenant_label(tenant, self.tenant_labels)
        self.requests.labels(status="200", tenant=tenant).inc()
        self.replays.labels(tenant=tenant).inc()

    def record_error(self, status: int, tenant: str | None = None) -> None:
        """A refused or failed request (4xx/5xx); ``tenant`` None before authentication."""
        label = tenant_label(tenant, self.tenant_labels) if tenant else UNKNOWN_TENANT
        self.requests.labels(status=str(status), tenant=label).inc()


def render(registry: CollectorRegistry) -> bytes:
    """The text exposition format (serve it with ``Content-Type: CONTENT_TYPE``)."""
    return generate_latest(registry)
