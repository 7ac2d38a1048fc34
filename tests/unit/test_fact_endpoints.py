"""The fact layer behind the API (what /v1/memory/facts and /v1/memory/session-start call):
stating a fact supersedes the key's old value (kept in its timeline), retraction keeps the row,
session start injects only current values (asserted apart from inferred), the namespace is the
caller's tenant, and erasing a user removes its facts."""

from __future__ import annotations

import json

import pytest

from memroute.config.schema import ModelConfig
from memroute.errors import InvalidRequest, NotFound
from memroute.namespace import namespace
from memroute.serving.fact_requests import fact_id, fact_input

from .fakes import call_like_ingress, serving_core

SMALL = ModelConfig(name="mock-small", engine="mock", params_b=0.5)
ALICE, BOB = namespace("acme", "alice"), namespace("globex", "alice")


@pytest.fixture
def core(tmp_path, monkeypatch):
    c = serving_core(tmp_path, monkeypatch, SMALL, api_keys={"sk-a": "acme"})
    yield c
    c.close()


def test_a_new_value_supersedes_and_the_timeline_keeps_both(core):
    first = core.assert_fact(ALICE, {"key": "user.budget", "value": "50", "valid_from": 1_700_000_000})
    second = core.assert_fact(ALICE, {"key": "user.budget", "value": "80", "valid_from": 1_700_100_000})
    assert [f["value"] for f in core.list_facts(ALICE)["data"]] == ["80"]
    old, new = core.list_facts(ALICE, "user.budget")["data"]
    assert (old["id"], old["status"], old["valid_until"]) == (first["id"], "superseded", 1_700_100_000)
    assert old["superseded_by"] == new["id"] == second["id"] and new["status"] == "active"


def test_session_start_injects_current_values_asserted_apart_from_inferred(core):
    core.assert_fact(ALICE, {"key": "user.name", "value": "Alice", "category": "profile"})
    core.assert_fact(ALICE, {"key": "user.budget", "value": "50"})
    core.assert_fact(ALICE, {"key": "user.budget", "value": "80"})
    core.assert_fact(ALICE, {"key": "user.diet", "value": "vegetarian", "source": "inferred"})
    s = json.loads(core.session_start(ALICE))
    assert [f["key"] for f in s["profile"]] == ["user.name"]
    assert {f["key"]: f["value"] for f in s["facts"]} == {"user.budget": "80", "user.diet": "vegetarian"}
    told, maybe = s["context"].split("\n\n")[:2]
    assert "user.budget: 80" in told and "50" not in s["context"] and "user.name: Alice" in told
    assert maybe.startswith("Possibly true") and "vegetarian" in maybe
    assert s["tools"][0]["function"]["name"] == "memory_search"


def test_retraction_keeps_the_row_and_another_users_fact_is_not_found(core):
    f = core.assert_fact(ALICE, {"key": "user.pet", "value": "a cat named Tom"})
    with pytest.raises(NotFound):
        core.retract_fact(BOB, int(f["id"]))  # another tenant's user of the same name
    r = core.retract_fact(ALICE, int(f["id"]))
    assert r["status"] == "retracted" and core.list_facts(ALICE)["data"] == []
    assert [x["status"] for x in core.list_facts(ALICE, "user.pet")["data"]] == ["retracted"]


def test_erasing_a_user_removes_its_facts_and_only_its(core):
    core.assert_fact(ALICE, {"key": "user.budget", "value": "50"})
    core.assert_fact(ALICE, {"key": "user.budget", "value": "80"})
    core.assert_fact(BOB, {"key": "user.budget", "value": "9"})
    report = core.erase_user(ALICE, actor="test")
    assert report.fact_rows == 2
    assert core.list_facts(ALICE, "user.budget")["data"] == []
    assert [f["value"] for f in core.list_facts(BOB)["data"]] == ["9"]


@pytest.mark.parametrize("body, field", [
    ([], "body"), ({"value": "x"}, "key"), ({"key": "user.a"}, "value"),
    ({"key": "user.a", "value": 5}, "value"), ({"key": "user.a", "value": "x", "colour": 1}, "colour"),
    ({"key": "user.a", "value": "x", "valid_from": "May"}, "valid_from"),
])
def test_a_bad_fact_body_is_a_400_naming_the_field(body, field):
    with pytest.raises(InvalidRequest) as e:
        fact_input(body)
    assert e.value.field == field


