"""Prometheus metrics land on the caller's registry with the values of the routed request."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from memroute.api.metrics import ApiMetrics, render

from .test_api_responses import make_result


def sample(reg: CollectorRegistry, name: str, **labels: str) -> float | None:
    return reg.get_sample_value(name, labels)


def test_record_counts_routing_tokens_cost_and_latency():
    reg = CollectorRegistry()
    m = ApiMetrics(reg)
    m.record(make_result(), "acme", 1.5)
    m.record(make_result(escalated=False), "acme", 0.2)
    assert sample(reg, "memroute_requests_total", status="200", tenant="acme") == 2
    assert sample(reg, "memroute_escalations_total", tenant="acme") == 1
    assert sample(reg, "memroute_answered_total", tier="0") == 1
    assert sample(reg, "memroute_answered_total", tier="1") == 1
    # Tier 0 was called twice (40/25/3 each), tier 1 once (42/60/5).
    for tier, comp, n in [("0", "base", 80), ("0", "injected", 50), ("0", "output", 6),
                          ("1", "base", 42), ("1", "injected", 60), ("1", "output", 5)]:
        assert sample(reg, "memroute_tokens_total", tier=tier, component=comp) == n
    assert sample(reg, "memroute_eff_cost_total", tier="0") == pytest.approx(2 * 4.8125)
    assert sample(reg, "memroute_eff_cost_total", tier="1") == pytest.approx(106.75)
    # Confidence 0.31 twice on tier 0: not in the <=0.3 bucket, in <=0.4.
    assert sample(reg, "memroute_confidence_count", tier="0") == 2
    assert sample(reg, "memroute_confidence_bucket", tier="0", le="0.3") == 0
    assert sample(reg, "memroute_confidence_bucket", tier="0", le="0.4") == 2
    assert sample(reg, "memroute_confidence_sum", tier="1") == pytest.approx(0.82)
    assert sample(reg, "memroute_tier_latency_seconds_sum", tier="1") == pytest.approx(0.9)
    assert sample(reg, "memroute_request_latency_seconds_sum", tier="1") == pytest.approx(1.5)
    assert sample(reg, "memroute_request_latency_seconds_sum", tier="0") == pytest.approx(0.2)
    assert sample(reg, "memroute_request_eff_cost_count") == 2
    assert sample(reg, "memroute_request_eff_cost_sum") == pytest.approx(4.8125 * 2 + 106.75)


def test_errors_are_counted_by_status_and_tenant():
    reg = CollectorRegistry()
    m = ApiMetrics(reg)
    m.record_error(401)
    m.record_error(400, "acme")
    m.record_error(400, "acme")
    assert sample(reg, "memroute_requests_total", status="401", tenant="unknown") == 1
    assert sample(reg, "memroute_requests_total", status="400", tenant="acme") == 2


def test_registries_are_private_and_render_parses():
    before = {m.name for m in REGISTRY.collect()}
    a, b = CollectorRegistry(), CollectorRegistry()
    ApiMetrics(a).record(make_result(), "acme", 1.0)
    ApiMetrics(b)  # a second instance does not clash with the first
    assert {m.name for m in REGISTRY.collect()} == before  # nothing on the global registry
    text = render(a)
    assert isinstance(text, bytes)
    names = {f.name for f in text_string_to_metric_families(text.decode())}
    assert {"memroute_requests", "memroute_escalations", "memroute_confidence", "memroute_tokens",
            "memroute_eff_cost", "memroute_tier_latency_seconds",
            "memroute_request_latency_seconds"} <= names
    assert sample(b, "memroute_requests_total", status="200", tenant="acme") is None
