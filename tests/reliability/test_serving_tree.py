"""The serving tree under load and with tiers going down, over real HTTP (mock tiers).

- every socket the tree listens on is loopback (Ray's replica gRPC servers included);
- a tier down: requests escalate past it, flagged; every tier down: 503 in OpenAI's shape and
  ``/readyz`` says why; both back: served again;
- 64 concurrent clients for a fixed time: 0 errors, latency percentiles, and every
  acknowledged turn-pair stored exactly once;
- an erasure while the same user keeps writing: what was acknowledged before it is gone, what
  was sent after it is kept, and another user of the tenant loses nothing.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from .conftest import ADMIN, TIMEOUT, auth, error_of, record

httpx = pytest.importorskip("httpx")
psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.reliability

CLIENTS, LOAD_S = 64, 20.0


def chat(client, url: str, user: str, text: str, key: str = "sk-rel-a"):
    return client.post(f"{url}/v1/chat/completions", headers=auth(key), timeout=TIMEOUT, json={
        "model": "memroute", "user": user, "messages": [{"role": "user", "content": text}]})


def drain(url: str) -> None:
    r = httpx.post(f"{url}/admin/drain", headers=auth(ADMIN), timeout=TIMEOUT)
    assert r.json() == {"drained": True}, r.text


def stored(url: str, tenant: str, user: str) -> list[str]:
    r = httpx.get(f"{url}/admin/memories", params={"tenant": tenant, "user": user},
                  headers=auth(ADMIN), timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["pending"] == 0
    return [m["text"] for m in body["memories"]]


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def test_every_listening_socket_of_the_tree_is_loopback(app):
    me = psutil.Process()
    listening = []
    for proc in [me, *me.children(recursive=True)]:
        try:
            conns = proc.net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        listening += [(proc.name(), c.laddr.ip, c.laddr.port) for c in conns
                      if c.status == psutil.CONN_LISTEN]
    loopback = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
    assert any(name.startswith("ray::ServeReplica") for name, _, _ in listening)  # replicas seen
    assert [s for s in listening if s[1] not in loopback] == []
    record("loopback", {"listening_sockets": len(listening),
                        "processes": len({n for n, _, _ in listening}), "non_loopback": 0})


def test_a_tier_down_is_skipped_and_all_down_is_a_clear_503(app):
    url, figures = app["url"], {}
    with httpx.Client() as client:
        app["down"].touch()  # tier 0's engine is down
        try:
            replies = [chat(client, url, f"skip{i}", f"What is item {i}?") for i in range(8)]
            assert [r.status_code for r in replies] == [200] * 8
            assert {r.headers["x-memroute-tiers-skipped"] for r in replies} == {"0"}
            assert {r.json()["memroute"]["tier"] for r in replies} == {1}
            ready = httpx.get(f"{url}/readyz", timeout=TIMEOUT)
            assert ready.status_code == 200
            assert [t["state"] for t in ready.json()["tier_status"]] == ["failing", "ok"]
            figures["tier0_down"] = {"requests": 8, "answered_by_tier1": 8}

            app["down1"].touch()  # and tier 1's
            try:
                r = chat(client, url, "nobody", "Is anyone there?")
                assert r.status_code == 503
                err = error_of(r)
                assert err["code"] == "tiers_unavailable"
                assert "tier 0 (mock-small) down, tier 1 (mock-large) down" in err["message"]
                ready = httpx.get(f"{url}/readyz", timeout=TIMEOUT)
                assert ready.status_code == 503
                assert "every model tier is failing" in " ".join(ready.json()["problems"])
                figures["all_down"] = {"status": r.status_code, "message": err["message"]}
            finally:
                app["down1"].unlink()
        finally:
            app["down"].unlink()
        r = chat(client, url, "back", "Hello again?")
        assert r.status_code == 200 and r.headers["x-memroute-tiers-skipped"] == ""
    drain(url)
    assert len(stored(url, "acme", "skip3")) == 1  # answered past the dead tier: remembered
    assert stored(url, "acme", "nobody") == []  # no answer: nothing to remember
    record("tiers_down", figures)


def test_64_clients_for_a_fixed_time_no_errors_and_every_pair_once(app):
    url = app["url"]
    deadline = time.monotonic() + LOAD_S
    latencies: list[float] = []
    statuses: Counter = Counter()
    acked: Counter = Counter()  # (tenant, user) -> acknowledged pairs
    lock = threading.Lock()

    def client_loop(c: int) -> None:
        tenant, key = ("acme", "sk-rel-a") if c % 2 == 0 else ("globex", "sk-rel-b")
        user = f"load{c % 16}"
        n = 0
        with httpx.Client() as client:
            while time.monotonic() < deadline:
                text = (f"My badge for shift {c}-{n} is LD-{c * 10_000 + n}." if n % 3 == 0
                        else f"Why is shift {c}-{n} late?" if n % 3 == 1 else f"What is my badge {n}?")
                t0 = time.perf_counter()
                try:
                    r = chat(client, url, user, text, key)
                    status = r.status_code
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                dt = time.perf_counter() - t0
                with lock:
                    statuses[status] += 1
                    if status == 200:
                        latencies.append(dt)
                        acked[(tenant, user)] += 1
                n += 1

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        list(pool.map(client_loop, range(CLIENTS)))
    wall = time.perf_counter() - t0
    total = sum(statuses.values())
    drain(url)
    counts = {k: len(stored(url, *k)) for k in acked}
    figures = {
        "clients": CLIENTS, "duration_s": round(wall, 1), "requests": total,
        "statuses": {str(k): v for k, v in statuses.items()},
        "throughput_rps": round(total / wall, 1),
        "latency_ms": {f"p{q}": round(1000 * percentile(latencies, q), 1) for q in (50, 95, 99)},
        "acknowledged_pairs": sum(acked.values()), "stored_pairs": sum(counts.values()),
    }
    record("load", figures)
    print(f"\n[reliability] load: {figures}")
    assert statuses == Counter({200: total}), statuses  # 0 errors
    assert counts == dict(acked)  # every acknowledged pair exactly once, nothing else


def test_an_erasure_under_concurrent_writes_of_the_same_user(app):
    """What was acknowledged before the DELETE was sent is gone, what was sent after it
    returned is kept; what ran while it ran may land on either side of its tombstone."""
    url = app["url"]
    acked: list[tuple[str, float, float]] = []  # (text, sent at, acknowledged at)
    other: list[str] = []
    stop = threading.Event()

    def writer(user: str, out: list) -> None:
        n = 0
        with httpx.Client() as client:
            while not stop.is_set():
                text, sent = f"My token number {n} is ER-{n}.", time.monotonic()
                r = chat(client, url, user, text)
                assert r.status_code == 200, r.text
                out.append((text, sent, time.monotonic()) if user == "eraseme" else text)
                n += 1

    threads = [threading.Thread(target=writer, args=("eraseme", acked)),
               threading.Thread(target=writer, args=("bystander", other))]
    for t in threads:
        t.start()
    time.sleep(3.0)
    t_sent = time.monotonic()
    r = httpx.delete(f"{url}/v1/memory/users/eraseme", headers=auth(), timeout=TIMEOUT)
    t_returned = time.monotonic()
    assert r.status_code == 200, r.text
    time.sleep(3.0)
    stop.set()
    for t in threads:
        t.join(TIMEOUT)
    drain(url)
    kept = stored(url, "acme", "eraseme")

    def is_kept(text: str) -> bool:
        return any(f"Q: {text}" in k for k in kept)

    before = [text for text, _, at in acked if at < t_sent]
    after = [text for text, sent, _ in acked if sent > t_returned]
    figures = {"erased_rows": r.json()["journal_rows"] + r.json()["store_rows"],
               "erasure_s": round(t_returned - t_sent, 2),
               "acked_before_erasure": len(before), "sent_after_erasure": len(after),
               "during_erasure": len(acked) - len(before) - len(after),
               "resurrected": sum(map(is_kept, before)),
               "lost_after": sum(not is_kept(t) for t in after), "bystander_acked": len(other)}
    record("erasure_under_load", figures)
    assert before and after and figures["erased_rows"] >= 1
    assert figures["resurrected"] == 0 and figures["lost_after"] == 0, figures
    assert len(stored(url, "acme", "bystander")) == len(other)


def test_an_ingress_replica_killed_mid_traffic_loses_and_duplicates_nothing(app):
    """Ray's proxy answers the requests in flight on a dying replica itself, with a plain-text
    500 the app cannot shape; later ones wait for the replacement. A client that retries with an
    Idempotency-Key (what OpenAI's clients do on 5xx, given a key) gets exactly one answer and
    one stored pair per request."""
    import ray

    url, stop = app["url"], threading.Event()
    raw: Counter = Counter()  # every HTTP attempt's (status, content type)
    done: Counter = Counter()  # user -> requests answered
    lock = threading.Lock()

    def client_loop(c: int) -> None:
        n = 0
        with httpx.Client() as client:
            while not stop.is_set():
                key, text = f"kill-{c}-{n}", f"My seat for act {n} is ST-{c * 1000 + n}."
                for _attempt in range(10):
                    try:
                        r = client.post(f"{url}/v1/chat/completions", timeout=TIMEOUT,
                                        headers={**auth(), "Idempotency-Key": key}, json={
                                            "model": "memroute", "user": f"kill{c}",
                                            "messages": [{"role": "user", "content": text}]})
                        kind = (r.status_code, r.headers.get("content-type", "").split(";")[0])
                    except httpx.TransportError as exc:
                        kind = (type(exc).__name__, "")
                    with lock:
                        raw[kind] += 1
                    if kind[0] == 200:
                        break
                    time.sleep(1.0)
                else:
                    raise AssertionError(f"request {key} never answered: {raw}")
                with lock:
                    done[f"kill{c}"] += 1
                n += 1

    threads = [threading.Thread(target=client_loop, args=(c,)) for c in range(4)]
    for t in threads:
        t.start()
    time.sleep(3.0)
    [replica] = [a for a in ray.util.list_named_actors(all_namespaces=True)
                 if a["name"].startswith("SERVE_REPLICA::") and "#router#" in a["name"]]
    with lock:
        answered_at_kill = sum(done.values())
    t_kill = time.perf_counter()
    ray.kill(ray.get_actor(replica["name"], namespace=replica["namespace"]), no_restart=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and sum(done.values()) < answered_at_kill + 20:
        time.sleep(0.2)  # until the replacement has answered 20 requests
    recovered_s = time.perf_counter() - t_kill
    stop.set()
    for t in threads:
        t.join(TIMEOUT)
    drain(url)
    counts = {u: len(stored(url, "acme", u)) for u in done}
    failed = {f"{k[0]} {k[1]}".strip(): v for k, v in raw.items() if k[0] != 200}
    record("ingress_killed", {"requests": sum(done.values()), "attempts": sum(raw.values()),
                              "failed_attempts": failed,
                              "answered_before_kill": answered_at_kill,
                              "twenty_more_answered_within_s": round(recovered_s, 1),
                              "stored_pairs": sum(counts.values())})
    assert sum(done.values()) >= answered_at_kill + 20  # served again after the kill
    assert counts == dict(done)  # exactly once, despite the retries
