"""Every endpoint of the ingress authenticates (and rate-limits) before it reads a byte of the
body or parses its path: a caller without a key gets 401, a throttled one 429, and neither is
told anything about what it sent. Each route of the FastAPI app is called on a hand-made
request (no Ray Serve, no HTTP server) whose body the test refuses to hand over."""

from __future__ import annotations

import asyncio
import json

import pytest

from memroute.api.ratelimit import TenantLimiter
from memroute.config.api import RateLimitConfig
from memroute.config.schema import ModelConfig

from .fakes import serving_core

SMALL = ModelConfig(name="mock-small", engine="mock", params_b=0.5)
# The Serve wrapper's __del__ is a coroutine nobody awaits for an ingress made by hand.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
PUBLIC = {"/healthz", "/readyz"}  # liveness and readiness: no key by design
BAD_BODY = b'{"user": "alice", "query": [[[['  # not JSON, and the wrong media type below
PATH_VALUES = {"user": "alice", "tenant": "acme", "fact": "not-a-fact-id"}


@pytest.fixture
def ingress(tmp_path, monkeypatch):
    from serve.ingress import RouterIngress

    core = serving_core(tmp_path, monkeypatch, SMALL, api_keys={"sk-a": "acme"})
    ing = object.__new__(RouterIngress.func_or_class)
    ing.core, ing.cfg = core, core.cfg
    yield ing
    del ing.core  # the fixture closes the core, not the ingress' __del__
    core.close()


def routes():
    """(method, path template, handler name) of every route the ingress serves."""
    from fastapi.routing import APIRoute

    from serve.ingress import app

    out = [(m, r.path, r.endpoint.__name__)
           for r in app.routes if isinstance(r, APIRoute) for m in sorted(r.methods)]
    assert len(out) >= 15  # the chat, Responses, memory and admin routes are all here
    return out


def call(ingress, method, template, handler, *, key=None):
    """Run the route's handler on a request with a bad body; returns (status, body, reads),
    ``reads``: how many times the handler asked for the body."""
    from starlette.requests import Request

    params = {k: v for k, v in PATH_VALUES.items() if "{" + k + "}" in template}
    path = template.format(**params)
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(BAD_BODY)).encode())]
    if key is not None:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    scope = {"type": "http", "method": method, "path": path, "query_string": b"user=alice",
             "headers": headers, "path_params": params}
    reads = []

    async def receive():
        reads.append(1)
        return {"type": "http.request", "body": BAD_BODY, "more_body": False}

    fn = getattr(ingress, handler)
    resp = asyncio.run(fn(request=Request(scope, receive), **params))
    return resp.status_code, json.loads(resp.body), len(reads)


@pytest.mark.parametrize(("method", "template", "handler"),
                         [r for r in routes() if r[1] not in PUBLIC])
def test_no_key_is_401_before_the_body_is_read_or_the_path_parsed(ingress, method, template,
                                                                      handler):
    status, body, reads = call(ingress, method, template, handler)
    assert (status, reads) == (401, 0), (method, template, body)
    status, body, reads = call(ingress, method, template, handler, key="sk-wrong")
    assert (status, reads) == (401, 0), (method, template, body)


TENANT_ROUTES = [r for r in routes()
                 if r[1] not in PUBLIC and not r[1].startswith(("/admin", "/metrics", "/openapi"))]


@pytest.mark.parametrize(("method", "template", "handler"), TENANT_ROUTES)
def test_a_throttled_tenant_is_429_before_the_body_is_read(ingress, method, template, handler):
    """One request admitted (and counted once: a route admitting twice would 429 it), the next
    refused before its body is read; the admitted one gets the body's error, naming it."""
    ingress.core.api.limiter = TenantLimiter(RateLimitConfig(requests_per_s=0.001, burst=1),
                                             clock=lambda: 0.0)
    first, body, _ = call(ingress, method, template, handler, key="sk-a")
    assert first != 429, (method, template, body)
    status, body, reads = call(ingress, method, template, handler, key="sk-a")
    assert (status, reads) == (429, 0), (method, template, body)


def test_an_admitted_caller_still_gets_the_bodys_error(ingress):
    """Admitting first changes the order, not the answer: the bad body is still a 415."""
    for method, template, handler in TENANT_ROUTES:
        if method == "POST" and template.startswith("/v1/memory/") and "{" not in template:
            status, body, reads = call(ingress, method, template, handler, key="sk-a")
            assert status == 415 and reads == 0, (template, body)
