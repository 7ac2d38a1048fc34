"""The background extraction lane: turns are counted as the flusher stores them, a user past the
threshold gets one extraction run off the request path (a second trigger meanwhile runs none),
a run that finds the user locked elsewhere keeps its turns, erasure drops a user's buffer; and,
through the serving core, a stated fact ends up in the fact store."""

from __future__ import annotations

import threading
import time

from memroute.config.extraction import ExtractionConfig
from memroute.config.schema import ModelConfig
from memroute.memory.facts.extraction import ExtractionResult
from memroute.namespace import namespace
from memroute.serving.extraction_lane import ExtractionLane
from memroute.types import TurnPair

from .fakes import call_like_ingress, serving_core


def pair(user, i, text="My budget is 80 dollars a day."):
    return TurnPair(user, "s", i, text, "Noted.", 1_700_000_000 + i)


class SlowExtractor:
    def __init__(self, reason=None, delay=0.2):
        self.calls, self.reason, self.delay = [], reason, delay
        self.started = threading.Event()

    def extract(self, user_id, turns):
        self.started.set()
        self.calls.append((user_id, [t.turn_index for t in turns]))
        time.sleep(self.delay)
        return ExtractionResult(facts_written=len(turns), attempts=1, skipped_reason=self.reason)


def words(text):
    return len(text.split())


def test_past_the_threshold_one_run_takes_every_buffered_turn_and_a_second_trigger_waits():
    ex = SlowExtractor()
    lane = ExtractionLane(ex, threshold_tokens=10, count_text_tokens=words)
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


def test_a_retried_store_write_is_not_counted_twice_and_locked_runs_keep_their_turns():
    ex = SlowExtractor(reason="locked", delay=0)
    lane = ExtractionLane(ex, threshold_tokens=10, count_text_tokens=words)
    lane.observe([pair("u", 0)])
    lane.observe([pair("u", 0)])  # the same pair again: 8 tokens, not 16
    assert lane.pending_tokens("u") == 8
    [run] = lane.observe([pair("u", 1)])
    run.result(5)
    assert lane.pending_tokens("u") == 16  # put back for the next run
    assert lane.forget_user("u") == 2 and lane.pending_tokens("u") == 0
    lane.close()


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
    while not core.facts.active(uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    [fact] = core.facts.active(uid)
    assert (fact.key, fact.value, fact.source) == ("user.budget", "80 dollars a day", "explicit")
    assert core.health()["extraction"]["facts_written"] == 1
    core.close()
