"""The whole Serve app in seconds: two ``engine: mock`` tiers behind the real ingress (a loopback
Ray node, real HTTP, the ``openai`` client), with MiniLM, Milvus Lite and the journal in tmp dirs.

The mock's rules decide the cascade (a "why" question gets low log-probs at tier 0 and escalates),
and its memory echo shows a stated fact reaching a later prompt. One module-scoped app, one user
per check; the time after Ray is up is measured and bounded.
"""

from __future__ import annotations

import json
import time

import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from . import serving  # noqa: E402
from .serving import deployed, free_port  # noqa: E402

KEYS = {"sk-mock": "acme", "sk-mock-b": "globex", "sk-mock-c": "initech"}
KEY = "sk-mock"
ADMIN = "sk-mock-admin"
TIMEOUT = 60.0
LOW_CONFIDENCE = -2.5  # tier 0's log-prob per token on "why" questions: c = 1/6 < tau 0.5
TIER0_RULES = [
    {"match": "(?i)^why\\b", "logprob": LOW_CONFIDENCE},
    # A stated fact is acknowledged with its own text, so the stored turn-pair carries it.
    {"match": "(?i)\\bis [A-Z]{2}-\\d+", "answer": "Noted: {query}"},
]
TOKEN_LATENCY_S = 0.1  # tier 1 generates "Large answer." in 3 pieces, one per 0.1 s
BUDGET_S = 60.0  # deploy + every request, after Ray is up (2 shared cores)


def mock_serve_config(tmp, port: int):
    """The one place this module's ServeConfig is built (the config's shape changes here only)."""
    from memroute.config.api import RateLimitConfig

    return serving.mock_serve_config(
        tmp, port, keys=KEYS, admin_keys=[ADMIN], tier0_rules=TIER0_RULES,
        # token by token, so a streamed escalated answer shows its first token early
        tier1_args={"token_latency_s": TOKEN_LATENCY_S},
        tenant_rate_limits={"initech": RateLimitConfig(requests_per_s=0.01, burst=1)},
    )


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    port = free_port()
    cfg = mock_serve_config(tmp_path_factory.mktemp("serve-mock"), port)
    with deployed(cfg, port) as up:
        yield {"url": up["url"], "cfg": cfg, "health": up["health"], "ray_up": up["ray_up"]}
        done = time.perf_counter()
        print(
            f"\n[serve-mock] ray start {up['ray_up'] - up['t0']:.1f}s, deploy "
            f"{up['healthy'] - up['ray_up']:.1f}s, requests {done - up['healthy']:.1f}s, "
            f"after Ray up {done - up['ray_up']:.1f}s"
        )


def client(url: str, key: str = KEY):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, timeout=TIMEOUT, max_retries=0)


def ask(url: str, user: str, text: str, **kw):
    raw = client(url).chat.completions.with_raw_response.create(
        model="memroute", user=user, messages=[{"role": "user", "content": text}], **kw
    )
    return raw, raw.parse()


def report(completion) -> dict:
    return completion.model_extra["memroute"]


