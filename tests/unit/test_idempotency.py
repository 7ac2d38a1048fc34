"""Idempotency keys: the store (claims, conflicts, expiry, restart) and ServingCore's flow with
in-process mock tiers (a retry reaches no model and stores its turn-pair once)."""

from __future__ import annotations

import threading
import time

import pytest

from memroute.journal.idempotency import (
    COMPLETED,
    IN_PROGRESS,
    Conflict,
    Existing,
    IdempotencyStore,
    InProgress,
    Started,
)
from memroute.journal import Journal

from .fakes import call_like_ingress as call
from .fakes import model_calls


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def db(tmp_path):
    return tmp_path / "journal.sqlite3"


# ------------------------------------------------------------------------------------ the store


def test_begin_complete_then_existing(db):
    with IdempotencyStore(db) as store:
        claim = store.begin("acme", "run:1", "h1")
        assert isinstance(claim, Started)
        assert store.counts() == {IN_PROGRESS: 1, COMPLETED: 0}
        assert store.complete(claim, '{"answer": 1}')
        assert store.begin("acme", "run:1", "h1") == Existing('{"answer": 1}')
        assert store.counts() == {IN_PROGRESS: 0, COMPLETED: 1}


def test_conflict_in_progress_and_forget(db):
    with IdempotencyStore(db) as store:
        claim = store.begin("acme", "k", "h1")
        assert isinstance(store.begin("acme", "k", "h2"), Conflict)  # a different body
        assert isinstance(store.begin("acme", "k", "h1"), InProgress)
        store.forget(claim)  # the request failed: a retry runs again
        again = store.begin("acme", "k", "h1")
        assert isinstance(again, Started) and again.owner != claim.owner
        store.complete(again, "{}")
        assert isinstance(store.begin("acme", "k", "h2"), Conflict)  # completed: still the body
        store.forget(again)  # a completed row is never forgotten
        assert store.begin("acme", "k", "h1") == Existing("{}")


def test_tenants_are_isolated(db):
    with IdempotencyStore(db) as store:
        a = store.begin("acme", "same-key", "h")
        store.complete(a, '"acme"')
        b = store.begin("globex", "same-key", "h")
        assert isinstance(b, Started)
        store.complete(b, '"globex"')
        assert store.begin("acme", "same-key", "h") == Existing('"acme"')
        assert store.begin("globex", "same-key", "h") == Existing('"globex"')


def test_first_completion_wins(db):
    clock = Clock()
    with IdempotencyStore(db, lease_s=10, clock=clock) as store:
        first = store.begin("acme", "k", "h")
        clock.t += 11  # the first claim looks abandoned: taken over
        second = store.begin("acme", "k", "h")
        assert isinstance(second, Started)
        assert store.complete(second, '"second"')
        assert not store.complete(first, '"first"')
        assert store.begin("acme", "k", "h") == Existing('"second"')


def test_expiry_and_lazy_sweep(db):
    clock = Clock()
    with IdempotencyStore(db, ttl_s=100, clock=clock) as store:
        store.complete(store.begin("acme", "old", "h"), '"old"')
        clock.t += 50
        store.complete(store.begin("acme", "young", "h"), '"young"')
        clock.t += 51  # "old" is 101 s old, "young" 51 s
        assert isinstance(store.begin("acme", "old", "other-body"), Started)  # expired: new
        assert store.begin("acme", "young", "h") == Existing('"young"')
        clock.t += 100
        assert store.sweep() == 2
        assert store.counts() == {IN_PROGRESS: 0, COMPLETED: 0}


def test_a_new_store_on_the_same_file_finds_completed_keys(db):
    journal = Journal(db)  # the same file as the journal, which keeps working
    store = IdempotencyStore(db)
    store.complete(store.begin("acme", "k", "h"), '"first"')
    open_claim = store.begin("acme", "open", "h")
    assert isinstance(open_claim, Started)
    store.close()  # an orderly stop drops its open claims
    restarted = IdempotencyStore(db)
    assert restarted.begin("acme", "k", "h") == Existing('"first"')
    assert isinstance(restarted.begin("acme", "open", "h"), Started)
    restarted.close()
    assert journal.stats().total == 0
    journal.close()


