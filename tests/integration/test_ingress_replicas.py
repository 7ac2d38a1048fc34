"""Two ingress replicas of the real Serve app on a Milvus server and the shared PostgreSQL
journal (the production shape), on a loopback Ray node: tenancy and read-your-writes hold
whichever replica answers, and killing one replica mid-traffic loses no acknowledged turn-pair
and stores none twice.

Mock tiers answer (tier 0 acknowledges "... is XX-123" statements verbatim, and echoes the
newest memory's answer otherwise), so the memory path is what is under test.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from memroute.config.journal import JournalConfig
from memroute.config.schema import MemoryConfig, RetrievalConfig
from memroute.config.serve import AutoscalingConfig, IngressConfig
from memroute.journal import PostgresJournal
from memroute.memory import MilvusMemoryStore
from memroute.namespace import namespaced_user_id
from tests.integration import serving
from tests.integration.milvus_server import collection_name, milvus_server  # noqa: F401
from tests.integration.postgres import postgres_server, postgres_url  # noqa: F401

KEYS = {"sk-rep-a": "acme", "sk-rep-b": "globex"}
ADMIN = "sk-rep-admin"
RULES = [{"match": "(?i)\\bis [A-Z]{2}-\\d+", "answer": "Noted: {query}"}]
MARKER = re.compile(r"\b[A-Z]{2}-\d+\b")
LEASE_S = 3.0  # a killed replica's claimed batch is taken over after this


def headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def chat(client: httpx.Client, key: str, user: str, text: str) -> httpx.Response:
    return client.post("/v1/chat/completions", headers=headers(key), json={
        "model": "memroute", "user": user, "messages": [{"role": "user", "content": text}]})


@pytest.fixture(scope="module")
def app(tmp_path_factory, milvus_server, postgres_server):  # noqa: F811
    tmp = tmp_path_factory.mktemp("replicas")
    journal_url = postgres_server.create_database()
    memory = MemoryConfig(uri=milvus_server.uri, collection=collection_name("rep"),
                          index_type="HNSW")
    two = AutoscalingConfig(min_replicas=2, max_replicas=2)
    port = serving.free_port()
    cfg = serving.mock_serve_config(
        tmp, port, keys=KEYS, admin_keys=[ADMIN], tier0_rules=RULES, memory=memory,
        ingress=IngressConfig(num_cpus=0.25, autoscaling=two),
        # each replica keeps users' vectors in process: kept true through the shared journal
        retrieval=RetrievalConfig(hot_vectors=True),
        journal=JournalConfig(path=str(tmp / "journal.sqlite3"), url=journal_url,
                              lease_s=LEASE_S, max_backoff_s=1.0, interval_s=0.1))
    with serving.deployed(cfg, port) as up:
        yield {"url": up["url"], "cfg": cfg, "journal_url": journal_url}
    postgres_server.drop_database(journal_url)


def ingress_replicas() -> list[str]:
    """The live ingress replicas' actor names (named actors: no dashboard needed)."""
    import ray

    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                  if a["name"].startswith("SERVE_REPLICA::") and "#router#" in a["name"])


def wait_drained(journal_url: str, timeout_s: float = 90.0) -> None:
    journal = PostgresJournal(journal_url)
    try:
        deadline = time.monotonic() + timeout_s
        while (stats := journal.stats()).pending:
            assert time.monotonic() < deadline, f"journal not drained: {stats}"
            time.sleep(0.5)
        assert stats.failed == 0, stats
    finally:
        journal.close()


def stored_markers(app, uid: str) -> Counter:
    store = MilvusMemoryStore(app["cfg"].memory, 384)
    try:
        store.flush()
        return Counter(m for mem in store.list_user(uid) for m in set(MARKER.findall(mem.text)))
    finally:
        store.close()


def test_two_replicas_run_and_each_tenant_reads_only_its_own(app):
    assert len(ingress_replicas()) == 2
    with httpx.Client(base_url=app["url"], timeout=60) as client:
        # the same user name under two tenants: two users, never one
        a = chat(client, "sk-rep-a", "sam", "My locker code is AA-111.")
        b = chat(client, "sk-rep-b", "sam", "My locker code is BB-222.")
        assert a.status_code == b.status_code == 200
        for _ in range(6):  # several calls: both replicas answer some of them
            ra = chat(client, "sk-rep-a", "sam", "Remind me of my locker code.")
            rb = chat(client, "sk-rep-b", "sam", "Remind me of my locker code.")
            assert ra.status_code == rb.status_code == 200
            text_a = ra.json()["choices"][0]["message"]["content"]
            text_b = rb.json()["choices"][0]["message"]["content"]
            assert "AA-111" in text_a and "BB-222" not in text_a
            assert "BB-222" in text_b and "AA-111" not in text_b


