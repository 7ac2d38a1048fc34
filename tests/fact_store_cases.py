"""The fact store's behaviour, once for both back ends.

:class:`FactStoreCases` holds the tests; ``tests/unit/test_fact_store.py`` (SQLite) and
``tests/integration/test_fact_store_postgres.py`` (a throwaway PostgreSQL server) subclass it
and provide the ``make_store`` fixture: ``make_store(**kwargs)`` opens another
:class:`FactStore` on the test's one database (two stores stand for two processes or
replicas) and closes them all at teardown.
"""

from __future__ import annotations

import threading
import time

import pytest

from memroute.errors import InvalidRequest, NotFound
from memroute.memory.facts import (
    ACTIVE,
    CONFIRMED,
    EPHEMERAL,
    INFERRED,
    PROFILE,
    RETRACTED,
    SUPERSEDED,
    FactInput,
    FactStoreError,
)

ALICE, BOB = "acme:alice", "acme:bob"


class Clock:
    """An injectable clock: ``clock()`` is the time, ``clock.t = ...`` moves it."""

    def __init__(self, t: float = 1_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def race(n: int, work) -> list:
    """Run ``work(i)`` in ``n`` threads released at once; their results in order."""
    barrier = threading.Barrier(n)
    out: list = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            out[i] = work(i)
        except BaseException as exc:  # noqa: BLE001 (re-raised in the test's thread)
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    if errors:
        raise errors[0]
    return out


_BULK_INSERT = ("INSERT INTO facts (user_id, key, value, category, source, status, valid_from, "
                "recorded_at) SELECT 'bench:u' || u, 'k.f' || {padded_i}, 'value ' || i, "
                "'temporal', 'explicit', 'active', :now, :now FROM ")
_BULK_SQL = {
    "postgresql": _BULK_INSERT.format(padded_i="lpad(i::text, 4, '0')")
    + "generate_series(0, :users - 1) u, generate_series(0, :per - 1) i",
    "sqlite": "WITH RECURSIVE us(u) AS (SELECT 0 UNION ALL SELECT u + 1 FROM us "
              "WHERE u + 1 < :users), fs(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM fs "
              "WHERE i + 1 < :per) " + _BULK_INSERT.format(padded_i="printf('%04d', i)")
              + "us, fs",
}


def bulk_load(store, users: int, per_user: int, now: float) -> None:
    """``users`` x ``per_user`` active facts ``bench:u<n>`` / ``k.f<nnnn>``, generated inside
    the database in one statement (a benchmark fixture, not the API)."""
    from sqlalchemy import text

    with store.engine.begin() as conn:
        conn.execute(text(_BULK_SQL[store.backend]), {"users": users, "per": per_user, "now": now})


class FactStoreCases:
    # -- supersession -----------------------------------------------------------------------

    def test_assert_returns_the_active_fact(self, make_store):
        store = make_store(clock=Clock(500.0))
        fact = store.assert_fact(ALICE, FactInput("user.budget", " 50L ", turn_id=7))
        assert (fact.status, fact.value, fact.valid_from, fact.recorded_at) == (ACTIVE, "50L",
                                                                               500.0, 500.0)
        assert (fact.category, fact.source, fact.turn_id) == ("temporal", "explicit", 7)
        assert fact.valid_until is None and fact.superseded_by is None
        assert store.active(ALICE) == [fact]

    def test_supersession_keeps_the_old_row(self, make_store):
        store = make_store()
        old = store.assert_fact(ALICE, FactInput("user.budget", "50L"), now=100.0)
        new = store.assert_fact(ALICE, FactInput("user.budget", "80L", valid_from=150.0), now=200.0)
        first, second = store.timeline(ALICE, "user.budget")
        assert first.id == old.id and second == new
        assert (first.status, first.valid_until, first.superseded_by, first.ended_at) == (
            SUPERSEDED, 150.0, new.id, 200.0)
        assert first.value == "50L" and first.recorded_at == 100.0
        assert (new.status, new.valid_from, new.recorded_at) == (ACTIVE, 150.0, 200.0)
        assert [f.value for f in store.active(ALICE, now=300.0)] == ["80L"]

    def test_profile_is_last_write_wins_with_history(self, make_store):
        store = make_store()
        for t, name in enumerate(["Raj", "Rajiv", "Rajiv Kumar"]):
            store.assert_fact(ALICE, FactInput("user.name", name, category=PROFILE), now=10.0 + t)
        history = store.timeline(ALICE, "user.name")
        assert [(f.value, f.status) for f in history] == [
            ("Raj", SUPERSEDED), ("Rajiv", SUPERSEDED), ("Rajiv Kumar", ACTIVE)]
        assert [f.value for f in store.active(ALICE, now=20.0)] == ["Rajiv Kumar"]

    def test_restatement_is_a_no_op_and_a_stronger_source_upgrades(self, make_store):
        store = make_store()
        guess = store.assert_fact(ALICE, FactInput("user.city", "Pune", source=INFERRED), now=10.0)
        assert store.assert_fact(ALICE, FactInput("user.city", "Pune", source=INFERRED),
                                 now=20.0) == guess
        upgraded = store.assert_fact(ALICE, FactInput("user.city", "Pune", source=CONFIRMED),
                                     now=30.0)
        assert upgraded.id != guess.id and upgraded.source == CONFIRMED
        # explicit ranks like confirmed, and a weaker restatement never downgrades
        for source in ("explicit", INFERRED):
            assert store.assert_fact(ALICE, FactInput("user.city", "Pune", source=source),
                                     now=40.0) == upgraded
        timeline = store.timeline(ALICE, "user.city")
        assert [(f.source, f.status) for f in timeline] == [(INFERRED, SUPERSEDED),
                                                             (CONFIRMED, ACTIVE)]
        assert timeline[0].valid_until == 30.0 and timeline[0].superseded_by == upgraded.id

    def test_timeline_is_every_status_in_recorded_order(self, make_store):
        store = make_store()
        a = store.assert_fact(ALICE, FactInput("user.budget", "50L"), now=1.0)
        b = store.assert_fact(ALICE, FactInput("user.budget", "80L"), now=2.0)
        store.retract(ALICE, b.id, now=3.0)
        c = store.assert_fact(ALICE, FactInput("user.budget", "75L"), now=4.0)
        store.assert_fact(ALICE, FactInput("user.city", "Pune"), now=5.0)
        store.assert_fact(BOB, FactInput("user.budget", "10L"), now=6.0)
        rows = store.timeline(ALICE, "user.budget")
        assert [(f.id, f.status) for f in rows] == [(a.id, SUPERSEDED), (b.id, RETRACTED),
                                                    (c.id, ACTIVE)]
        assert c.superseded_by is None and rows[1].superseded_by is None  # nothing was active
        assert store.timeline(ALICE, "user.unknown") == []

    def test_a_backdated_successor_never_inverts_an_interval(self, make_store):
        store = make_store()
        store.assert_fact(ALICE, FactInput("user.job", "A", valid_from=100.0), now=100.0)
        store.assert_fact(ALICE, FactInput("user.job", "B", valid_from=50.0), now=200.0)
        old, new = store.timeline(ALICE, "user.job")
        assert old.valid_until == 100.0 and new.status == ACTIVE
        # a lagging clock: transaction time still does not run backwards within the key
        late = store.assert_fact(ALICE, FactInput("user.job", "C"), now=150.0)
        assert late.recorded_at == 200.0

    # -- retraction -------------------------------------------------------------------------

    def test_retract_keeps_the_row(self, make_store):
        store = make_store()
        fact = store.assert_fact(ALICE, FactInput("user.pet", "cat"), now=10.0)
        gone = store.retract(ALICE, fact.id, now=20.0)
        assert (gone.id, gone.status, gone.valid_until, gone.retracted_at) == (fact.id, RETRACTED,
                                                                               20.0, 20.0)
        assert store.active(ALICE, now=30.0) == []
        assert store.timeline(ALICE, "user.pet") == [gone]
        assert store.retract(ALICE, fact.id, now=40.0) == gone  # idempotent
        again = store.assert_fact(ALICE, FactInput("user.pet", "dog"), now=50.0)
        assert store.active(ALICE, now=60.0) == [again]

    def test_retracting_a_superseded_fact_keeps_its_end(self, make_store):
        store = make_store()
        old = store.assert_fact(ALICE, FactInput("user.car", "red"), now=10.0)
        new = store.assert_fact(ALICE, FactInput("user.car", "blue"), now=20.0)
        gone = store.retract(ALICE, old.id, now=30.0)
        assert (gone.status, gone.valid_until, gone.superseded_by, gone.retracted_at) == (
            RETRACTED, 20.0, new.id, 30.0)
        assert store.active(ALICE, now=40.0) == [new]

    def test_retract_of_an_unknown_or_foreign_fact_is_not_found(self, make_store):
        store = make_store()
        bobs = store.assert_fact(BOB, FactInput("user.pet", "cat"))
        for fid in (bobs.id, bobs.id + 1000):
            with pytest.raises(NotFound) as err:
                store.retract(ALICE, fid)
            assert err.value.field == "fact_id" and err.value.status == 404
        assert store.active(BOB)[0].status == ACTIVE

    # -- ephemeral --------------------------------------------------------------------------

    def test_ephemeral_is_hidden_after_its_ttl_and_kept(self, make_store):
        clock = Clock(1_000.0)
        store = make_store(clock=clock, ephemeral_ttl_s=60.0)
        fact = store.assert_fact(ALICE, FactInput("user.appointment", "3pm", category=EPHEMERAL))
        assert fact.expires_at == 1_060.0
        clock.t = 1_059.0
        assert store.active(ALICE) == [fact]
        clock.t = 1_060.0
        assert store.active(ALICE) == []
        assert store.timeline(ALICE, "user.appointment") == [fact]  # hidden, not deleted
        # restated after expiry: a new row, visible again; the expired one superseded
        back = store.assert_fact(ALICE, FactInput("user.appointment", "3pm", category=EPHEMERAL))
        assert back.id != fact.id and store.active(ALICE) == [back]
        assert store.timeline(ALICE, "user.appointment")[0].status == SUPERSEDED

    def test_ephemeral_expiry_counts_from_valid_from(self, make_store):
        store = make_store(ephemeral_ttl_s=100.0)
        fact = store.assert_fact(
            ALICE, FactInput("user.free_slot", "noon", category=EPHEMERAL, valid_from=500.0),
            now=550.0)
        assert fact.expires_at == 600.0
        assert store.active(ALICE, now=599.0) == [fact] and store.active(ALICE, now=600.0) == []

    # -- bi-temporal ------------------------------------------------------------------------

    def test_as_of_reads_both_time_axes(self, make_store):
        store = make_store(clock=Clock(1_000.0))
        key = "user.budget"
        store.assert_fact(ALICE, FactInput(key, "50L", valid_from=100.0), now=110.0)
        # true since 200 in the world, but only extracted at 300
        late = store.assert_fact(ALICE, FactInput(key, "80L", valid_from=200.0), now=300.0)

        def value(valid_at, known_at=None):
            fact = store.as_of(ALICE, key, valid_at=valid_at, known_at=known_at)
            return None if fact is None else fact.value

        assert value(150.0) == "50L"
        assert value(250.0) == "80L"  # what we know now
        assert value(250.0, known_at=250.0) == "50L"  # what we believed at 250
        assert value(50.0) is None  # before anything was true
        assert value(150.0, known_at=105.0) is None  # before anything was recorded
        store.retract(ALICE, late.id, now=400.0)
        assert value(250.0, known_at=350.0) == "80L"
        assert value(250.0) is None  # 80L retracted, 50L ended at 200
        assert value(150.0) == "50L"

    def test_as_of_respects_ephemeral_expiry(self, make_store):
        store = make_store(ephemeral_ttl_s=10.0)
        store.assert_fact(ALICE, FactInput("user.mood", "busy", category=EPHEMERAL), now=100.0)
        assert store.as_of(ALICE, "user.mood", valid_at=105.0, known_at=200.0).value == "busy"
        assert store.as_of(ALICE, "user.mood", valid_at=110.0, known_at=200.0) is None

    # -- validation -------------------------------------------------------------------------

    @pytest.mark.parametrize(("fact", "field"), [
        (FactInput("User.Budget", "x"), "key"),
        (FactInput("user..budget", "x"), "key"),
        (FactInput("", "x"), "key"),
        (FactInput("a" * 129, "x"), "key"),
        (FactInput("user.budget", "  "), "value"),
        (FactInput("user.budget", "x" * 5000), "value"),
        (FactInput("user.budget", "nul\x00"), "value"),
        (FactInput("user.budget", 5), "value"),
        (FactInput("user.budget", "x", category="forever"), "category"),
        (FactInput("user.budget", "x", source="guessed"), "source"),
        (FactInput("user.budget", "x", valid_from=float("nan")), "valid_from"),
        (FactInput("user.budget", "x", valid_from="yesterday"), "valid_from"),
        (FactInput("user.budget", "x", turn_id=-1), "turn_id"),
        (FactInput("user.budget", "x", turn_id=True), "turn_id"),
        ("user.budget=x", "fact"),
    ])
    def test_bad_input_names_its_field(self, make_store, fact, field):
        store = make_store()
        with pytest.raises(InvalidRequest) as err:
            store.assert_fact(ALICE, fact)
        assert err.value.field == field and err.value.status == 400
        assert store.timeline(ALICE, "user.budget") == []

    def test_bad_arguments_name_their_field(self, make_store):
        store = make_store()
        cases = [
            (lambda: store.assert_fact("bad user", FactInput("k", "v")), "user_id"),
            (lambda: store.active(ALICE, now=float("inf")), "now"),
            (lambda: store.timeline(ALICE, "Bad Key"), "key"),
            (lambda: store.retract(ALICE, "1"), "fact_id"),
            (lambda: store.as_of(ALICE, "k", valid_at=None), "valid_at"),
            (lambda: store.as_of(ALICE, "k", valid_at=1.0, known_at="now"), "known_at"),
            (lambda: store.erase_tenant("ac:me"), "tenant"),
            (lambda: store.try_user_lock(ALICE, owner=""), "owner"),
        ]
        for call, field in cases:
            with pytest.raises(InvalidRequest) as err:
                call()
            assert err.value.field == field

    # -- erasure ----------------------------------------------------------------------------

    def _three_users(self, store):
        for uid in (ALICE, BOB, "globex:alice", "acme-x:alice", "acmex:alice", "acme"):
            store.assert_fact(uid, FactInput("user.budget", "50L"), now=1.0)
            store.assert_fact(uid, FactInput("user.budget", "80L"), now=2.0)

    def test_erase_user_removes_only_that_user(self, make_store):
        store = make_store()
        self._three_users(store)
        assert store.erase_user(ALICE) == 2
        assert store.timeline(ALICE, "user.budget") == []
        assert len(store.timeline(BOB, "user.budget")) == 2
        assert len(store.timeline("globex:alice", "user.budget")) == 2
        assert store.erase_user(ALICE) == 0

    def test_erase_tenant_removes_only_that_tenant(self, make_store):
        store = make_store()
        self._three_users(store)
        assert store.forget_tenant("acme") == 4  # the erasure module's cache protocol
        for uid in (ALICE, BOB):
            assert store.timeline(uid, "user.budget") == []
        for uid in ("globex:alice", "acme-x:alice", "acmex:alice", "acme"):
            assert len(store.timeline(uid, "user.budget")) == 2, uid
        assert store.erase_tenant("acme") == 0

    # -- concurrency ------------------------------------------------------------------------

    def test_concurrent_asserts_in_threads_leave_one_active(self, make_store):
        store = make_store()
        n = 8
        race(n, lambda i: store.assert_fact(ALICE, FactInput("user.budget", f"{i}0L")))
        self._assert_one_active_chain(store, n)

    def test_concurrent_asserts_from_two_stores_leave_one_active(self, make_store):
        stores = [make_store(), make_store()]
        n = 8
        for round_ in range(3):
            key = f"user.budget{round_}"
            race(n, lambda i, key=key: stores[i % 2].assert_fact(
                ALICE, FactInput(key, f"{i}0L")))
            self._assert_one_active_chain(stores[0], n, key)

    def test_concurrent_identical_asserts_write_one_row(self, make_store):
        stores = [make_store(), make_store()]
        results = race(6, lambda i: stores[i % 2].assert_fact(
            ALICE, FactInput("user.city", "Pune")))
        assert len({f.id for f in results}) == 1
        assert len(stores[0].timeline(ALICE, "user.city")) == 1

    @staticmethod
    def _assert_one_active_chain(store, n, key="user.budget"):
        rows = store.timeline(ALICE, key)
        assert len(rows) == n  # every assertion was a change: nothing lost, nothing deleted
        active = [f for f in rows if f.status == ACTIVE]
        assert len(active) == 1
        assert [f for f in store.active(ALICE) if f.key == key] == active
        successors = [f.superseded_by for f in rows if f.status == SUPERSEDED]
        ids = {f.id for f in rows}
        # one chain: each row but the last replaced exactly once, each but the first a successor
        assert len(successors) == len(set(successors)) == n - 1 and set(successors) <= ids
        assert active[0].superseded_by is None and active[0].id in successors
        assert len(ids - set(successors)) == 1

    # -- the per-user lock ------------------------------------------------------------------

    def test_user_lock_is_exclusive_across_two_stores(self, make_store):
        a, b = make_store(), make_store()
        assert a.try_user_lock(ALICE, owner="a")
        assert a.try_user_lock(ALICE, owner="a")  # the holder again: still its lock
        assert not b.try_user_lock(ALICE, owner="b")
        assert not a.try_user_lock(ALICE, owner="b")  # another owner in the same store
        assert b.try_user_lock(BOB, owner="b")  # per user
        assert not b.release_user_lock(ALICE, owner="b")  # not the holder: nothing released
        assert not b.try_user_lock(ALICE, owner="b")
        assert a.release_user_lock(ALICE, owner="a")
        assert b.try_user_lock(ALICE, owner="b")
        assert not a.try_user_lock(ALICE, owner="a")

    def test_user_lock_context_manager(self, make_store):
        a, b = make_store(), make_store()
        with a.user_lock(ALICE) as got:
            assert got
            with b.user_lock(ALICE) as other:
                assert not other
        with b.user_lock(ALICE) as got:  # released on exit
            assert got

    def test_closing_a_store_releases_its_locks(self, make_store):
        a, b = make_store(), make_store()
        assert a.try_user_lock(ALICE, owner="a") and a.try_user_lock(BOB, owner="a")
        a.close()
        assert b.try_user_lock(ALICE, owner="b") and b.try_user_lock(BOB, owner="b")

    def test_user_lock_race_has_one_winner(self, make_store):
        stores = [make_store(), make_store()]
        for round_ in range(5):
            wins = race(4, lambda i, r=round_: stores[i % 2].try_user_lock(
                ALICE, owner=f"w{r}.{i}"))
            assert sum(wins) == 1, wins
            winner = wins.index(True)
            assert stores[winner % 2].release_user_lock(ALICE, owner=f"w{round_}.{winner}")

    # -- schema and lifetime ----------------------------------------------------------------

    def test_schema_creation_is_idempotent(self, make_store):
        first = make_store()
        fact = first.assert_fact(ALICE, FactInput("user.budget", "50L"))
        second = make_store()
        assert second.active(ALICE) == [fact]
        race(2, lambda i: make_store())  # two stores opening at once
        assert make_store().timeline(ALICE, "user.budget") == [fact]

    def test_a_closed_store_refuses_work(self, make_store):
        store = make_store()
        store.close()
        store.close()
        with pytest.raises(FactStoreError):
            store.active(ALICE)
        with pytest.raises(FactStoreError):
            store.try_user_lock(ALICE, owner="x")

    def test_active_is_ordered_by_key_and_filters_per_user(self, make_store):
        store = make_store()
        for key in ("user.zip", "user.age", "user.b_c", "user.b"):
            store.assert_fact(ALICE, FactInput(key, "v"), now=1.0)
        store.assert_fact(BOB, FactInput("user.age", "v"), now=1.0)
        assert [f.key for f in store.active(ALICE, now=2.0)] == [
            "user.age", "user.b", "user.b_c", "user.zip"]

    def test_session_start_latency_is_printed(self, make_store):
        """Not an assertion (timings belong in bench/): 100 users x 1,000 active facts."""
        store = make_store()
        bulk_load(store, users=100, per_user=1_000, now=1.0)
        samples = []
        for i in range(200):
            began = time.perf_counter()
            got = store.active(f"bench:u{i % 100}", now=2.0)
            samples.append(time.perf_counter() - began)
        assert len(got) == 1_000
        samples.sort()
        print(f"\n{store.backend}: active() of 1,000 facts (100 users): "
              f"p50 {samples[100] * 1e3:.2f} ms, p95 {samples[190] * 1e3:.2f} ms")
