"""``Idempotency-Key`` over real HTTP: the Serve app with two ``engine: mock`` tiers (a loopback
Ray node, MiniLM, Milvus Lite, the journal in a tmp dir) and the ``openai`` client.

A retried request gets the first answer and its turn-pair is stored once, also when the retry
arrives while the first is still routing; a different body under the same key is a 409; keys
are per tenant. Set-up as in ``test_serve_mock.py`` (its own module-scoped app).
"""

from __future__ import annotations

import threading
import time

import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from . import serving  # noqa: E402
from .serving import deployed, free_port  # noqa: E402

KEYS = {"sk-acme": "acme", "sk-globex": "globex"}
KEY = "sk-acme"
ADMIN = {"Authorization": "Bearer sk-idem-admin"}
TIMEOUT = 60.0
TIER0_RULES = [{"match": "(?i)^why\\b", "logprob": -2.5}]  # "why" escalates to tier 1
SLOW_TIER_S = 1.0  # tier 1's latency: the window in which a duplicate arrives
BUDGET_S = 60.0  # deploy + every request, after Ray is up (2 shared cores)


def mock_serve_config(tmp, port: int):
    from memroute.config.journal import JournalConfig
    from memroute.config.schema import MemoryConfig

    return serving.mock_serve_config(
        tmp, port, keys=KEYS, admin_keys=["sk-idem-admin"], tier0_rules=TIER0_RULES,
        tier1_args={"latency_s": SLOW_TIER_S},
        memory=MemoryConfig(uri=str(tmp / "milvus.db"), collection="memroute_idem"),
        journal=JournalConfig(path=str(tmp / "journal.sqlite3"), idempotency_wait_s=20.0),
    )


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    port = free_port()
    cfg = mock_serve_config(tmp_path_factory.mktemp("serve-idem"), port)
    with deployed(cfg, port) as up:
        print(f"\n[serve-idem] deploy {up['healthy'] - up['ray_up']:.1f}s")
        yield {"url": up["url"], "ray_up": up["ray_up"]}


def ask(url: str, user: str, text: str, key: str | None, api_key: str = KEY):
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=api_key, timeout=TIMEOUT, max_retries=0)
    headers = {"Idempotency-Key": key} if key is not None else {}
    raw = client.chat.completions.with_raw_response.create(
        model="memroute", user=user, messages=[{"role": "user", "content": text}],
        extra_headers=headers,
    )
    return raw, raw.parse()


def stored(url: str, user: str, api_key: str = KEY) -> int:
    """Turn-pairs of ``user`` in the tenant of ``api_key`` (read with the admin key)."""
    tenant = KEYS[api_key]
    assert httpx.post(f"{url}/admin/drain", headers=ADMIN, timeout=TIMEOUT).json() == {"drained": True}
    body = httpx.get(f"{url}/admin/memories", params={"tenant": tenant, "user": user}, headers=ADMIN,
                     timeout=TIMEOUT).json()
    return body["count"] + body["pending"]


def same_answer(a, b) -> None:
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.model_extra["memroute"] == b.model_extra["memroute"]
    assert a.usage == b.usage and a.id == b.id


def test_idempotency_keys_over_http(app):
    url = app["url"]

    # -- a retry: the first answer again, replayed (no model work), one stored pair
    raw1, first = ask(url, "replayer", "What is the capital of France?", "run-7:req-1")
    raw2, again = ask(url, "replayer", "What is the capital of France?", "run-7:req-1")
    same_answer(first, again)
    assert "idempotent-replayed" not in raw1.headers
    assert raw2.headers["idempotent-replayed"] == "true"
    assert raw2.headers["x-memroute-tier"] == raw1.headers["x-memroute-tier"]
    assert stored(url, "replayer") == 1

    # -- the same key with another body: 409 naming the header; a bad key: 400
    with pytest.raises(openai.ConflictError) as e:
        ask(url, "replayer", "Something else entirely?", "run-7:req-1")
    assert e.value.status_code == 409 and e.value.param == "idempotency-key"
    with pytest.raises(openai.BadRequestError) as e:
        ask(url, "replayer", "Hello?", "k" * 256)
    assert e.value.param == "idempotency-key"

    # -- per tenant: globex's request under acme's key is its own
    raw3, other = ask(url, "replayer", "What is the capital of France?", "run-7:req-1",
                      api_key="sk-globex")
    assert "idempotent-replayed" not in raw3.headers and other.id != first.id
    assert stored(url, "replayer", api_key="sk-globex") == 1

    # -- concurrent duplicates: the second arrives while the first routes (tier 1 is slow)
    out: list = [None, None]

    def run(i: int) -> None:
        out[i] = ask(url, "racer", "Why is the sky blue?", "run-7:req-2")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
        time.sleep(0.2)
    for t in threads:
        t.join(TIMEOUT)
    assert all(o is not None for o in out)
    same_answer(out[0][1], out[1][1])
    assert out[0][1].model_extra["memroute"]["escalated"]
    assert sum("idempotent-replayed" in raw.headers for raw, _ in out) == 1
    assert time.perf_counter() - t0 < 2 * SLOW_TIER_S + 5  # the duplicate waited, not re-ran
    assert stored(url, "racer") == 1

    elapsed = time.perf_counter() - app["ray_up"]
    print(f"\n[serve-idem] deploy + requests: {elapsed:.1f}s")
    assert elapsed < BUDGET_S


