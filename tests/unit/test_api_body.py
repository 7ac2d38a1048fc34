"""The raw body before the JSON parser (memroute/api/body.py), the admin role of the key table
and the tenant labels of the metrics: the hardening of the endpoint's operator surfaces."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry

from memroute.api.body import BodyLimit, check_media_type, decode_json, json_depth
from memroute.api.metrics import ApiMetrics, tenant_label
from memroute.api.tenancy import ApiKeys
from memroute.config.api import ApiConfig, ApiLimits, check_api_config
from memroute.errors import ConfigError, Forbidden, InvalidRequest, PayloadTooLarge, Unauthorized, UnsupportedMediaType

LIMITS = ApiLimits(max_body_bytes=100, max_json_depth=4)


@pytest.mark.parametrize("raw,depth", [
    (b"{}", 1), (b"[[[]]]", 3), (b'{"a": "[[[[[[", "b": [1]}', 2),  # brackets in strings do not count
    (b'{"a": "\\"[[[[", "b": 1}', 1), (b"[" * 100_000, 100_000), (b"42", 0),
])
def test_json_depth_counts_real_nesting_only(raw, depth):
    assert json_depth(raw) == depth


def test_a_deep_body_is_refused_before_the_decoder_recurses():
    with pytest.raises(InvalidRequest) as err:
        decode_json(b"[" * 100_000, ApiLimits())  # the decoder alone raised RecursionError: a 500
    assert err.value.field == "body" and "nests deeper" in err.value.message
    assert decode_json(b'{"a": [[[1]]]}', LIMITS) == {"a": [[[1]]]}
    with pytest.raises(InvalidRequest, match="nests deeper"):
        decode_json(b'{"a": [[[[1]]]]}', LIMITS)
    with pytest.raises(InvalidRequest, match="not valid JSON"):
        decode_json(b"{nope", LIMITS)


def test_the_body_limit_refuses_while_streaming_and_from_content_length():
    with pytest.raises(PayloadTooLarge):
        BodyLimit(LIMITS, "101")  # refused before a byte is read
    with pytest.raises(InvalidRequest) as err:
        BodyLimit(LIMITS, "lots")
    assert err.value.field == "content-length"
    limit = BodyLimit(LIMITS)
    limit.feed(b"x" * 60)
    with pytest.raises(PayloadTooLarge) as err:
        limit.feed(b"x" * 60)  # passes the limit: refused now, the rest never read
    assert err.value.field == "body"
    ok = BodyLimit(LIMITS, "10")
    ok.feed(b'{"a": 1}')
    assert json.loads(ok.body()) == {"a": 1}


@pytest.mark.parametrize("content_type", [None, "", "application/json", "application/json; charset=utf-8",
                                          "Application/JSON", "application/vnd.api+json"])
def test_json_media_types_pass(content_type):
    check_media_type(content_type)


@pytest.mark.parametrize("content_type", ["text/plain", "multipart/form-data; boundary=x",
                                          "application/x-www-form-urlencoded"])
def test_other_media_types_are_415(content_type):
    with pytest.raises(UnsupportedMediaType) as err:
        check_media_type(content_type)
    assert err.value.status == 415 and err.value.field == "content-type"


def test_admin_keys_are_a_role_of_their_own():
    keys = ApiKeys.from_config({"sk-t": "acme"}, admin_keys=["sk-admin"], environ={})
    keys.authenticate_admin("Bearer sk-admin")
    with pytest.raises(Forbidden):
        keys.authenticate_admin("Bearer sk-t")  # a tenant's key on an operator endpoint
    for bad in (None, "", "Bearer sk-nope", "Basic abc"):
        with pytest.raises(Unauthorized):
            keys.authenticate_admin(bad)
    with pytest.raises(Forbidden):
        keys.authenticate("Bearer sk-admin")  # an admin key is no tenant: no chat, no memories
    assert keys.authenticate("Bearer sk-t") == "acme"


def test_admin_keys_from_the_environment_and_the_refusals_name_the_setting():
    keys = ApiKeys.from_config({"sk-t": "acme"}, admin_env_vars=["MEMROUTE_ADMIN_KEYS"],
                               environ={"MEMROUTE_ADMIN_KEYS": "sk-a1, sk-a2"})
    keys.authenticate_admin("Bearer sk-a2")
    with pytest.raises(ConfigError) as err:
        ApiKeys.from_config({"sk-t": "acme"}, admin_keys=["sk-t"], environ={})
    assert err.value.field == "api.admin_keys" and "sk-t" not in err.value.message  # key not echoed
    none = ApiKeys.from_config({"sk-t": "acme"}, environ={})
    with pytest.raises(Forbidden, match="MEMROUTE_ADMIN_KEYS"):
        none.authenticate_admin("Bearer sk-t")


def test_tenant_labels_can_be_hashed_or_turned_off():
    assert tenant_label("acme") == "acme"
    hashed = tenant_label("acme", "hashed")
    assert hashed.startswith("t-") and "acme" not in hashed and hashed == tenant_label("acme", "hashed")
    assert tenant_label("acme", "off") == tenant_label("globex", "off") == "all"
    registry = CollectorRegistry()
    metrics = ApiMetrics(registry, tenant_labels="hashed")
    metrics.record_error(400, "acme")
    text = "\n".join(f"{m.name} {s.labels}" for m in registry.collect() for s in m.samples)
    assert "acme" not in text and hashed in text
    with pytest.raises(ConfigError) as err:
        check_api_config(ApiConfig(metrics_tenant_labels="secret"))
    assert err.value.field == "api.metrics_tenant_labels"
