"""The PostgreSQL journal (memroute.journal.store.PostgresJournal) on a real, throwaway PostgreSQL
server (tests/integration/postgres.py): the SQLite journal's behaviour (tests/journal_cases.py,
the rest of tests/unit/test_journal.py and the journal parts of tests/unit/test_erasure.py),
plus what several replicas need: claims with leases (two flushers, a killed flusher) and
erasure ordered against appends of another replica. Two PostgresJournal objects on one database
stand for two replicas."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from memroute.errors import ConfigError, InvalidRequest
from memroute.journal import Flusher, Journal, JournalError
from memroute.journal.codec import encode_pair
from memroute.journal import PostgresJournal
from memroute.types import TurnPair
from tests import journal_cases as cases
from tests.integration.pg_journal_helpers import make_journal, sql  # noqa: F401 (fixture)
from tests.integration.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from tests.journal_cases import ALICE, BOB, CAROL, pair, run_threads


# ------------------------------------------------------------------- the SQLite behaviour


@pytest.mark.parametrize("case", cases.CASES, ids=lambda case: case.__name__)
def test_shared_case(make_journal, case):  # noqa: F811
    case(make_journal)


def test_append_is_committed_and_visible_to_another_replica(make_journal, postgres_url):  # noqa: F811
    j = cases.append_is_committed_and_survives_a_restart(make_journal)
    assert sql(j, "SHOW synchronous_commit") == [("on",)]  # commit waits for the WAL flush
    assert j.stats().path == postgres_url and "@127.0.0.1" in j.path


def test_failed_entries_are_parked_and_requeued(make_journal):  # noqa: F811
    j = make_journal()
    seen: list[int] = []
    j.add_listener(seen.append)
    a, b, c = j.append([pair(turn=i) for i in range(3)])
    assert j.mark_failed([b], "InvalidRequest: too long\x00" + "x" * 5000) == 1
    assert j.mark_failed([b], "again") == 0  # no longer pending
    [parked] = j.failed()
    assert parked.seq == b and parked.error.startswith("InvalidRequest: too long")
    assert len(parked.error) == 2000
    assert [e.seq for e in j.pending()] == [a, c] and j.stats().failed == 1
    assert j.claim(10, owner="f", lease_s=30) and j.claim(10, owner="g", lease_s=30) == []
    assert j.requeue_failed() == 1 and [e.seq for e in j.pending()] == [a, b, c]
    assert seen == [3, 1]  # the append and the requeue woke the listener
    assert [e.seq for e in j.claim(10, owner="g", lease_s=30)] == [b]  # requeued: claimable
    assert j.failed() == []


def test_closed_journal_raises_journal_error(make_journal):  # noqa: F811
    j = cases.closed_journal_raises_journal_error(make_journal)
    with pytest.raises(JournalError):
        j.claim(1, owner="o", lease_s=1)


def test_bad_input_raises_what_the_sqlite_journal_raises(make_journal, tmp_path):  # noqa: F811
    pg, lite = make_journal(), Journal(tmp_path / "j.sqlite3")
    calls = {
        "bad pair in a batch": lambda j: j.append([pair(), pair("bad id!")]),
        "float session_time": lambda j: j.append(
            [dataclasses.replace(pair(turn=2), session_time=1.5)]),
        "nan created_at": lambda j: j.append([pair(created_at=float("nan"))]),
        "not a pair": lambda j: j.append(["not a pair"]),
        "pending_for_user": lambda j: j.pending_for_user('x" or 1'),
        "erasure_seq": lambda j: j.erasure_seq("bad id!"),
        "erase_user id": lambda j: j.erase_user("bad id!", actor="ops"),
        "erase_tenant name": lambda j: j.erase_tenant("acme:alice", actor="ops"),
        "empty actor": lambda j: j.erase_user(ALICE, actor=""),
        "unprintable actor": lambda j: j.erase_user(ALICE, actor="ops\n"),
        "zero limit": lambda j: j.pending(0),
        "bool limit": lambda j: j.failed(True),
        "audit limit": lambda j: j.erasure_audit(-1),
    }
    try:
        for name, call in calls.items():
            raised = []
            for j in (pg, lite):
                with pytest.raises((InvalidRequest, ValueError)) as e:
                    call(j)
                raised.append((type(e.value), getattr(e.value, "field", None)))
            assert raised[0] == raised[1], name
        assert pg.stats().total == 0 and pg.erasure_audit() == [] and pg.append([]) == []
    finally:
        lite.close()
    with pytest.raises(InvalidRequest) as e:
        pg.claim(5, owner="", lease_s=1)
    assert e.value.field == "owner"
    for bad in (0, -1, float("inf"), True):
        with pytest.raises(ValueError):
            pg.claim(5, owner="o", lease_s=bad)
    with pytest.raises(ValueError):
        pg.claim(0, owner="o", lease_s=1)


def test_unusable_urls_are_config_errors(make_journal, postgres_url):  # noqa: F811
    for url in ("sqlite:///tmp/x.sqlite3", "mysql://h/db", ""):
        with pytest.raises(ConfigError) as e:
            PostgresJournal(url)
        assert e.value.field == "journal.url"
    j = make_journal()
    sql(j, "DROP TABLE journal_entries")
    sql(j, "CREATE TABLE journal_entries (id int)")  # someone else's table of that name
    with pytest.raises(ConfigError) as e:
        PostgresJournal(postgres_url)
    assert e.value.field == "journal.url" and "not a memroute journal" in str(e.value)


def test_replicas_append_concurrently_each_pair_once(make_journal):  # noqa: F811
    cases.concurrent_appends_record_each_pair_once(make_journal, journals=2, clients=8,
                                                   per_client=8)


def test_the_existing_flusher_drains_a_postgres_journal(make_journal):  # noqa: F811
    j = make_journal()
    rows: dict[int, TurnPair] = {}
    pairs = [pair(turn=i) for i in range(10)]
    j.append(pairs)
    f = Flusher(j, lambda ps: rows.update((p.id, p) for p in ps), batch_size=4)
    assert f.flush_now() == 10 and j.pending_count() == 0
    assert sorted(rows) == sorted(p.id for p in pairs)


# ------------------------------------------------------------------ claims and leases


def test_two_flushers_claim_500_entries_each_flushed_exactly_once(make_journal):  # noqa: F811
    loader = make_journal()
    for start in range(0, 500, 100):
        loader.append([pair(f"acme:u{i % 7}", i) for i in range(start, start + 100)])
    replicas = [make_journal(), make_journal()]
    claimed: list[list[int]] = [[], []]
    marked = [0, 0]

    def flusher(k: int) -> None:
        j = replicas[k]
        while True:
            batch = j.claim(25, owner=f"replica-{k}", lease_s=60)  # no lease ends in this test
            if not batch:
                if j.pending_count() == 0:
                    return
                time.sleep(0.005)  # the other one holds the rest: poll, as across replicas
                continue
            claimed[k].extend(e.seq for e in batch)
            marked[k] += j.mark_flushed([e.seq for e in batch])

    run_threads(2, flusher)
    everything = claimed[0] + claimed[1]
    assert len(everything) == len(set(everything)) == 500  # none claimed twice, none lost
    assert sum(marked) == 500 and loader.pending_count() == 0
    assert loader.stats().flushed == 500
    assert claimed[0] and claimed[1]  # both took part


def test_a_killed_flushers_entries_are_claimed_after_its_lease(make_journal):  # noqa: F811
    a, b = make_journal(), make_journal()
    seqs = a.append([pair(turn=i) for i in range(30)])
    doomed = a.claim(10, owner="a", lease_s=1.0)
    assert [e.seq for e in doomed] == seqs[:10]
    a.close()  # killed mid-batch: it never marks; its connections are gone, its lease is not
    [late] = b.append([pair(turn=99, text="appended meanwhile")])
    first = b.claim(100, owner="b", lease_s=30)
    assert [e.seq for e in first] == seqs[10:] + [late]  # not the live lease's entries
    assert b.mark_flushed([e.seq for e in first]) == 21
    assert b.claim(100, owner="c", lease_s=30) == []
    time.sleep(1.2)  # the lease ends (server clock)
    second = b.claim(100, owner="b", lease_s=30)
    assert [e.seq for e in second] == seqs[:10]
    assert b.mark_flushed([e.seq for e in second]) == 10
    assert b.pending_count() == 0 and b.stats().flushed == 31
    assert b.mark_flushed(seqs[:10]) == 0  # "a" coming back marks nothing twice


def test_the_owner_reclaims_its_own_entries_and_release_gives_them_back(make_journal):  # noqa: F811
    j = make_journal()
    seqs = j.append([pair(turn=i) for i in range(3)])
    assert [e.seq for e in j.claim(2, owner="a", lease_s=30)] == seqs[:2]
    assert [e.seq for e in j.claim(5, owner="b", lease_s=30)] == seqs[2:]
    # a retry after a failed store write: its own entries again, oldest first
    assert [e.seq for e in j.claim(5, owner="a", lease_s=30)] == seqs[:2]
    assert j.release(seqs, owner="b") == 1 and j.release(seqs, owner="nobody") == 0
    assert [e.seq for e in j.claim(5, owner="c", lease_s=30)] == seqs[2:]


def test_a_version_replaced_while_claimed_waits_for_the_old_write(make_journal):  # noqa: F811
    a, b = make_journal(), make_journal()
    p = pair(answer="v1")
    [old] = a.append([p])
    assert [e.seq for e in a.claim(5, owner="a", lease_s=30)] == [old]
    [new] = b.append([dataclasses.replace(p, assistant_text="v2")])  # replaced meanwhile
    assert new > old and b.claim(5, owner="b", lease_s=30) == []  # not beside the old write
    assert a.mark_flushed([old]) == 0  # the old version is gone: nothing flushed ...
    [entry] = b.claim(5, owner="b", lease_s=30)  # ... and the new version is claimable now
    assert (entry.seq, entry.pair.assistant_text) == (new, "v2")
    assert b.mark_flushed([new]) == 1 and a.pending_count() == 0


# ------------------------------------------------------------------------------ erasure


def test_erasure_deletes_the_target_only_and_later_appends_are_new_data(make_journal):  # noqa: F811
    j = make_journal()
    users = [ALICE, BOB, CAROL, "acme_x:dan", "acme"]  # a look-alike tenant, a user named acme
    j.append([pair(u, i) for u in users for i in range(3)])
    j.mark_flushed([e.seq for e in j.pending(4)])  # flushed rows are erased too
    [claimed] = j.claim(1, owner="f", lease_s=30)  # so are claimed ones
    done = j.erase_user(ALICE, actor="dpo@acme")
    assert done.journal_rows == 3 and done.boundary_seq == j.last_seq() == 15
    assert claimed.pair.user_id == BOB
    assert {e.pair.user_id for e in j.pending()} == set(users) - {ALICE}
    assert j.erasure_seq(ALICE) == done.boundary_seq and j.erasure_seq(BOB) is None
    t = j.erase_tenant("acme", actor="root")
    assert t.journal_rows == 3 and j.erasure_seq("acme:zed") == t.boundary_seq  # bob's
    assert {e.pair.user_id for e in j.pending()} == {CAROL, "acme_x:dan", "acme"}
    assert j.erasure_seq("acme") is None  # no ':': not a user of tenant acme
    assert j.erase_user(ALICE, actor="ops").journal_rows == 0  # idempotent
    [s] = j.append([pair(ALICE, 0)])  # the same pair re-sent after the erasure: new data
    assert s > t.boundary_seq and [e.seq for e in j.pending_for_user(ALICE)] == [s]
    audit = j.erasure_audit()
    assert [(a.scope, a.target, a.actor) for a in audit] == [
        ("user", ALICE, "ops"), ("tenant", "acme", "root"), ("user", ALICE, "dpo@acme")]
    assert audit[2].completed_at is None and audit[2].boundary_seq == 15
    j.finish_erasure(done.audit_id, store_rows=3, idempotency_rows=1)
    [row] = j.erasure_audit(target=ALICE, limit=1)
    assert row.id != done.audit_id
    [first] = [a for a in j.erasure_audit(target=ALICE) if a.id == done.audit_id]
    assert (first.store_rows, first.idempotency_rows) == (3, 1) and first.completed_at


def test_the_journal_never_hands_out_an_entry_at_or_below_a_tombstone(make_journal):  # noqa: F811
    j = make_journal()
    j.append([pair(BOB, 0)])
    j.erase_user(ALICE, actor="ops")
    j.erase_tenant("globex", actor="ops")
    for seq, uid in ((1000, ALICE), (1001, CAROL), (1002, "globex")):  # escaped the delete
        sql(j, "INSERT INTO journal_entries (seq, pair_id, user_id, payload, appended_at) "
               "OVERRIDING SYSTEM VALUE VALUES (:s, :s, :u, :p, 0)",
            s=seq, u=uid, p=encode_pair(pair(uid, seq)))
    sql(j, "UPDATE journal_erasures SET seq = 2000")
    # 'globex' (no ':') is not a user of tenant globex: its tombstone does not cover it
    assert [e.pair.user_id for e in j.pending()] == [BOB, "globex"]
    assert [e.pair.user_id for e in j.claim(10, owner="f", lease_s=30)] == [BOB, "globex"]
    assert j.pending_for_user(ALICE) == [] and j.pending_for_user(CAROL) == []
    assert j.erasure_seq(ALICE) == 2000 and j.erasure_seq("globex:zed") == 2000
    assert j.erasure_seq("globex") is None


def test_erased_among_sees_an_erasure_by_another_replica(make_journal):  # noqa: F811
    mine, theirs = make_journal(), make_journal()
    mine.append([pair(ALICE, i) for i in range(3)] + [pair(BOB, 0)])
    batch = mine.claim(10, owner="mine", lease_s=30)  # read, now being written to the store
    assert mine.erased_among(batch) == []
    theirs.erase_user(ALICE, actor="ops")  # no store gate of ours is involved
    assert [e.pair.user_id for e in mine.erased_among(batch)] == [ALICE] * 3
    assert mine.mark_flushed([e.seq for e in batch]) == 1  # only bob's is still there


_acked_lock = threading.Lock()


def _append_until(j: PostgresJournal, uid: str, first: int, stop: threading.Event,
                  acked: dict[int, tuple[str, int]], errors: list[BaseException]) -> None:
    """Append pairs of ``uid`` one request at a time until ``stop`` (at least 10)."""
    i = 0
    try:
        while not stop.is_set() or i < 10:
            p = pair(uid, first + i)
            [s] = j.append([p])
            with _acked_lock:
                acked[p.id] = (p.user_id, s)
            i += 1
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        errors.append(exc)


@pytest.mark.parametrize("scope", ["user", "tenant"])
def test_appends_racing_an_erasure_are_either_erased_or_after_the_boundary(make_journal, scope):  # noqa: F811
    eraser = make_journal()
    writers = [make_journal(), make_journal()]  # other replicas, appending during the erasure
    erased_users = {ALICE} if scope == "user" else {ALICE, BOB}
    for round_ in range(4):
        acked: dict[int, tuple[str, int]] = {}  # pair id -> (user, seq) of each acknowledged pair
        stop, errors = threading.Event(), []
        threads = [threading.Thread(target=_append_until, args=(
            writers[k // 2], ALICE if k % 2 == 0 else BOB, round_ * 1_000_000 + k * 10_000,
            stop, acked, errors)) for k in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.05)
        report = (eraser.erase_user(ALICE, actor="ops") if scope == "user"
                  else eraser.erase_tenant("acme", actor="ops"))
        time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join(30)
        assert not errors, errors
        b = report.boundary_seq
        rows = {int(i): int(s) for i, s in sql(eraser, "SELECT pair_id, seq FROM journal_entries")}
        erased = {i for i, (u, s) in acked.items() if u in erased_users and s <= b}
        kept = {i: s for i, (u, s) in acked.items() if u not in erased_users or s > b}
        assert not erased & rows.keys(), f"round {round_}: pairs at or below B={b} survived"
        assert {i: rows.get(i) for i in kept} == kept, f"round {round_}: acknowledged pairs lost"
        left = sql(eraser, "SELECT seq FROM journal_entries WHERE user_id = ANY(:u)",
                   u=sorted(erased_users))
        assert all(int(s) > b for (s,) in left)  # earlier rounds' pairs included
        # the race was real: the target had pairs on both sides of the boundary
        assert erased and any(acked[i][0] in erased_users for i in kept), round_
        assert report.journal_rows >= len(erased)


# -------------------------------------------------------------------------- idempotency


def test_idempotency_keys_are_shared_by_replicas(postgres_url):  # noqa: F811
    """Two IdempotencyStores on one database (two replicas): of 8 concurrent first requests
    with one key exactly one claims it, and every later one, on either replica, gets its
    answer; a different body is a conflict, an erasure goes for both."""
    from memroute.journal import IdempotencyStore
    from memroute.journal.idempotency import Conflict, Existing, InProgress, Started

    stores = [IdempotencyStore(postgres_url), IdempotencyStore(postgres_url)]
    try:
        outcomes: list = []
        run_threads(8, lambda k: outcomes.append(
            stores[k % 2].begin("acme", "run:1", "h", user_id=ALICE)))
        [claim] = [o for o in outcomes if isinstance(o, Started)]
        assert all(isinstance(o, InProgress) for o in outcomes if o is not claim)
        assert stores[0].complete(claim, '{"answer": "first"}') or stores[1].complete(
            claim, '{"answer": "first"}')
        for store in stores:
            assert store.begin("acme", "run:1", "h") == Existing('{"answer": "first"}')
            assert isinstance(store.begin("acme", "run:1", "other"), Conflict)
        users = "SELECT count(*) FROM journal_idempotency_users"
        assert sql_rows(postgres_url, users) == 1
        assert stores[1].erase_user(ALICE) == 1 and sql_rows(postgres_url, users) == 0
        assert isinstance(stores[0].begin("acme", "run:1", "h"), Started)  # runs again
    finally:
        for store in stores:
            store.close()
    assert sql_rows(postgres_url, "SELECT count(*) FROM journal_idempotency") == 0  # closed


def sql_rows(url: str, statement: str) -> int:
    j = PostgresJournal(url)
    try:
        return int(sql(j, statement)[0][0])
    finally:
        j.close()