# ------------------------------------------------------------------ the replay over HTTP
def _trace(prefix: str, users: list[str], rounds: int = 2):
    from memroute.datasets.records import TraceRequest
    from memroute.types import Message

    rows = []
    ts = 1_700_000_000.0
    for k in range(rounds):
        for u in users:
            for text, kind in ((f"My {k} locker code is ZX-{len(u)}{k}.", "statement"),
                               ("Why is my locker code what it is?", "novel")):
                ts += 30
                rows.append(TraceRequest(f"{prefix}{len(rows):03d}", ts, "acme", u, f"{u}-d{k}",
                                         (Message("user", text),), ("ZX",) if kind == "novel" else (),
                                         kind=kind, fact_id=f"{u}-code", domain="personal"))
    return rows


def _replay_cfg(url: str):
    from memroute.config.replay import ReplayConfig

    return ReplayConfig(trace="unused", target=url, strategies=["memroute"], concurrency=4)


def _client(url: str):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, timeout=TIMEOUT, max_retries=0)


def _prices():
    from memroute.eval.replay.outcome import TierPrice

    return [TierPrice(0.5, 8.0), TierPrice(8.0, 235.0)]


def test_the_same_trace_gives_the_same_tiers_in_process_and_over_http(app, tmp_path, encoder):
    from memroute import build
    from memroute.config.schema import MemoryConfig, RetrievalConfig
    from memroute.eval.replay.driver import Checkpoint, replay_strategy
    from memroute.eval.replay.http_target import replay_http
    from memroute.eval.replay.strategies import STRATEGIES, StrategyParts

    trace = _trace("same", ["same-a", "same-b"])
    http_log = Checkpoint(tmp_path / "http.jsonl")
    replay_http(_replay_cfg(app["url"]), _prices(), trace, http_log, run="same", progress=False,
                client=_client(app["url"]))
    cfg = mock_serve_config(tmp_path, 0)
    memory = build.memory(cfg.embedder, MemoryConfig(uri=str(tmp_path / "inproc.db")), RetrievalConfig(),
                          None, enc=encoder)
    try:
        tiers = build.tiers([cfg.cascade["0"], cfg.cascade["1"]], None)
        parts = StrategyParts(tiers, _prices(), cfg.router, RetrievalConfig(),
                              memory.retriever)
        rows = replay_strategy(STRATEGIES.get("memroute")("memroute", parts), trace,
                               Checkpoint(tmp_path / "inproc.jsonl"), concurrency=4)
    finally:
        memory.close()
    http = {r["request_id"]: r["tier"] for r in http_log.rows}
    assert http == {r["request_id"]: r["tier"] for r in rows}
    assert set(http.values()) == {0, 1}  # both tiers answered some


def test_a_killed_http_replay_resumes_and_stores_nothing_twice(app, tmp_path):
    from memroute.eval.replay.driver import Checkpoint
    from memroute.eval.replay.http_target import replay_http

    users = ["kill-a", "kill-b", "kill-c"]
    trace = _trace("kill", users)
    real = _client(app["url"])

    class Killed(Exception):
        pass

    class DiesAfter:
        """A client whose process is killed after the server answered its 5th request."""

        def __init__(self) -> None:
            self.n = 0
            self.lock = threading.Lock()
            self.chat = self
            self.completions = self

        def create(self, **kw):
            reply = real.chat.completions.create(**kw)
            with self.lock:
                self.n += 1
                if self.n >= 5:
                    raise Killed  # answered and stored server-side, never checkpointed here
            return reply

    log_path = tmp_path / "rows.jsonl"
    replays_before = _replays(app["url"])
    with pytest.raises(Killed):
        replay_http(_replay_cfg(app["url"]), _prices(), trace, Checkpoint(log_path), run="kill",
                    progress=False, client=DiesAfter())
    done_before = len(Checkpoint(log_path).rows)
    assert done_before < len(trace)
    replay_http(_replay_cfg(app["url"]), _prices(), trace, Checkpoint(log_path), run="kill",
                progress=False, client=real)
    rows = Checkpoint(log_path).rows
    assert sorted(r["request_id"] for r in rows) == sorted(r.request_id for r in trace)  # each once
    for u in users:  # every request stored exactly one turn-pair, the resent ones included
        assert stored(app["url"], u) == sum(r.user_id == u for r in trace)
    # the requests answered before the kill but not checkpointed came from the table on resume
    assert _replays(app["url"]) - replays_before >= 1


def _replays(url: str) -> float:
    metrics = httpx.get(f"{url}/metrics", headers=ADMIN, timeout=TIMEOUT).text
    return sum(float(ln.split()[-1]) for ln in metrics.splitlines()
               if ln.startswith("memroute_idempotent_replays_total") and 'tenant="acme"' in ln)
