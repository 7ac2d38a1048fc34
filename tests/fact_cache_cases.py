"""The fact store's session-start cache and recent turns, once for both back ends.

``make_store`` is the fixture of tests/unit/test_fact_store.py (SQLite) and
tests/integration/test_fact_store_postgres.py (PostgreSQL): two stores on one database stand
for two ingress replicas, each with its own in-memory cache.
"""

from __future__ import annotations

from memroute.memory.facts import EPHEMERAL, FactInput
from memroute.types import TurnPair
from tests.fact_store_cases import ALICE, BOB

CAROL = "other:carol"


def pair(user: str, i: int, t: int, text: str = "") -> TurnPair:
    return TurnPair(user, "s1", i, text or f"question {i}", f"answer {i}", t, "m", created_at=float(t))


class FactCacheCases:
    def test_an_unchanged_user_is_served_from_the_cache_as_the_same_object(self, make_store):
        store = make_store()
        store.assert_fact(ALICE, FactInput("user.budget", "50"), now=100.0)
        first = store.active_snapshot(ALICE, now=200.0)
        assert store.active_snapshot(ALICE, now=201.0) is first
        assert (store.cache.hits, store.cache.misses) == (1, 1)
        assert [f.value for f in store.active(ALICE, now=202.0)] == ["50"]

    def test_a_write_through_another_replica_invalidates_this_ones_cache(self, make_store):
        a, b = make_store(), make_store()
        a.assert_fact(ALICE, FactInput("user.budget", "50"), now=100.0)
        assert [f.value for f in b.active(ALICE, now=150.0)] == ["50"]  # b caches it
        a.assert_fact(ALICE, FactInput("user.budget", "80"), now=200.0)
        assert [f.value for f in b.active(ALICE, now=250.0)] == ["80"]
        gone = a.retract(ALICE, b.active(ALICE, now=260.0)[0].id, now=300.0)
        assert gone.status == "retracted" and b.active(ALICE, now=310.0) == []

    def test_a_restatement_keeps_the_cache_and_other_users_are_apart(self, make_store):
        store = make_store()
        store.assert_fact(ALICE, FactInput("user.budget", "50"), now=100.0)
        store.assert_fact(BOB, FactInput("user.budget", "9"), now=100.0)
        first = store.active_snapshot(ALICE, now=200.0)
        store.assert_fact(ALICE, FactInput("user.budget", "50"), now=210.0)  # no change
        store.assert_fact(BOB, FactInput("user.budget", "10"), now=210.0)
        assert store.active_snapshot(ALICE, now=220.0) is first
        assert [f.value for f in store.active(BOB, now=220.0)] == ["10"]

    def test_an_ephemeral_fact_leaves_the_cached_set_when_it_expires(self, make_store):
        store = make_store(ephemeral_ttl_s=100.0)
        store.assert_fact(ALICE, FactInput("user.mood", "tired", category=EPHEMERAL), now=1000.0)
        store.assert_fact(ALICE, FactInput("user.budget", "50"), now=1000.0)
        assert len(store.active(ALICE, now=1099.0)) == 2
        assert [f.key for f in store.active(ALICE, now=1100.0)] == ["user.budget"]
        # an earlier 'now' than the cached read never reuses a set filtered later
        assert len(store.active(ALICE, now=1050.0)) == 2

    def test_erasure_empties_every_replicas_view(self, make_store):
        a, b = make_store(), make_store()
        a.assert_fact(ALICE, FactInput("user.budget", "50"), now=100.0)
        a.record_turns([pair(ALICE, 0, 100)], keep=5)
        assert b.active(ALICE, now=150.0) and b.recent_turns(ALICE, 5)
        assert a.erase_user(ALICE) == 2  # the fact and the turn
        assert b.active(ALICE, now=160.0) == [] and b.recent_turns(ALICE, 5) == []
        a.assert_fact(ALICE, FactInput("user.budget", "70"), now=170.0)
        assert [f.value for f in b.active(ALICE, now=180.0)] == ["70"]

    def test_the_cache_can_be_turned_off(self, make_store):
        store = make_store(cache_users=0)
        store.assert_fact(ALICE, FactInput("user.budget", "50"), now=100.0)
        assert store.active_snapshot(ALICE, now=200.0) is not store.active_snapshot(ALICE, now=201.0)
        assert len(store.cache) == 0

    def test_the_cache_is_bounded(self, make_store):
        store = make_store(cache_users=2)
        for i in range(4):
            uid = f"acme:u{i}"
            store.assert_fact(uid, FactInput("user.budget", str(i)), now=100.0)
            store.active(uid, now=200.0)
        assert len(store.cache) == 2

    # -- recent turns -----------------------------------------------------------------------

    def test_recent_turns_are_the_newest_kept_oldest_first(self, make_store):
        store = make_store()
        store.record_turns([pair(ALICE, i, 100 + i) for i in range(8)], keep=3)
        store.record_turns([pair(BOB, 0, 50)], keep=3)
        assert [m.turn_index for m in store.recent_turns(ALICE, 5)] == [5, 6, 7]
        assert [m.turn_index for m in store.recent_turns(ALICE, 2)] == [6, 7]
        newest = store.recent_turns(ALICE, 1)[0]
        assert newest.id == pair(ALICE, 7, 107).id and newest.text.endswith("A: answer 7")
        assert [m.user_id for m in store.recent_turns(BOB, 5)] == [BOB]

    def test_a_retried_turn_replaces_its_row(self, make_store):
        store = make_store()
        store.record_turns([pair(ALICE, 0, 100, "first")], keep=5)
        store.record_turns([pair(ALICE, 0, 100, "again"), pair(ALICE, 0, 100, "again")], keep=5)
        (only,) = store.recent_turns(ALICE, 5)
        assert "Q: again" in only.text

    def test_erasing_a_tenant_takes_its_turns_only(self, make_store):
        store = make_store()
        store.record_turns([pair(ALICE, 0, 100), pair(BOB, 0, 100), pair(CAROL, 0, 100)], keep=5)
        assert store.erase_tenant("acme") == 2
        assert store.recent_turns(ALICE, 5) == [] and len(store.recent_turns(CAROL, 5)) == 1

    # -- the extraction queue ----------------------------------------------------------------

    def test_the_queue_totals_tokens_across_replicas_and_keeps_late_turns(self, make_store):
        a, b = make_store(), make_store()
        assert a.queue.enqueue([pair(ALICE, 0, 100), pair(ALICE, 1, 101)], [30, 40]) == {ALICE: 70}
        # another replica, a retried pair (not counted twice) and a new one
        assert b.queue.enqueue([pair(ALICE, 1, 101), pair(ALICE, 2, 102), pair(BOB, 0, 5)],
                               [40, 50, 7]) == {ALICE: 120, BOB: 7}
        assert a.queue.users_over(100) == [ALICE] and a.queue.users_over(5) == [ALICE, BOB]
        read = b.queue.queued(ALICE)
        assert [p.turn_index for p in read] == [0, 1, 2] and read[0] == pair(ALICE, 0, 100)
        a.queue.enqueue([pair(ALICE, 3, 103)], [10])  # arrives while the run extracts
        assert b.queue.remove(ALICE, [p.id for p in read]) == 3
        assert [p.turn_index for p in a.queue.queued(ALICE)] == [3]
        assert a.queue.pending_tokens(ALICE) == 10
        assert a.queue.stats() == {"users_queued": 2, "turns_queued": 2}

    def test_erasure_empties_the_queue(self, make_store):
        store = make_store()
        store.queue.enqueue([pair(ALICE, 0, 100), pair(CAROL, 0, 100)], [5, 5])
        assert store.erase_user(ALICE) == 1
        assert store.queue.queued(ALICE) == [] and store.queue.pending_tokens(CAROL) == 5

    def test_an_extraction_running_while_its_user_is_erased_writes_nothing(self, make_store):
        """The model call takes seconds to minutes; an erasure meanwhile must stay an erasure.
        Another replica erases the user (then, in a second run, the tenant) during the call."""
        import json

        from memroute.llm.mock_backend import MockBackend
        from memroute.memory.facts.extraction import ERASED, ExtractionSchema, Extractor

        store, other = make_store(), make_store()
        answer = json.dumps({"facts": [{"key": "user.budget", "value": "80", "source": "explicit",
                                        "valid_from": None, "turn": 0}]})

        class ErasingBackend(MockBackend):
            erase = None

            def generate(self, *args, **kwargs):
                if self.erase is not None:
                    self.erase()
                return super().generate(*args, **kwargs)

        backend = ErasingBackend("m", answer=answer.replace("{", "{{").replace("}", "}}"))
        extractor = Extractor(backend, ExtractionSchema.from_config(units=False), store)
        turns = [pair(ALICE, 0, 100, "My budget is 80.")]
        for erase in (lambda: other.erase_user(ALICE),
                      lambda: other.erase_tenant(ALICE.split(":")[0])):
            backend.erase = erase
            result = extractor.extract(ALICE, turns)
            assert (result.skipped_reason, result.facts_written) == (ERASED, 0)
            assert store.timeline(ALICE, "user.budget") == []
        backend.erase = None  # a run that starts after the erasure writes as usual
        assert extractor.extract(ALICE, turns).facts_written == 1
        assert [f.value for f in other.active(ALICE)] == ["80"]
        # an erasure of someone else does not stop this user's run
        backend.erase = lambda: other.erase_user(BOB)
        mark = store.erasure_mark()
        assert store.erased_since(ALICE, mark) is False
        assert extractor.extract(ALICE, [pair(ALICE, 1, 200, "Now 90.")]).skipped_reason is None
        assert store.erased_since(BOB, mark) is True and store.erased_since(ALICE, mark) is False
