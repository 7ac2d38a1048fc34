"""The background extraction lane on the fact store's extraction queue (SQLite): turns are counted
as the flusher stores them, a user past the threshold gets one extraction run off the request
path (a second trigger meanwhile runs none, on this replica or another), a run that finds the
user locked elsewhere keeps its turns, a restarted lane picks up what was queued, erasure
empties a user's queue; and, through the serving core, a stated fact ends up in the fact store."""

from __future__ import annotations

import threading
import time

import pytest

from memroute.config.extraction import ExtractionConfig
from memroute.config.schema import ModelConfig
from memroute.memory.facts import FactStore
from memroute.memory.facts.extraction import ExtractionResult
from memroute.namespace import namespace
from memroute.memory.facts.lane import ExtractionLane
from memroute.types import TurnPair

from .fakes import call_like_ingress, serving_core


def pair(user, i, text="My budget is 80 dollars a day."):
    return TurnPair(user, "s", i, text, "Noted.", 1_700_000_000 + i)


class SlowExtractor:
    def __init__(self, reason=None, delay=0.2):
        self.calls, self.reason, self.delay = [], reason, delay
        self.started = threading.Event()

    def extract(self, user_id, turns, erasure_mark=None):
        self.started.set()
        self.calls.append((user_id, [t.turn_index for t in turns]))
        time.sleep(self.delay)
        return ExtractionResult(facts_written=len(turns), attempts=1, skipped_reason=self.reason)


def words(text):
    return len(text.split())


@pytest.fixture
def stores(tmp_path):
    """Fact stores on one database: two of them stand for two replicas."""
    opened = []

    def make():
        opened.append(FactStore(f"sqlite:///{tmp_path / 'facts.sqlite3'}"))
        return opened[-1]

    yield make
    for s in opened:
        s.close()


def lane_on(store, ex, threshold=10):
    return ExtractionLane(ex, queue=store.queue, threshold_tokens=threshold,
                          count_text_tokens=words)


def test_past_the_threshold_one_run_takes_every_queued_turn_and_a_second_trigger_waits(stores):
    ex = SlowExtractor()
    lane = lane_on(stores(), ex)
    assert lane.observe([pair("u", 0)]) == []  # 8 words: below
    [run] = lane.observe([pair("u", 1)])  # 16: due
    ex.started.wait(5)
    assert lane.observe([pair("u", 2), pair("u", 3)]) == []  # running: no second extraction
    run.result(5)
    assert ex.calls == [("u", [0, 1])]
    [later] = lane.observe([pair("u", 4)])  # the turns that came meanwhile are next
    later.result(5)
    assert ex.calls[1] == ("u", [2, 3, 4]) and lane.stats()["runs"] == 2
    lane.close()


def test_a_retried_store_write_is_not_counted_twice_and_locked_runs_keep_their_turns(stores):
    store = stores()
    ex = SlowExtractor(reason="locked", delay=0)
    lane = lane_on(store, ex)
    lane.observe([pair("acme:u", 0)])
    lane.observe([pair("acme:u", 0)])  # the same pair again: 8 tokens, not 16
    assert lane.pending_tokens("acme:u") == 8
    [run] = lane.observe([pair("acme:u", 1)])
    run.result(5)
    assert lane.pending_tokens("acme:u") == 16  # still queued for the next run
    assert store.erase_user("acme:u") == 2 and lane.pending_tokens("acme:u") == 0
    lane.close()


def test_invalid_output_drops_the_turns_and_a_failed_run_keeps_them(stores):
    store = stores()
    lane = lane_on(store, SlowExtractor(reason="invalid_output", delay=0))
    [run] = lane.observe([pair("u", 0), pair("u", 1)])
    run.result(5)
    assert lane.pending_tokens("u") == 0 and lane.stats()["skipped"] == 1

    class Broken:
        def extract(self, user_id, turns, erasure_mark=None):
            raise RuntimeError("engine down")

    broken = lane_on(store, Broken())
    [run] = broken.observe([pair("u", 2), pair("u", 3)])
    run.result(5)
    assert broken.pending_tokens("u") == 16 and broken.stats()["failed"] == 1
    lane.close()
    broken.close()


