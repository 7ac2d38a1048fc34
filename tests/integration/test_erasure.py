"""Erasure on the real parts: Milvus Lite (tmp file), MiniLM, HybridRetriever, the SQLite journal,
its idempotency table and a running flusher, all built through ``memroute.build``.

A user's turn-pairs leave Milvus, the journal, the idempotency table and the BM25 cache; other
users and tenants keep theirs; the audit row holds counts, not content; a second erasure is a
no-op; acknowledged pairs not yet flushed are never written afterwards, while pairs appended
after the erasure are stored, also with writers racing the erasure.
"""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from memroute import build
from memroute.config.journal import JournalConfig
from memroute.config.schema import MemoryConfig, RetrievalConfig
from memroute.journal import Flusher, IdempotencyStore, JournaledRetriever
from memroute.journal.idempotency import Started
from memroute.serving.erasure import erase_tenant, erase_user, erasure_audit
from memroute.types import TurnPair

T0 = 1683504000
ALICE, BOB, CAROL, DAN = "acme:alice", "acme:bob", "globex:carol", "acme_x:dan"
SECRET = "My passport number is PX-88417 and my PIN is 5521."
TOPICS = ["the blue bicycle I bought", "my allergy to peanuts", "our trip to Kyoto",
          "the violin lessons on Tuesdays", "the tomato plants on my balcony"]


def turn(uid: str, i: int, text: str | None = None) -> TurnPair:
    text = text or f"Let me tell you about {TOPICS[i % len(TOPICS)]} (note {i})."
    return TurnPair(uid, "live", i, text, "Noted.", T0 + 60 * i, created_at=float(T0 + i))


class Parts:
    def __init__(self, tmp_path, encoder, *, start: bool = True) -> None:
        self.store = build.store(MemoryConfig(uri=str(tmp_path / "milvus.db")), encoder.dim)
        self.retriever = build.retriever(
            encoder, self.store, RetrievalConfig(top_k=5, candidate_k=50)
        )
        self.journal = build.journal(JournalConfig(path=str(tmp_path / "journal.sqlite3")))
        self.idem = IdempotencyStore(self.journal.path)
        self.flusher = Flusher(self.journal, self.retriever.remember, batch_size=8, interval_s=0.02)
        self.served = JournaledRetriever(self.retriever, self.journal)
        if start:
            self.flusher.start()

    def drain(self) -> None:
        assert self.flusher.wait_drained(60)
        self.store.flush()

    def ids(self, uid: str) -> set[int]:
        return {m.id for m in self.store.list_user(uid)}

    def erase(self, uid: str, actor: str = "ops"):
        return erase_user(self.store, self.journal, self.idem, self.retriever, uid, actor=actor)

    def close(self) -> None:
        if self.journal.closed:
            return
        self.flusher.stop(drain=False)
        self.idem.close()
        self.journal.close()
        self.store.close()


@pytest.fixture
def parts(tmp_path, encoder):
    p = Parts(tmp_path, encoder)
    yield p
    p.close()


def journal_rows(p: Parts, uid: str) -> int:
    conn = sqlite3.connect(p.journal.path)
    try:
        return conn.execute("SELECT count(*) FROM entries WHERE user_id = ?", (uid,)).fetchone()[0]
    finally:
        conn.close()


def answered(idem: IdempotencyStore, tenant: str, key: str, uid: str, text: str) -> None:
    claim = idem.begin(tenant, key, "h", user_id=uid)
    assert isinstance(claim, Started) and idem.complete(claim, f'{{"content": "{text}"}}')