def test_claims_of_a_dead_process_are_dropped_at_open(db):
    import sqlite3

    with IdempotencyStore(db) as store:
        store.begin("acme", "k", "h")
        host = store._host
    conn = sqlite3.connect(db)  # the row as a crashed process left it
    now = time.time()
    for key, owner in (("k2", f"{host}:999999999:x"), ("k3", "elsewhere:1:x")):
        conn.execute("INSERT INTO idempotency VALUES ('acme', ?, 'h', 'in_progress', ?, NULL, ?, ?)",
                     (key, owner, now, now))
    conn.commit()
    conn.close()
    with IdempotencyStore(db) as store:
        assert isinstance(store.begin("acme", "k2", "h"), Started)
        assert isinstance(store.begin("acme", "k3", "h"), InProgress)  # maybe alive: its lease


def test_a_waiting_duplicate_gets_the_first_answer(db):
    with IdempotencyStore(db) as store:
        claim = store.begin("acme", "k", "h")
        got: list[object] = []
        waiter = threading.Thread(target=lambda: got.append(store.begin("acme", "k", "h", wait_s=10)))
        waiter.start()
        time.sleep(0.2)
        t0 = time.monotonic()
        store.complete(claim, '"done"')
        waiter.join(10)
        assert got == [Existing('"done"')] and time.monotonic() - t0 < 1.0
        t0 = time.monotonic()
        other = store.begin("acme", "k2", "h")
        assert isinstance(store.begin("acme", "k2", "h", wait_s=0.3), InProgress)
        assert 0.25 < time.monotonic() - t0 < 2.0
        store.forget(other)


@pytest.mark.parametrize("key", ["", "x" * 256, "caf\u00e9", "a\nb"])
def test_bad_keys_are_refused(db, key):
    with IdempotencyStore(db) as store, pytest.raises(ValueError):
        store.begin("acme", key, "h")


# ------------------------------------------------------------------------ ServingCore's flow

KEYS = {"sk-a": "acme", "sk-b": "globex"}


@pytest.fixture
def core(tmp_path, monkeypatch):
    from memroute.config.journal import JournalConfig
    from memroute.config.schema import ModelConfig

    from .fakes import serving_core

    small = ModelConfig(name="mock-small", engine="mock", params_b=0.5,
                        engine_args={"rules": [{"match": "(?i)^why\\b", "logprob": -2.5}]})
    large = ModelConfig(name="mock-large", engine="mock", params_b=8.0,
                        engine_args={"answer": "Large answer.", "logprob": -0.01})
    c = serving_core(tmp_path, monkeypatch, small, large, api_keys=KEYS,
                     journal=JournalConfig(path=str(tmp_path / "journal.sqlite3"), interval_s=0.0,
                                           idempotency_wait_s=5.0))
    yield c
    c.close()


def body(text: str, user: str = "alice", **kw) -> dict:
    return {"model": "memroute", "user": user, "messages": [{"role": "user", "content": text}], **kw}


def stored(core, user="alice", tenant="acme") -> list:
    from memroute.namespace import namespace

    assert core.drain(10)
    return core.store.list_user(namespace(tenant, user))


def test_a_retry_returns_the_first_answer_without_model_calls(core):
    first = call(core, body("Why is the sky blue?"), key="run-1:req-1")
    assert first.status == 200 and first.body["memroute"]["escalated"]
    calls = model_calls(core)
    assert calls == 2  # probe + escalation
    # The same JSON, other key order: the same request.
    again = call(core, dict(reversed(list(body("Why is the sky blue?").items()))), key="run-1:req-1")
    assert again.status == 200 and again.headers["idempotent-replayed"] == "true"
    assert again.body == first.body  # id, created, choices, memroute, usage: the first answer
    assert {k: v for k, v in again.headers.items() if k != "idempotent-replayed"} == first.headers
    assert model_calls(core) == calls
    assert len(stored(core)) == 1
    assert core.journal.stats().total == 1
    metrics = core.metrics().decode()
    assert 'memroute_idempotent_replays_total{tenant="acme"} 1.0' in metrics