def test_read_your_writes_whichever_replica_answers(app):
    """Each user states a fact and asks at once, 12 users at a time: the question often lands on
    the other replica before any flusher wrote the pair, so it is read from the shared journal."""

    def one(k: int) -> str:
        code = f"RW-{k:03d}"
        with httpx.Client(base_url=app["url"], timeout=60) as client:
            assert chat(client, "sk-rep-a", f"rw{k}", f"My parcel code is {code}.").status_code == 200
            r = chat(client, "sk-rep-a", f"rw{k}", "What was my parcel code?")
            assert r.status_code == 200
            return code if code in r.json()["choices"][0]["message"]["content"] else ""

    with ThreadPoolExecutor(12) as pool:
        got = list(pool.map(one, range(24)))
    assert got == [f"RW-{k:03d}" for k in range(24)]


def test_hot_vectors_see_the_other_replicas_writes(app):
    """Both replicas cache a user's memories (hot_vectors) before a new fact; whichever replica
    flushed it, every later answer has it: the other replica rebuilt its copy when the shared
    journal said another writer's entry had settled (not from the journal's pending read,
    which the wait below outlasts)."""
    users = [f"hv{k}" for k in range(4)]
    with httpx.Client(base_url=app["url"], timeout=60) as client:
        for u in users:
            assert chat(client, "sk-rep-a", u, "My parcel code is HV-100.").status_code == 200
        wait_drained(app["journal_url"])
        for u in users:  # several asks per user: both replicas build and hold a copy
            for _ in range(4):
                assert chat(client, "sk-rep-a", u, "What was my parcel code?").status_code == 200
        for u in users:
            assert chat(client, "sk-rep-a", u, "My locker code is HV-200.").status_code == 200
        wait_drained(app["journal_url"])
        time.sleep(app["cfg"].journal.visible_after_s + 1.0)
        answers = [chat(client, "sk-rep-a", u, "What was my locker code?")
                   for u in users for _ in range(4)]
    got = [(r.json()["choices"][0]["message"]["content"], r.headers.get("x-memroute-memories"),
            r.headers.get("x-memroute-memory-degraded")) for r in answers]
    wrong = [(i, *g) for i, g in enumerate(got) if "HV-200" not in g[0]]
    assert not wrong, wrong  # (ask, answer, memories injected, memory degraded)


def test_killing_one_replica_mid_traffic_loses_no_ack_and_doubles_nothing(app):
    import ray

    users = [f"kill{k}" for k in range(8)]
    acked: dict[str, list[str]] = {u: [] for u in users}
    failed = Counter()
    stop = threading.Event()

    def client_loop(user: str) -> None:
        with httpx.Client(base_url=app["url"], timeout=30) as client:
            i = 0
            while not stop.is_set():
                code = f"KL-{users.index(user)}{i:04d}"
                try:
                    r = chat(client, "sk-rep-b", user, f"Note {i}: my code is {code}.")
                    if r.status_code == 200:
                        acked[user].append(code)
                    else:
                        failed[r.status_code] += 1
                except httpx.HTTPError as exc:
                    failed[type(exc).__name__] += 1
                i += 1

    threads = [threading.Thread(target=client_loop, args=(u,)) for u in users]
    for t in threads:
        t.start()
    time.sleep(6.0)
    victim = ingress_replicas()[0]
    ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)  # Serve replaces it
    time.sleep(10.0)
    stop.set()
    for t in threads:
        t.join(60)
    total = sum(len(v) for v in acked.values())
    print(f"\nacknowledged {total}, not acknowledged {dict(failed)}, killed {victim}")
    assert total >= 2 * len(users) and all(acked.values())  # traffic went on around the kill

    wait_drained(app["journal_url"])
    for user in users:
        uid = namespaced_user_id("globex", user)
        stored = stored_markers(app, uid)
        missing = [c for c in acked[user] if stored[c] == 0]
        doubled = [c for c, n in stored.items() if n > 1]
        assert not missing, f"{user}: acknowledged but not stored: {missing}"
        assert not doubled, f"{user}: stored twice: {doubled}"
