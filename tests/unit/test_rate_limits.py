"""Per-tenant rate limits: bucket arithmetic on a fake clock, overrides, isolation between
tenants, thread safety, config validation naming the field, and the 429 of the chat flow
(OpenAI's shape, ``retry-after``, no model work, nothing stored)."""

from __future__ import annotations

import sys
import threading

import pytest

from memroute.api.ratelimit import TenantLimiter, retry_after_headers
from memroute.api.responses import error_body
from memroute.config import to_object
from memroute.config.api import ApiConfig, RateLimitConfig, check_api_config
from memroute.errors import ConfigError, RateLimited

from .fakes import call_like_ingress as call
from .fakes import model_calls


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def limiter(clock=None, overrides=None, **default) -> TenantLimiter:
    return TenantLimiter(RateLimitConfig(**default), overrides, clock=clock or Clock())


def refused(lim: TenantLimiter, tenant: str = "acme") -> RateLimited:
    with pytest.raises(RateLimited) as e:
        lim.admit(tenant)
    return e.value


# ------------------------------------------------------------------------------- the buckets


def test_burst_then_refill_with_an_exact_retry_after():
    clock = Clock()
    lim = limiter(clock, requests_per_s=5)  # burst: ceil(5) = 5
    for _ in range(5):
        lim.admit("acme")
    err = refused(lim)
    assert err.retry_after_s == pytest.approx(0.2)
    assert err.message == "tenant acme is over its limit of 5 requests/s; retry after 0.2 s"
    assert err.limit_type == "requests" and err.tenant == "acme" and err.status == 429
    clock.t += 0.1
    assert refused(lim).retry_after_s == pytest.approx(0.1)  # the wait shrinks with time
    clock.t += 0.1 - 1e-6
    refused(lim)  # just before: still refused
    clock.t += 1e-6
    lim.admit("acme")  # exactly retry_after_s after the first refusal: admitted
    assert refused(lim).retry_after_s == pytest.approx(0.2)
    clock.t += 10  # a long pause refills to the burst, never beyond it
    for _ in range(5):
        lim.admit("acme")
    refused(lim)


@pytest.mark.parametrize(
    "rps, burst, admitted, retry",
    [(0.5, None, 1, 2.0), (2.5, None, 3, 0.4), (1, 3, 3, 1.0), (10, 1, 1, 0.1)],
)
def test_burst_default_and_explicit(rps, burst, admitted, retry):
    lim = limiter(requests_per_s=rps, burst=burst)
    for _ in range(admitted):
        lim.admit("acme")
    assert refused(lim).retry_after_s == pytest.approx(retry)


def test_tokens_are_charged_after_the_answer_and_refuse_until_refilled():
    clock = Clock()
    lim = limiter(clock, tokens_per_min=600)  # refills 10 tokens/s
    lim.admit("acme")
    lim.admit("acme")  # admitted while not in debt: usage is not known before the answer
    lim.charge("acme", 500)
    lim.admit("acme")  # 100 left
    lim.charge("acme", 400)  # 300 in debt
    err = refused(lim)
    assert err.retry_after_s == pytest.approx(30.0) and err.limit_type == "tokens"
    assert err.message == "tenant acme is over its limit of 600 tokens/min; retry after 30 s"
    clock.t += 29.9
    assert refused(lim).retry_after_s == pytest.approx(0.1)
    clock.t += 0.1
    lim.admit("acme")  # back at zero: admitted
    assert lim.available("acme") == (None, pytest.approx(0.0, abs=1e-6))


def test_charging_without_a_token_limit_or_with_nothing_is_a_no_op():
    lim = limiter(requests_per_s=1)
    lim.charge("acme", 10**9)
    lim.admit("acme")
    lim2 = limiter(tokens_per_min=60)
    lim2.charge("acme", 0)
    lim2.charge("acme", -5)
    assert lim2.available("acme") == (None, 60.0)


def test_a_refused_request_takes_nothing_and_waits_for_the_later_limit():
    clock = Clock()
    lim = limiter(clock, requests_per_s=1, burst=1, tokens_per_min=60)  # 1 token/s
    lim.admit("acme")
    lim.charge("acme", 63)  # 3 tokens in debt; no request left for 1 s
    err = refused(lim)
    assert err.limit_type == "tokens" and err.retry_after_s == pytest.approx(3.0)  # the later
    assert err.headers["x-ratelimit-remaining-requests"] == "0"
    assert err.headers["x-ratelimit-limit-tokens"] == "60"
    clock.t += 2.5  # a request is back, the tokens are not
    for _ in range(20):
        assert refused(lim).retry_after_s == pytest.approx(0.5)
    clock.t += 0.5
    lim.admit("acme")  # the refusals took no request
    clock.t += 0.5
    for _ in range(20):  # refused by the request bucket alone
        err = refused(lim)
        assert err.limit_type == "requests" and err.retry_after_s == pytest.approx(0.5)
    clock.t += 0.5
    lim.admit("acme")


