"""The flusher on a journal shared by two replicas (PostgreSQL): each replica's Flusher thread
claims batches under its own name, so every acknowledged pair reaches the store once and a
replica killed in the middle of a write has its batch taken over when the lease ends."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from memroute.config.journal import JournalConfig, check_journal_config
from memroute.errors import ConfigError
from memroute.journal import Flusher
from memroute.journal import PostgresJournal
from tests.integration.pg_journal_helpers import make_journal  # noqa: F401 (fixture)
from tests.integration.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from tests.journal_cases import pair


class Store:
    """Counts every write of every pair id (the vector store would upsert by id)."""

    def __init__(self, block: threading.Event | None = None) -> None:
        self.writes: dict[int, int] = {}
        self.lock = threading.Lock()
        self.block = block

    def write(self, pairs) -> None:
        if self.block is not None:
            self.block.wait()  # a write that never returns: the replica is "killed" in it
            raise RuntimeError("killed")
        with self.lock:
            for p in pairs:
                self.writes[p.id] = self.writes.get(p.id, 0) + 1


def wait_for(cond, timeout=30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_two_replicas_flush_every_pair_once_while_both_append(make_journal):  # noqa: F811
    a, b = make_journal(), make_journal()
    store = Store()
    flushers = [Flusher(j, store.write, batch_size=16, interval_s=0.05) for j in (a, b)]
    assert all(f.shared for f in flushers) and flushers[0].owner != flushers[1].owner
    for f in flushers:
        f.start()
    try:
        for i in range(0, 300, 30):  # both replicas acknowledge turns, interleaved
            (a if i % 60 else b).append([pair(f"acme:u{k % 5}", k) for k in range(i, i + 30)])
        wait_for(lambda: a.pending_count() == 0 and len(store.writes) == 300)
    finally:
        for f in flushers:
            f.stop(drain=False)
    assert set(store.writes.values()) == {1}  # each pair written once, by one replica
    assert a.stats().flushed == 300
    assert all(f.stats().flushed > 0 for f in flushers)  # both took part


def test_a_replica_killed_in_a_write_has_its_batch_taken_over(make_journal):  # noqa: F811
    a, b = make_journal(), make_journal()
    stuck = threading.Event()
    killed, alive = Store(block=stuck), Store()
    seqs = a.append([pair(turn=i) for i in range(20)])
    fa = Flusher(a, killed.write, batch_size=8, interval_s=0.05, lease_s=1.0)
    worker = threading.Thread(target=lambda: pytest.raises(RuntimeError, fa.flush_now),
                              daemon=True)
    worker.start()  # claims seqs[:8] and hangs in the store write
    wait_for(lambda: len(leased(b)) == 8)
    fb = Flusher(b, alive.write, batch_size=8, interval_s=0.05)
    assert fb.flush_now() == 12  # the 12 not held by the stuck replica
    time.sleep(1.1)  # its lease ends
    assert fb.flush_now() == 8
    assert sorted(alive.writes) == sorted(p.id for p in [pair(turn=i) for i in range(20)])
    assert b.pending_count() == 0 and b.stats().flushed == len(seqs)
    stuck.set()
    worker.join(5)


def leased(j: PostgresJournal) -> list[int]:
    """Seqs under a live lease (read straight from the table)."""
    with j._engine.begin() as conn:
        return [r[0] for r in conn.execute(sa.text(
            "SELECT seq FROM journal_entries WHERE lease_until > "
            "extract(epoch FROM statement_timestamp())"))]


def test_journal_url_and_lease_are_checked():
    check_journal_config(JournalConfig(url="postgresql://u@127.0.0.1:5432/m", lease_s=30))
    for bad, field in (({"url": "mysql://x"}, "journal.url"), ({"lease_s": 0}, "journal.lease_s")):
        with pytest.raises(ConfigError) as err:
            check_journal_config(JournalConfig(**bad))
        assert err.value.field == field


def test_two_serving_cores_share_one_postgres_journal(tmp_path, monkeypatch, postgres_url):  # noqa: F811
    """Two ingress replicas (serving cores) on one PostgreSQL journal: a turn acknowledged by
    either is in the shared journal at once and reaches a store exactly once."""
    from memroute.config.schema import ModelConfig
    from tests.unit.fakes import call_like_ingress, serving_core

    small = ModelConfig(name="mock-small", engine="mock", params_b=0.5)
    journal = JournalConfig(path=str(tmp_path / "unused.sqlite3"), url=postgres_url,
                            interval_s=0.0)
    cores = [serving_core(tmp_path / f"r{k}", monkeypatch, small, api_keys={"sk-a": "acme"},
                          journal=journal) for k in range(2)]
    try:
        for k, core in enumerate(cores):
            body = {"model": "memroute", "user": "ann",
                    "messages": [{"role": "user", "content": f"note {k}: my locker is {k}"}]}
            assert call_like_ingress(core, body).status == 200
            assert isinstance(core.journal, PostgresJournal)
            assert core.idempotency.path == core.journal.path  # the shared database
        for core in cores:
            core.drain()
        stored = [p for core in cores for p in core.test_retriever.pairs]
        assert sorted(p.user_text for p in stored) == ["note 0: my locker is 0",
                                                        "note 1: my locker is 1"]
        assert cores[0].journal.stats().flushed == 2 and cores[0].journal.pending_count() == 0
    finally:
        for core in cores:
            core.close()


def test_a_retry_on_the_other_replica_gets_the_first_answer_byte_for_byte(  # noqa: F811
        tmp_path, monkeypatch, postgres_url):
    """Idempotency-Key answers live in the shared journal's database: a client's retry that
    lands on another replica gets the first answer as it was (no model call, no second
    turn-pair), a duplicate arriving there while the first still runs waits for it, and a
    different body under the key is a 409 on either replica."""
    from memroute.api.handler import REPLAYED_HEADER
    from memroute.config.schema import ModelConfig
    from tests.unit.fakes import call_like_ingress, model_calls, serving_core

    small = ModelConfig(name="mock-small", engine="mock", params_b=0.5)
    # each replica with a disk of its own (journal.path), as pods have
    a, b = (serving_core(tmp_path / f"r{k}", monkeypatch, small, api_keys={"sk-a": "acme"},
                         journal=JournalConfig(path=str(tmp_path / f"r{k}" / "local.sqlite3"),
                                               url=postgres_url, interval_s=0.0,
                                               idempotency_wait_s=10.0))
            for k in range(2))

    def body(text: str) -> dict:
        return {"model": "memroute", "user": "ann", "messages": [{"role": "user",
                                                                  "content": text}]}

    try:
        first = call_like_ingress(a, body("My locker code is ZX-4471."), key="run:1")
        assert first.status == 200 and REPLAYED_HEADER not in first.headers
        retry = call_like_ingress(b, body("My locker code is ZX-4471."), key="run:1")
        assert retry.status == 200 and retry.headers.pop(REPLAYED_HEADER) == "true"
        assert retry.to_json() == first.to_json()  # id, created, headers, body: byte for byte
        assert model_calls(b) == 0 and a.journal.stats().total == 1
        assert call_like_ingress(b, body("Something else."), key="run:1").status == 409

        # in progress on replica a: replica b's duplicate waits for that answer
        prepared = a.prepare(body("Hello."), "Bearer sk-a", "run:2")
        assert a.begin(prepared) is None  # a holds the key now
        got: list = []
        waiter = threading.Thread(target=lambda: got.append(
            call_like_ingress(b, body("Hello."), key="run:2")))
        waiter.start()
        time.sleep(0.3)
        result = a.route_batch([prepared])[0]
        answered = a.respond(prepared, result, latency_s=0.01)
        waiter.join(10)
        [late] = got
        assert late.status == 200 and late.headers.pop(REPLAYED_HEADER) == "true"
        assert late.to_json() == answered.to_json() and model_calls(b) == 0
    finally:
        a.close()
        b.close()