def test_erasing_a_user_on_milvus_lite(tmp_path, encoder, parts):
    p = parts
    p.served.remember([turn(ALICE, 0, SECRET), *(turn(ALICE, i) for i in range(1, 4))])
    for uid in (BOB, CAROL, DAN):
        p.served.remember([turn(uid, i) for i in range(4)])
    p.drain()
    p.flusher.stop(drain=False)  # two more each, acknowledged but not flushed
    for uid in (ALICE, BOB):
        p.served.remember([turn(uid, i) for i in (10, 11)])
    answered(p.idem, "acme", "k1", ALICE, SECRET)
    answered(p.idem, "acme", "k2", BOB, "bob")
    assert "PX-88417" in p.retriever.retrieve(ALICE, "What is my passport number?")[0].memory.text
    p.retriever.retrieve(BOB, "peanuts")
    assert ALICE in p.retriever.bm25 and BOB in p.retriever.bm25

    report = p.erase(ALICE, actor="dpo@acme")

    assert (report.store_rows, report.journal_rows, report.idempotency_rows) == (4, 6, 1)
    assert p.store.count(ALICE) == 0 and p.ids(ALICE) == set()
    assert journal_rows(p, ALICE) == 0 and p.journal.pending_for_user(ALICE) == []
    assert ALICE not in p.retriever.bm25
    assert p.retriever.retrieve(ALICE, "What is my passport number?") == []
    assert p.served.retrieve(ALICE, "What is my passport number?") == []
    assert p.idem.counts()["completed"] == 1  # bob's
    for uid in (BOB, CAROL, DAN):
        assert p.store.count(uid) == 4
    assert journal_rows(p, BOB) == 6 and BOB in p.retriever.bm25
    assert any("peanuts" in h.memory.text for h in p.retriever.retrieve(BOB, "peanut allergy"))

    (audit,) = erasure_audit(p.journal)
    assert (audit["actor"], audit["scope"], audit["target"], audit["completed"]) == (
        "dpo@acme", "user", ALICE, True)
    assert (audit["store_rows"], audit["journal_rows"], audit["idempotency_rows"]) == (4, 6, 1)
    conn = sqlite3.connect(p.journal.path)
    dump = "\n".join(conn.iterdump())
    conn.close()
    assert "PX-88417" not in dump

    again = p.erase(ALICE)
    assert (again.store_rows, again.journal_rows, again.idempotency_rows) == (0, 0, 0)
    assert len(erasure_audit(p.journal)) == 2

    p.flusher.start()  # bob's pending pairs still go through; alice's never come back
    p.drain()
    assert p.store.count(BOB) == 6 and p.store.count(ALICE) == 0
    p.close()
    reopened = Parts(tmp_path, encoder, start=False)  # the delete is durable in the Lite file
    try:
        assert reopened.store.count(ALICE) == 0 and reopened.store.count(BOB) == 6
    finally:
        reopened.close()


def test_acknowledged_unflushed_pairs_are_not_resurrected(parts):
    p = parts
    p.flusher.stop(drain=False)  # paused
    acked = [turn(ALICE, i) for i in range(5)]
    p.served.remember(acked)  # acknowledged: durable in the journal
    assert p.journal.pending_count() == 5
    report = p.erase(ALICE)
    assert report.journal_rows == 5 and report.store_rows == 0
    p.flusher.start()  # resumed: its first pass replays whatever is pending
    p.drain()
    assert p.store.count(ALICE) == 0

    new = turn(ALICE, 20, "I adopted a golden retriever named Biscuit.")
    p.served.remember([new])
    p.drain()
    assert p.ids(ALICE) == {new.id}
    assert p.retriever.retrieve(ALICE, "What is my dog called?")[0].memory.id == new.id


def test_erasure_under_concurrent_writes(parts, monkeypatch):
    p = parts
    real_delete = p.store.delete_user

    def slow_delete(uid: str) -> int:  # a loaded server: writes keep arriving meanwhile
        time.sleep(0.5)
        return real_delete(uid)

    monkeypatch.setattr(p.store, "delete_user", slow_delete)
    seqs: dict[int, int] = {}
    lock, stop = threading.Lock(), threading.Event()
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            i = 0
            while not stop.is_set() or i < 8:
                pr = turn(ALICE, 1000 * w + i)
                (s,) = p.journal.append([pr])
                with lock:
                    seqs[pr.id] = s
                i += 1
                time.sleep(0.01)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    p.served.remember([turn(BOB, i) for i in range(3)])
    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # some flushed, some in flight, some pending
    report = p.erase(ALICE)
    time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(30)
    assert not errors
    p.drain()
    before = {i for i, s in seqs.items() if s <= report.boundary_seq}
    after = {i for i, s in seqs.items() if s > report.boundary_seq}
    assert before and after
    assert p.ids(ALICE) == after  # every new pair, none from before the tombstone
    assert p.store.count(BOB) == 3


def test_erasing_a_tenant_on_milvus_lite(parts):
    p = parts
    users = [ALICE, BOB, CAROL, DAN, "acmeXx:erin"]
    for uid in users:
        p.served.remember([turn(uid, i) for i in range(3)])
    p.drain()
    answered(p.idem, "acme", "k1", ALICE, "a")
    answered(p.idem, "acme_x", "k2", DAN, "d")
    for uid in users:
        p.retriever.retrieve(uid, "bicycle")

    report = erase_tenant(p.store, p.journal, p.idem, p.retriever, "acme", actor="root")

    assert (report.store_rows, report.journal_rows, report.idempotency_rows) == (6, 6, 1)
    assert p.store.count(ALICE) == p.store.count(BOB) == 0
    assert ALICE not in p.retriever.bm25 and BOB not in p.retriever.bm25
    for uid in (CAROL, DAN, "acmeXx:erin"):
        assert p.store.count(uid) == 3 and journal_rows(p, uid) == 3 and uid in p.retriever.bm25
    assert p.store.tenant_users("acme") == set()
    assert p.store.tenant_users("acme_x") == {DAN}
    again = erase_tenant(p.store, p.journal, p.idem, p.retriever, "acme", actor="root")
    assert (again.store_rows, again.journal_rows, again.idempotency_rows) == (0, 0, 0)