def test_a_different_body_with_the_same_key_is_409(core):
    assert call(core, body("Hello there."), key="k").status == 200
    resp = call(core, body("Hello again."), key="k")
    assert resp.status == 409
    err = resp.body["error"]
    assert err["param"] == "idempotency-key" and "different request" in err["message"]
    assert model_calls(core) == 1


@pytest.mark.parametrize("key", ["", "x" * 256, "caf\u00e9", "tab\there"])
def test_a_bad_key_is_400_naming_the_header(core, key):
    resp = call(core, body("Hello."), key=key)
    assert resp.status == 400 and resp.body["error"]["param"] == "idempotency-key"
    assert model_calls(core) == 0


def test_keys_are_per_tenant(core):
    a = call(core, body("Hello."), key="shared", api_key="sk-a")
    b = call(core, body("Hello."), key="shared", api_key="sk-b")
    assert a.status == b.status == 200 and "idempotent-replayed" not in b.headers
    assert model_calls(core) == 2
    assert len(stored(core, tenant="acme")) == len(stored(core, tenant="globex")) == 1


def test_without_a_key_nothing_changes(core):
    r1, r2 = call(core, body("Hello.")), call(core, body("Hello."))
    assert r1.status == r2.status == 200 and r1.body["id"] != r2.body["id"]
    assert model_calls(core) == 2 and len(stored(core)) == 2
    assert core.idempotency.counts() == {IN_PROGRESS: 0, COMPLETED: 0}


def test_a_failed_request_is_not_cached(core, monkeypatch):
    from memroute.errors import BackendError

    def broken(batch, **kw):
        raise BackendError("engine down")

    for backend in core.test_backends:  # every tier down: the request fails (503)
        monkeypatch.setattr(backend, "generate_many", broken)
    assert call(core, body("Hello."), key="k").status == 503
    monkeypatch.undo()
    ok = call(core, body("Hello."), key="k")  # the retry runs again
    assert ok.status == 200 and "idempotent-replayed" not in ok.headers
    assert len(stored(core)) == 1


def test_concurrent_duplicates_get_one_answer_and_one_pair(core, monkeypatch):
    inner = core.test_backends[0].generate_many
    gate = threading.Event()

    def slow(batch, **kw):
        gate.wait(5)
        return inner(batch, **kw)

    monkeypatch.setattr(core.test_backends[0], "generate_many", slow)
    out: list = [None, None]

    def run(i: int) -> None:
        out[i] = call(core, body("Hello."), key="dup")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.3)  # both are in: one routes (blocked), one waits on the key
    gate.set()
    for t in threads:
        t.join(10)
    assert out[0].status == out[1].status == 200 and out[0].body == out[1].body
    assert sum("idempotent-replayed" in r.headers for r in out) == 1
    assert len(stored(core)) == 1


def test_a_retry_whose_answer_was_lost_replaces_its_pair(core):
    """A crash between the journal commit and the answer's record: the retry runs again, but
    its turn-pair id comes from the key, so it replaces the first pair."""
    assert call(core, body("Hello."), key="lost").status == 200
    with core.idempotency._db.engine.begin() as conn:  # as if the answer never was recorded
        conn.exec_driver_sql("DELETE FROM idempotency")
    again = call(core, body("Hello."), key="lost")
    assert again.status == 200 and "idempotent-replayed" not in again.headers
    assert model_calls(core) == 2 and len(stored(core)) == 1
    assert core.journal.stats().total == 1


def test_still_in_progress_after_the_wait_is_409(core, monkeypatch):
    monkeypatch.setattr(core.cfg.journal, "idempotency_wait_s", 0.2)
    prepared = core.prepare(body("Hello."), "Bearer sk-a", "busy")
    assert core.begin(prepared) is None  # holds the key; never answers
    resp = call(core, body("Hello."), key="busy")
    assert resp.status == 409 and "in progress" in resp.body["error"]["message"]
    core.release(prepared)
    assert call(core, body("Hello."), key="busy").status == 200


def test_a_streamed_answer_is_replayed_as_the_same_events(core):
    first = call(core, body("Hello.", stream=True), key="s")
    again = call(core, body("Hello.", stream=True), key="s")
    assert first.events and again.events == first.events and again.media_type == first.media_type
    assert call(core, body("Hello."), key="s").status == 409  # stream or not: another request
    assert model_calls(core) == 1
