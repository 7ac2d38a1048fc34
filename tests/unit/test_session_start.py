"""Session start (memroute/memory/facts/session.py) on a SQLite fact store: the rendered facts
reused while the store's snapshot is unchanged, the recent turns merged with what the journal
still holds, and the bytes the HTTP layer sends equal to the JSON."""

from __future__ import annotations

import json

import pytest

from memroute.memory.facts import INFERRED, PROFILE, FactInput, FactStore
from memroute.memory.facts.session import RenderCache, session_start
from memroute.types import TurnPair, memory_of

ALICE = "acme:alice"


@pytest.fixture
def store(tmp_path):
    s = FactStore(f"sqlite:///{tmp_path / 'facts.sqlite3'}")
    yield s
    s.close()


def turn(i: int, t: int) -> TurnPair:
    return TurnPair(ALICE, "s1", i, f"q{i}", f"a{i}", t, created_at=float(t))


def test_rendered_facts_are_reused_until_a_fact_changes(store):
    cache = RenderCache()
    store.assert_fact(ALICE, FactInput("user.name", "Ana", category=PROFILE), now=10.0)
    store.assert_fact(ALICE, FactInput("user.budget", "50"), now=10.0)
    one = session_start(store, ALICE, cache=cache, now=20.0)
    two = session_start(store, ALICE, cache=cache, now=21.0)
    assert two.rendered is one.rendered
    store.assert_fact(ALICE, FactInput("user.budget", "80"), now=30.0)
    three = session_start(store, ALICE, cache=cache, now=40.0)
    assert three.rendered is not one.rendered
    assert [f.value for f in three.facts] == ["80"] and [f.value for f in three.profile] == ["Ana"]
    assert "user.budget: 80" in three.context and "50" not in three.context


def test_recent_turns_merge_the_store_and_the_journal_newest_last(store):
    store.record_turns([turn(i, 100 + i) for i in range(4)], keep=5)
    pending = [memory_of(turn(3, 103)), memory_of(turn(9, 200))]  # a duplicate and a new one
    s = session_start(store, ALICE, recent=3, pending=pending)
    assert [m.turn_index for m in s.recent_turns] == [2, 3, 9]
    assert s.context.startswith("Recent conversation:") and s.context.endswith("A: a9")
    assert session_start(store, ALICE, recent=0, pending=pending).recent_turns == []


def test_the_http_bytes_are_the_json(store):
    store.assert_fact(ALICE, FactInput("user.city", "Zürich \"old town\""), now=10.0)
    store.assert_fact(ALICE, FactInput("user.pet", "a cat", source=INFERRED), now=10.0)
    store.record_turns([turn(0, 100)], keep=5)
    s = session_start(store, ALICE, recent=5, cache=RenderCache())
    assert json.loads(s.to_json_bytes()) == s.to_json()
    assert "Zürich".encode() in s.to_json_bytes()  # UTF-8, not \\u escapes
    body = s.to_json()
    assert body["object"] == "memory.session_start" and body["tools"][0]["function"]["name"] == (
        "memory_search")
    assert body["context"].index("told you") < body["context"].index("Possibly true")


def test_an_empty_user(store):
    s = session_start(store, ALICE, recent=5, cache=RenderCache())
    assert s.to_json()["facts"] == [] and s.context == ""
    assert json.loads(s.to_json_bytes()) == s.to_json()