def test_bad_values_the_store_checks_name_their_field_too(core):
    for body, field in [({"key": "User Budget", "value": "x"}, "key"),
                        ({"key": "user.a", "value": "x", "category": "forever"}, "category"),
                        ({"key": "user.a", "value": "x", "source": "rumour"}, "source")]:
        with pytest.raises(InvalidRequest) as e:
            core.assert_fact(ALICE, body)
        assert e.value.field == field
    with pytest.raises(InvalidRequest) as e:
        fact_id("12x")
    assert e.value.field == "fact_id"


def test_appended_turns_are_journaled_then_stored_once_and_a_retry_replaces(core):
    body = {"turns": [{"user": "My budget is 80.", "assistant": "Noted.", "time": 1_700_000_000},
                      {"user": "I live in Lyon.", "assistant": "Lovely."}]}
    first = core.append_turns(ALICE, body)
    assert first["journaled"] == 2 and len(first["ids"]) == 2
    again = core.append_turns(ALICE, body)  # a client's retry: the same ids
    assert again["ids"][0] == first["ids"][0]
    core.drain()
    stored = core.store.list_user(ALICE)
    assert sorted(p.user_text for p in stored) == ["I live in Lyon.", "My budget is 80."]


@pytest.mark.parametrize("body, field", [
    ({}, "turns"), ({"turns": []}, "turns"), ({"turns": ["hi"]}, "turns[0]"),
    ({"turns": [{"user": "a"}]}, "turns[0].assistant"),
    ({"turns": [{"user": "a", "assistant": "b", "mood": 1}]}, "turns[0].mood"),
    ({"turns": [{"user": "a", "assistant": "b", "time": "now"}]}, "turns[0].time"),
    ({"turns": [{"user": "a\x00", "assistant": "b"}]}, "turns[0].user"),
])
def test_a_bad_append_is_a_400_naming_the_field_and_journals_nothing(core, body, field):
    with pytest.raises(InvalidRequest) as e:
        core.append_turns(ALICE, body)
    assert e.value.field == field
    assert core.journal.stats().pending == 0


def test_session_start_shows_a_just_appended_turn_before_it_is_stored(core):
    core.flusher.stop(drain=False)  # nothing reaches the store: the journal alone has it
    core.append_turns(ALICE, {"turns": [{"user": "I moved to Lyon.", "assistant": "Noted."}]})
    assert [t["text"].split("Q: ")[1] for t in json.loads(core.session_start(ALICE))["recent_turns"]] == \
        ["I moved to Lyon. / A: Noted."]


def _system_prompt(core) -> str:
    [messages] = core.test_backends[0].last_batch
    return messages[0].content


@pytest.mark.parametrize("inject", [True, False])
def test_a_routed_chat_gets_the_current_facts_unless_turned_off(tmp_path, monkeypatch, inject):
    from memroute.config.facts import FactsConfig

    core = serving_core(tmp_path, monkeypatch, SMALL, api_keys={"sk-a": "acme"},
                        facts=FactsConfig(url=f"sqlite:///{tmp_path / 'f.sqlite3'}", inject=inject))
    try:
        core.assert_fact(ALICE, {"key": "user.budget", "value": "50"})
        core.assert_fact(ALICE, {"key": "user.budget", "value": "80"})
        body = {"model": "memroute", "user": "alice",
                "messages": [{"role": "user", "content": "What is my budget?"}]}
        reply = call_like_ingress(core, body)
        assert reply.status == 200
        injected = reply.body["memroute"]["tokens"]["injected"]
        system = _system_prompt(core)
        if inject:
            assert "user.budget: 80" in system and "50" not in system and injected > 0
        else:
            assert "user.budget" not in system and injected == 0
    finally:
        core.close()


def test_a_fact_database_that_fails_degrades_health_and_never_holds_up_stored_turns(core):
    core.facts.close()  # every fact-store call now raises FactStoreError
    health = core.health()
    assert health["status"] == "degraded"
    assert any(p.startswith("extraction cannot report") for p in health["problems"])
    core.append_turns(ALICE, {"turns": [{"user": "I moved to Lyon.", "assistant": "Noted."}]})
    assert core.drain(10)  # stored in the memory store all the same
    assert core.journal.stats().pending == 0 and core.health()["fact_store_misses"] == 1