def test_two_replicas_feed_one_total_and_a_restart_recovers_the_queue(stores):
    a_ex, b_ex = SlowExtractor(delay=0), SlowExtractor(delay=0)
    a, b = lane_on(stores(), a_ex), lane_on(stores(), b_ex)
    assert a.observe([pair("u", 0)]) == []  # 8 of 10 on replica a
    [run] = b.observe([pair("u", 1)])  # replica b sees 16: both turns are one user's
    run.result(5)
    assert b_ex.calls == [("u", [0, 1])] and a_ex.calls == []
    a.close()
    b.close()
    # a process dies with a user past the threshold (queued by observe, never run)
    dead = lane_on(stores(), SlowExtractor(delay=0), threshold=10**6)
    dead.observe([pair("v", 0), pair("v", 1)])
    dead.close()
    ex = SlowExtractor(delay=0)
    restarted = lane_on(stores(), ex)
    [run] = restarted.recover()
    run.result(5)
    assert ex.calls == [("v", [0, 1])] and restarted.pending_tokens("v") == 0
    restarted.close()


EXTRACTED = ('{{"facts": [{{"key": "user.budget", "value": "80 dollars a day", '
             '"source": "explicit", "valid_from": null, "turn": 0}}]}}')
SMALL = ModelConfig(name="mock-small", engine="mock", params_b=0.5, engine_args={
    "answer": "Noted.", "rules": [{"match": "^Conversation:", "answer": EXTRACTED}]})


def test_a_stated_fact_reaches_the_fact_store_through_the_served_path(tmp_path, monkeypatch):
    core = serving_core(tmp_path, monkeypatch, SMALL, api_keys={"sk-a": "acme"},
                        extraction=ExtractionConfig(threshold_tokens=5, max_tokens=256))
    body = {"model": "memroute", "user": "ann",
            "messages": [{"role": "user", "content": "My budget is 80 dollars a day."}]}
    assert call_like_ingress(core, body).status == 200
    core.drain()
    deadline = time.monotonic() + 10
    uid = namespace("acme", "ann")
    # the run writes the fact, then takes its turns off the queue, then counts: wait for all
    while core.extraction.stats()["facts_written"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    [fact] = core.facts.active(uid)
    assert (fact.key, fact.value, fact.source) == ("user.budget", "80 dollars a day", "explicit")
    assert core.health()["extraction"]["facts_written"] == 1
    core.close()


def test_health_stats_read_the_queue_at_most_every_few_seconds(stores, monkeypatch):
    """/healthz calls ``stats()`` often; the user count is a fact-database query."""
    from memroute.memory.facts.lane import QUEUE_STATS_S

    store = stores()
    clock = [100.0]
    lane = ExtractionLane(SlowExtractor(), queue=store.queue, threshold_tokens=1000,
                          count_text_tokens=words, clock=lambda: clock[0])
    reads = []
    real = store.queue.stats
    monkeypatch.setattr(store.queue, "stats", lambda: reads.append(1) or real())
    lane.observe([pair("a", 0)])
    assert lane.stats()["users_queued"] == 1
    lane.observe([pair("b", 0)])
    assert lane.stats()["users_queued"] == 1 and len(reads) == 1  # within the interval: cached
    clock[0] += QUEUE_STATS_S
    assert lane.stats()["users_queued"] == 2 and len(reads) == 2
    lane.close()


def test_queueing_records_the_recent_turns_in_the_same_transaction(stores, monkeypatch):
    store = stores()
    lane = lane_on(store, SlowExtractor(), threshold=1000)
    writes = []
    real = store.transaction

    def counted(what, *, write):
        writes.append(what) if write else None
        return real(what, write=write)

    monkeypatch.setattr(store, "transaction", counted)
    lane.queue = store.queue.__class__(store.transaction)
    lane.observe([pair("a", i, f"turn {i}") for i in range(3)], recent_keep=2)
    assert writes == ["queue turns for extraction"]  # one transaction for both
    assert ["turn 1" in m.text for m in store.recent_turns("a", 5)] == [True, False]
    assert ["turn 2" in m.text for m in store.recent_turns("a", 5)] == [False, True]
    assert store.queue.pending_tokens("a") == 3 * 3  # "turn i" + "Noted." in words
    lane.close()