def test_a_tenant_override_replaces_the_default():
    lim = limiter(
        overrides={"acme": RateLimitConfig(requests_per_s=3),
                   "globex": RateLimitConfig(tokens_per_min=100)},
        requests_per_s=1,
    )
    for _ in range(3):
        lim.admit("acme")
    assert "3 requests/s" in refused(lim, "acme").message
    for _ in range(100):  # the override has no request limit: unlimited requests
        lim.admit("globex")
    lim.admit("initech")  # the default: one request
    assert "1 requests/s" in refused(lim, "initech").message


def test_one_tenants_exhaustion_never_limits_another():
    lim = limiter(requests_per_s=2, tokens_per_min=100)
    lim.admit("acme")
    lim.admit("acme")
    lim.charge("acme", 10_000)
    refused(lim, "acme")
    lim.admit("globex")
    lim.admit("globex")
    assert lim.available("globex") == (pytest.approx(0.0), 100.0)


def test_many_threads_never_admit_more_than_the_burst():
    rounds, n_threads, per_thread, burst = 20, 16, 25, 50
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often: an unlocked check-then-take would race
    try:
        for _ in range(rounds):
            lim = limiter(Clock(), requests_per_s=1, burst=burst)  # a frozen clock: no refill
            admitted, refusals = [], []
            start = threading.Barrier(n_threads)

            def worker(lim=lim, admitted=admitted, refusals=refusals, start=start):
                start.wait()
                for _ in range(per_thread):
                    try:
                        lim.admit("acme")
                        admitted.append(1)
                    except RateLimited:
                        refusals.append(1)

            threads = [threading.Thread(target=worker) for _ in range(n_threads)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(admitted) == burst
            assert len(refusals) == n_threads * per_thread - burst
    finally:
        sys.setswitchinterval(interval)


def test_tracked_tenants_are_bounded():
    lim = TenantLimiter(RateLimitConfig(requests_per_s=1), clock=Clock(), max_tenants=3)
    for i in range(10):
        lim.admit(f"t{i}")
    assert len(lim) == 3


def test_no_limiter_without_limits():
    assert TenantLimiter.from_config(ApiConfig()) is None
    cfg = ApiConfig(tenant_rate_limits={"acme": RateLimitConfig(tokens_per_min=10)})
    assert TenantLimiter.from_config(cfg) is not None


def test_retry_after_headers_round_up_to_whole_seconds():
    assert retry_after_headers(0.2) == {"retry-after": "1", "retry-after-ms": "200"}
    assert retry_after_headers(2.0) == {"retry-after": "2", "retry-after-ms": "2000"}
    assert retry_after_headers(2.0001) == {"retry-after": "3", "retry-after-ms": "2001"}


# -------------------------------------------------------------------------------- the config


@pytest.mark.parametrize(
    "cfg, field",
    [
        (ApiConfig(rate_limits=RateLimitConfig(requests_per_s=0)),
         "api.rate_limits.requests_per_s"),
        (ApiConfig(rate_limits=RateLimitConfig(requests_per_s=-1.5)),
         "api.rate_limits.requests_per_s"),
        (ApiConfig(rate_limits=RateLimitConfig(requests_per_s=float("inf"))),
         "api.rate_limits.requests_per_s"),
        (ApiConfig(rate_limits=RateLimitConfig(requests_per_s=True)),
         "api.rate_limits.requests_per_s"),
        (ApiConfig(rate_limits=RateLimitConfig(requests_per_s=1, burst=0)),
         "api.rate_limits.burst"),
        (ApiConfig(rate_limits=RateLimitConfig(burst=5)), "api.rate_limits.burst"),
        (ApiConfig(rate_limits=RateLimitConfig(tokens_per_min=0)),
         "api.rate_limits.tokens_per_min"),
        (ApiConfig(tenant_rate_limits={"acme": RateLimitConfig(tokens_per_min=-1)}),
         "api.tenant_rate_limits.acme.tokens_per_min"),
        (ApiConfig(tenant_rate_limits={"acme": RateLimitConfig(requests_per_s=0)}),
         "api.tenant_rate_limits.acme.requests_per_s"),
        (ApiConfig(tenant_rate_limits={"a:b": RateLimitConfig(requests_per_s=1)}),
         "api.tenant_rate_limits"),
        (ApiConfig(tenant_rate_limits={"": RateLimitConfig(requests_per_s=1)}),
         "api.tenant_rate_limits"),
    ],
)
def test_bad_limits_fail_naming_the_field(cfg, field):
    with pytest.raises(ConfigError) as e:
        check_api_config(cfg)
    assert e.value.field == field and field in e.value.message


def test_good_limits_pass_and_load_from_yaml_shaped_config():
    cfg = to_object(
        {"rate_limits": {"requests_per_s": 5, "tokens_per_min": 20000},
         "tenant_rate_limits": {"acme": {"requests_per_s": 50, "burst": 100}}},
        ApiConfig,
    )
    assert check_api_config(cfg) is cfg
    assert cfg.rate_limits == RateLimitConfig(requests_per_s=5.0, tokens_per_min=20000)
    assert cfg.tenant_rate_limits["acme"] == RateLimitConfig(requests_per_s=50.0, burst=100)
    with pytest.raises(ConfigError) as e:
        to_object({"rate_limits": {"requests_per_sec": 5}}, ApiConfig)  # a misspelled key
    assert "requests_per_sec" in e.value.field


def test_the_serve_config_takes_rate_limits_from_the_command_line():
    from memroute.config.compose import compose_serve_config
    from memroute.config.serve import check_serve_config

    cfg = compose_serve_config("cpu-tiny", ["api.rate_limits.requests_per_s=5",
                                            "api.rate_limits.tokens_per_min=1000"])
    assert cfg.api.rate_limits == RateLimitConfig(requests_per_s=5.0, tokens_per_min=1000)
    bad = compose_serve_config("cpu-tiny", ["api.rate_limits.tokens_per_min=0"])
    with pytest.raises(ConfigError) as e:
        check_serve_config(bad)
    assert e.value.field == "api.rate_limits.tokens_per_min"


# ------------------------------------------------------------------------------ the 429 body


@pytest.mark.parametrize("kind", ["requests", "tokens"])
def test_error_body_is_openais_429(kind):
    exc = RateLimited("tenant acme is over its limit", retry_after_s=1.5, limit_type=kind)
    status, body = error_body(exc)
    assert status == 429
    assert body == {"error": {"message": "tenant acme is over its limit", "type": kind,
                              "param": None, "code": "rate_limit_exceeded"}}


# ------------------------------------------------------------------- ChatApi with ApiKeys


def _chat(text="Hello.", user="alice"):
    return {"model": "memroute", "user": user, "messages": [{"role": "user", "content": text}]}


def test_chat_api_refuses_before_parsing_with_retry_after_and_metrics():
    from prometheus_client import CollectorRegistry

    from memroute.api.handler import ChatApi
    from memroute.api.metrics import ApiMetrics, render
    from memroute.api.tenancy import ApiKeys

    cfg = ApiConfig(rate_limits=RateLimitConfig(requests_per_s=5, burst=1))
    keys = ApiKeys({"sk-a": "acme", "sk-b": "globex"})
    registry = CollectorRegistry()
    clock = Clock()
    api = ChatApi(cfg, keys, ApiMetrics(registry),
                  limiter=TenantLimiter.from_config(cfg, clock=clock))
    assert ChatApi(cfg, keys).limiter is not None and ChatApi(ApiConfig(), keys).limiter is None
    assert api.prepare(_chat(), "Bearer sk-a").tenant == "acme"
    with pytest.raises(RateLimited):
        api.prepare({"not": "a chat request"}, "Bearer sk-a")  # 429 before the body's 400
    try:
        api.prepare(_chat(), "Bearer sk-a")
    except RateLimited as exc:
        resp = api.error(exc)  # the caller does not know the tenant yet
    assert resp.status == 429
    assert resp.body["error"]["code"] == "rate_limit_exceeded"
    assert resp.body["error"]["type"] == "requests"
    assert resp.headers["retry-after"] == "1" and resp.headers["retry-after-ms"] == "200"
    assert resp.headers["x-ratelimit-limit-requests"] == "1"
    assert resp.headers["x-ratelimit-remaining-requests"] == "0"
    assert resp.headers["x-ratelimit-reset-requests"] == "0.2s"
    assert api.prepare(_chat(), "Bearer sk-b").tenant == "globex"  # another tenant: admitted
    with pytest.raises(Exception) as e:
        api.prepare(_chat(), "Bearer sk-wrong")  # 401 first: no bucket for a stranger
    assert e.value.status == 401 and len(api.limiter) == 2
    clock.t += 0.2
    assert api.prepare(_chat(), "Bearer sk-a").tenant == "acme"
    assert 'memroute_requests_total{status="429",tenant="acme"} 1.0' in render(registry).decode()


# ------------------------------------------------------------ ServingCore with mock tiers

KEYS = {"sk-a": "acme", "sk-b": "globex"}


@pytest.fixture
def core(tmp_path, monkeypatch):
    from memroute.config.schema import ModelConfig

    from .fakes import serving_core

    small = ModelConfig(name="mock-small", engine="mock", params_b=0.5)
    large = ModelConfig(name="mock-large", engine="mock", params_b=8.0,
                        engine_args={"answer": "Large answer.", "logprob": -0.01})
    c = serving_core(tmp_path, monkeypatch, small, large, api_keys=KEYS)
    c.test_clock = Clock()
    yield c
    c.close()


def _limit(core, **limits):
    core.api.limiter = TenantLimiter(RateLimitConfig(**limits), clock=core.test_clock)


def test_a_refused_request_does_no_model_work_and_stores_nothing(core):
    _limit(core, requests_per_s=1, burst=2)
    assert call(core, _chat("Hello.")).status == 200
    assert call(core, _chat("Hello again.")).status == 200
    calls, pairs = model_calls(core), core.journal.stats().total
    resp = call(core, _chat("One more."))
    assert resp.status == 429
    err = resp.body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == "rate_limit_exceeded" and err["type"] == "requests"
    assert "tenant acme is over its limit of 1 requests/s" in err["message"]
    assert resp.headers["retry-after"] == "1"
    assert model_calls(core) == calls and core.journal.stats().total == pairs
    assert call(core, _chat("Hello."), api_key="sk-b").status == 200  # globex is not limited
    core.test_clock.t += 1.0
    assert call(core, _chat("One more.")).status == 200
    assert 'status="429",tenant="acme"' in core.metrics().decode()


def test_the_answers_tokens_are_charged_and_refuse_the_next_request(core):
    _limit(core, tokens_per_min=6)  # 0.1 token/s: any answer puts acme in debt
    first = call(core, _chat("Hello there, how are you?"))
    assert first.status == 200
    total = first.body["usage"]["total_tokens"]
    assert total > 6
    resp = call(core, _chat("Hello."))
    assert resp.status == 429 and resp.body["error"]["type"] == "tokens"
    debt = total - 6
    assert int(resp.headers["retry-after"]) == pytest.approx(debt / 0.1, abs=1)
    assert resp.headers["retry-after-ms"] == str(round(debt / 0.1 * 1000))
    assert call(core, _chat("Hello."), api_key="sk-b").status == 200
    core.test_clock.t += debt / 0.1
    assert call(core, _chat("Hello.")).status == 200


def test_the_openai_client_sees_a_rate_limit_error_and_retries_after_it(core, monkeypatch):
    import json
    import time

    import httpx2
    import openai
    import openai._base_client as base_client

    def handle(request: httpx2.Request) -> httpx2.Response:
        resp = call(core, json.loads(request.content),
                    api_key=request.headers["authorization"].split()[-1])
        return httpx2.Response(resp.status, headers=resp.headers, json=resp.body)

    slept = []

    class ClientTime:  # the client's sleep before a retry advances the limiter's clock
        def sleep(self, s):
            slept.append(s)
            core.test_clock.t += s

        def __getattr__(self, name):
            return getattr(time, name)

    monkeypatch.setattr(base_client, "time", ClientTime())

    def client(max_retries):
        return openai.OpenAI(api_key="sk-a", base_url="http://memroute.test/v1",
                             max_retries=max_retries,
                             http_client=httpx2.Client(transport=httpx2.MockTransport(handle)))

    _limit(core, requests_per_s=4, burst=1)
    messages = [{"role": "user", "content": "Hello."}]
    ok = client(0).chat.completions.create(model="memroute", messages=messages, user="alice")
    assert ok.choices[0].message.content
    with pytest.raises(openai.RateLimitError) as e:
        client(0).chat.completions.create(model="memroute", messages=messages, user="alice")
    assert e.value.status_code == 429 and e.value.code == "rate_limit_exceeded"
    assert e.value.type == "requests" and e.value.response.headers["retry-after"] == "1"
    # One retry, after exactly retry-after-ms (250 ms, not the whole second): admitted.
    again = client(1).chat.completions.create(model="memroute", messages=messages, user="alice")
    assert again.choices[0].message.content and slept == [0.25]