def auth(key: str = KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def base_prompt_tokens(cfg, query: str) -> int:
    """What the mock counts for ``query`` without memories: the served count must be this."""
    from memroute.llm.factory import build_backend
    from memroute.routing.prompt import build_messages

    return build_backend(cfg.cascade["0"]).count_tokens(
        build_messages(cfg.router.system_prompt, query)
    )


def test_the_mock_cascade_end_to_end(app):
    url, cfg = app["url"], app["cfg"]
    assert app["health"]["tiers"] == ["mock-small", "mock-large"]

    # -- accepted at tier 0: confident, no memories for a fresh user, exact token counts
    query = "What is the capital of France?"
    raw, r = ask(url, "easy-user", query)
    m = report(r)
    assert (m["tier"], m["model"], m["escalated"]) == (0, "mock-small", False)
    assert r.choices[0].message.content == "I do not know."
    assert m["confidences"] == [pytest.approx(1 - 0.05 / 3, abs=1e-4)]
    assert m["tokens"]["base"] == base_prompt_tokens(cfg, query) == r.usage.prompt_tokens
    assert m["tokens"]["injected"] == 0 and m["tokens"]["output"] == r.usage.completion_tokens == 5
    assert raw.headers["x-memroute-escalated"] == "false"

    # -- escalated: the tier-0 rule's log-probs put it under tau; tier 1 answers
    raw, r = ask(url, "hard-user", "Why is the sky blue?")
    m = report(r)
    assert (m["tier"], m["model"], m["escalated"]) == (1, "mock-large", True)
    assert r.choices[0].message.content == "Large answer."
    assert m["confidences"] == [
        pytest.approx(1 / 6, abs=1e-4),
        pytest.approx(1 - 0.01 / 3, abs=1e-4),
    ]
    assert [c["accepted"] for c in m["calls"]] == [False, True]
    assert m["calls"][1]["eff_cost"] > m["calls"][0]["eff_cost"]  # 8B priced above 0.5B
    assert raw.headers["x-memroute-escalated"] == "true" and raw.headers["x-memroute-tier"] == "1"

    # -- memory: a stated fact is stored, retrieved into the next prompt and echoed by the mock
    _, stated = ask(url, "alice", "My locker code is ZX-4471.")
    assert stated.choices[0].message.content == "Noted: My locker code is ZX-4471."
    _, r = ask(url, "alice", "What is my locker code?")  # may still be in the journal only
    m = report(r)
    assert m["memories_used"]["count"] >= 1 and m["tokens"]["injected"] > 0
    assert "ZX-4471" in r.choices[0].message.content  # the memory reached the model
    assert not m["escalated"]
    assert httpx.post(f"{url}/admin/drain", headers=auth(ADMIN), timeout=TIMEOUT).json() == {
        "drained": True
    }
    body = httpx.get(f"{url}/admin/memories", params={"tenant": "acme", "user": "alice"},
                     headers=auth(ADMIN), timeout=TIMEOUT).json()
    assert body["count"] == 2 and any(
        "Q: My locker code is ZX-4471." in x["text"] for x in body["memories"]
    )
    assert set(m["memories_used"]["ids"]) <= {x["id"] for x in body["memories"]}

    # -- 4xx: refused before any model work, OpenAI-shaped
    with pytest.raises(openai.BadRequestError) as e:
        ask(url, "bad-user", "hello", temperature=5)
    assert e.value.status_code == 400 and e.value.param == "temperature"
    r401 = httpx.post(
        f"{url}/v1/chat/completions", json={"model": "memroute", "messages": []}, timeout=TIMEOUT
    )
    assert r401.status_code == 401 and r401.json()["error"]["param"] == "authorization"

    elapsed = time.perf_counter() - app["ray_up"]
    print(f"\n[serve-mock] deploy + requests: {elapsed:.1f}s")
    assert elapsed < BUDGET_S


def error_of(r) -> dict:
    """The OpenAI error object of a response (fails on FastAPI's {"detail": ...} or plain text)."""
    body = r.json()
    assert set(body) == {"error"} and {"message", "type", "param", "code"} <= set(body["error"]), body
    return body["error"]


def test_errors_have_one_shape_and_the_key_comes_before_the_body(app):
    url, chat = app["url"], f"{app['url']}/v1/chat/completions"
    limit = app["cfg"].api.limits.max_body_bytes
    # no key: 401 whatever the body (invalid JSON, too large, too deep): nothing is read first
    for body in (b"{not json", b"x" * (10 * limit), b"[" * 100_000):
        r = httpx.post(chat, content=body, headers={"content-type": "application/json"}, timeout=TIMEOUT)
        assert r.status_code == 401 and error_of(r)["param"] == "authorization"
    # with a key: 413 from Content-Length, 413 while a chunked body streams in, 400 for depth
    r = httpx.post(chat, content=b"x" * (limit + 1), headers=auth(), timeout=TIMEOUT)
    assert r.status_code == 413 and error_of(r)["param"] == "body"

    def chunks():
        for _ in range(limit // 65_536 + 2):
            yield b" " * 65_536

    r = httpx.post(chat, content=chunks(), headers=auth(), timeout=TIMEOUT)
    assert r.status_code == 413 and error_of(r)["param"] == "body"
    r = httpx.post(chat, content=b"[" * 100_000, headers=auth(), timeout=TIMEOUT)
    assert r.status_code == 400 and error_of(r)["param"] == "body" and "nests" in error_of(r)["message"]
    r = httpx.post(chat, content=b"{}", headers={**auth(), "content-type": "text/plain"}, timeout=TIMEOUT)
    assert r.status_code == 415 and error_of(r)["param"] == "content-type"
    # routing errors outside the chat handler: OpenAI's shape, not FastAPI's {"detail": ...}
    r = httpx.get(f"{url}/v1/no-such-thing", headers=auth(), timeout=TIMEOUT)
    assert r.status_code == 404 and error_of(r)["param"] == "path"
    r = httpx.get(chat, headers=auth(), timeout=TIMEOUT)
    assert r.status_code == 405 and error_of(r)["param"] == "method"


def test_operator_endpoints_need_the_admin_key(app):
    url = app["url"]
    for method, path in (("GET", "/metrics"), ("GET", "/openapi.json"), ("POST", "/admin/drain"),
                         ("GET", "/admin/memories?tenant=acme&user=alice")):
        r = httpx.request(method, f"{url}{path}", timeout=TIMEOUT)
        assert r.status_code == 401 and error_of(r)["param"] == "authorization", path
        r = httpx.request(method, f"{url}{path}", headers=auth(KEY), timeout=TIMEOUT)
        assert r.status_code == 403 and error_of(r)["code"] == "permission_denied", path
    r = httpx.get(f"{url}/metrics", headers=auth(ADMIN), timeout=TIMEOUT)
    assert r.status_code == 200 and "memroute_requests_total" in r.text
    r = httpx.get(f"{url}/readyz", timeout=TIMEOUT)  # probes the store; open, as liveness is
    assert r.status_code == 200 and r.json()["problems"] == [] and r.json()["flusher"]["failing"] == 0
    r = httpx.get(f"{url}/openapi.json", headers=auth(ADMIN), timeout=TIMEOUT)
    assert r.status_code == 200 and "/v1/chat/completions" in r.json()["paths"]
    # admin reads accept no user id that chat refuses (10,000 characters: chat's limit is 256)
    r = httpx.get(f"{url}/admin/memories", params={"tenant": "acme", "user": "u" * 10_000},
                  headers=auth(ADMIN), timeout=TIMEOUT)
    assert r.status_code == 400 and error_of(r)["param"] == "user"
    # an admin key is not a tenant: it cannot chat (and so cannot read or write memories there)
    r = httpx.post(f"{url}/v1/chat/completions", headers=auth(ADMIN), timeout=TIMEOUT,
                   json={"model": "memroute", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 403 and error_of(r)["param"] == "authorization"


def test_a_poisoned_request_fails_alone_among_another_tenants_batch(app):
    """The defect: a lone surrogate (valid JSON) raised in the embedder inside the shared batch,
    and 11 of 32 concurrent requests of another tenant got 500."""
    from concurrent.futures import ThreadPoolExecutor

    chat = f"{app['url']}/v1/chat/completions"
    poison = ('{"model": "memroute", "user": "mallory", "messages": '
              '[{"role": "user", "content": "hi \\ud800 there"}]}').encode()

    def normal(i: int):
        return httpx.post(chat, headers=auth("sk-mock-b"), timeout=TIMEOUT, json={
            "model": "memroute", "user": f"b{i % 4}", "messages": [{"role": "user", "content": f"Hello {i}?"}]})

    def poisoned(_: int):
        return httpx.post(chat, content=poison, timeout=TIMEOUT,
                          headers={**auth(), "content-type": "application/json"})

    with ThreadPoolExecutor(max_workers=12) as pool:
        futures = [pool.submit(poisoned if i % 11 == 5 else normal, i) for i in range(35)]
        replies = [f.result() for f in futures]
    bad = [r for i, r in enumerate(replies) if i % 11 == 5]
    good = [r for i, r in enumerate(replies) if i % 11 != 5]
    assert [r.status_code for r in good] == [200] * len(good)
    for r in bad:
        assert r.status_code == 400 and error_of(r)["param"] == "messages[0].content", r.text


def test_a_tenant_over_its_rate_limit_gets_429_before_its_body_is_read(app):
    chat = f"{app['url']}/v1/chat/completions"
    body = {"model": "memroute", "user": "u", "messages": [{"role": "user", "content": "Hello?"}]}
    assert httpx.post(chat, headers=auth("sk-mock-c"), json=body, timeout=TIMEOUT).status_code == 200
    big = b"x" * (10 * app["cfg"].api.limits.max_body_bytes)  # would be a 413 if it were read
    r = httpx.post(chat, headers={**auth("sk-mock-c"), "content-type": "application/json"}, content=big,
                   timeout=TIMEOUT)
    assert r.status_code == 429 and error_of(r)["code"] == "rate_limit_exceeded"
    assert int(r.headers["retry-after"]) >= 1 and "initech" in error_of(r)["message"]
    with pytest.raises(openai.RateLimitError):  # what the openai client makes of it
        openai.OpenAI(base_url=f"{app['url']}/v1", api_key="sk-mock-c", max_retries=0).chat.completions.create(
            model="memroute", messages=[{"role": "user", "content": "again"}])
    # another tenant is not limited by it
    assert httpx.post(chat, headers=auth("sk-mock-b"), json=body, timeout=TIMEOUT).status_code == 200


def test_a_user_is_forgotten_everywhere_and_only_that_user(app):
    url = app["url"]
    _, said = ask(url, "forget-me", "My locker code is QX-9911.")
    assert "QX-9911" in said.choices[0].message.content
    # the same user name in another tenant, and another user of the same tenant, stay
    openai.OpenAI(base_url=f"{url}/v1", api_key="sk-mock-b", max_retries=0).chat.completions.create(
        model="memroute", user="forget-me", messages=[{"role": "user", "content": "My locker code is QX-1."}])
    ask(url, "keep-me", "My locker code is QX-2222.")
    r = httpx.delete(f"{url}/v1/memory/users/forget-me", headers=auth(), timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    erased = r.json()
    assert erased["scope"] == "user" and erased["journal_rows"] + erased["store_rows"] >= 1
    again = httpx.delete(f"{url}/v1/memory/users/forget-me", headers=auth(), timeout=TIMEOUT).json()
    assert (again["journal_rows"], again["store_rows"]) == (0, 0)  # idempotent
    assert httpx.post(f"{url}/admin/drain", headers=auth(ADMIN), timeout=TIMEOUT).json() == {"drained": True}

    def count(tenant, user):
        body = httpx.get(f"{url}/admin/memories", params={"tenant": tenant, "user": user},
                         headers=auth(ADMIN), timeout=TIMEOUT).json()
        return body["count"] + body["pending"]

    assert count("acme", "forget-me") == 0
    assert count("globex", "forget-me") == 1 and count("acme", "keep-me") == 1
    _, r = ask(url, "forget-me", "What is my locker code?")
    assert "QX-9911" not in r.choices[0].message.content and report(r)["memories_used"]["count"] == 0
    audit = httpx.get(f"{url}/admin/erasures", headers=auth(ADMIN), timeout=TIMEOUT).json()["data"]
    assert audit[0]["actor"] == "tenant:acme" and "QX-9911" not in json.dumps(audit)
    assert httpx.get(f"{url}/admin/erasures", headers=auth(), timeout=TIMEOUT).status_code == 403


def test_per_request_controls_and_tier_models_through_the_openai_client(app):
    url = app["url"]
    c = client(url)
    assert [m.id for m in c.models.list().data] == ["memroute", "memroute/mock-small",
                                                     "memroute/mock-large"]
    r = c.chat.completions.create(model="memroute/mock-large", user="pin-user",
                                  messages=[{"role": "user", "content": "What is 2 + 2?"}],
                                  extra_body={"memroute": {"store": False}})
    m = report(r)
    assert (m["tier"], m["controls"]["store"], m["controls"]["tier"]) == (1, False, 1)
    raw = httpx.post(f"{url}/v1/chat/completions", headers={**auth(), "x-memroute-tau": "1.5"},
                     json={"model": "memroute", "messages": [{"role": "user", "content": "hi"}]},
                     timeout=TIMEOUT)
    assert raw.status_code == 400 and error_of(raw)["param"] == "x-memroute-tau"
    assert httpx.post(f"{url}/admin/drain", headers=auth(ADMIN), timeout=TIMEOUT).json()["drained"]
    body = httpx.get(f"{url}/admin/memories", params={"tenant": "acme", "user": "pin-user"},
                     headers=auth(ADMIN), timeout=TIMEOUT).json()
    assert body["count"] + body["pending"] == 0  # store: false


def test_the_fact_endpoints_over_http(app):
    """State, supersede, read at session start, audit and retract a fact; another tenant's user
    of the same name sees nothing; a bad body is a 400 naming the field."""
    url = app["url"]

    def post(path, body, key=KEY):
        return httpx.post(f"{url}{path}", json=body, headers=auth(key), timeout=TIMEOUT)

    assert post("/v1/memory/facts", {"user": "fay", "key": "user.budget", "value": "50"}).status_code == 200
    new = post("/v1/memory/facts", {"user": "fay", "key": "user.budget", "value": "80"}).json()
    start = httpx.get(f"{url}/v1/memory/session-start", params={"user": "fay"}, headers=auth(),
                      timeout=TIMEOUT).json()
    assert [f["value"] for f in start["facts"]] == ["80"] and "user.budget: 80" in start["context"]
    timeline = httpx.get(f"{url}/v1/memory/facts", params={"user": "fay", "key": "user.budget"},
                         headers=auth(), timeout=TIMEOUT).json()["data"]
    assert [f["status"] for f in timeline] == ["superseded", "active"]
    other = httpx.get(f"{url}/v1/memory/facts", params={"user": "fay"}, headers=auth("sk-mock-b"),
                      timeout=TIMEOUT).json()
    assert other["data"] == []
    r = post(f"/v1/memory/facts/{new['id']}/retract?user=fay", {})
    assert r.status_code == 200 and r.json()["status"] == "retracted"
    bad = post("/v1/memory/facts", {"user": "fay", "key": "Budget!", "value": "1"})
    assert bad.status_code == 400 and error_of(bad)["param"] == "key"
    turns = post("/v1/memory/turns", {"user": "fay", "turns": [{"user": "I moved to Lyon.",
                                                                "assistant": "Noted."}]})
    assert turns.status_code == 200 and turns.json()["journaled"] == 1
    start = httpx.get(f"{url}/v1/memory/session-start", params={"user": "fay"}, headers=auth(),
                      timeout=TIMEOUT).json()
    assert any("Lyon" in t["text"] for t in start["recent_turns"])  # journaled or stored


# -- the unmodified-client suite (tests/integration/drop_in_suite.py) on the mock tiers ---------

from .drop_in_suite import Caps, DropInClientSuite  # noqa: E402


class TestDropInClientMock(DropInClientSuite):
    """The mock calls an offered tool by rule and answers with the tool's result; it follows no
    output format and does not read the history (the token report shows the history sent)."""

    key, tenant_of_key = KEY, KEYS[KEY]
    caps = Caps(tiers=("mock-small", "mock-large"), admin_key=ADMIN, follows_format=False,
                reads_history=False, calls_tools=True, timeout_s=TIMEOUT)

    @pytest.fixture(autouse=True)
    def _deployed(self, app):
        self.url = app["url"]
