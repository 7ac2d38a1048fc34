"""Grounding (:mod:`memroute.memory.facts.grounding`): a fact stays only if its turn states the
value, under one key; the extractor stores what passes and counts what it dropped."""

from __future__ import annotations

import json

import pytest

from memroute.config.extraction import ExtractionConfig, check_extraction_config
from memroute.errors import ConfigError
from memroute.llm.mock_backend import MockBackend
from memroute.memory.facts import FactStore
from memroute.memory.facts.extraction import ExtractionSchema, Extractor
from memroute.memory.facts.grounding import ground, grounded, normalized
from memroute.memory.facts.types import EXPLICIT, INFERRED, FactInput
from memroute.types import TurnPair

U = "acme:alice"
T = TurnPair(U, "s", 0, "I moved to Porto; standup is at 10:15 now and my budget is $80.",
             "Porto is lovely in May.", 1_700_000_000)


def fact(key, value, source=EXPLICIT, turn=T):
    return FactInput(key, value, source=source, turn_id=turn.id)


@pytest.mark.parametrize("value, ok", [
    ("Porto", True), ("porto", True), ("10:15", True), ("80", True), ("$80", True),
    ("Lyon", False), ("8", False), ("Port", False), ("", False), ("May", False),
])
def test_an_explicit_value_must_be_in_the_users_words_at_word_boundaries(value, ok):
    assert grounded(fact("user.x", value), T) is ok


def test_an_inferred_value_may_come_from_the_assistants_words():
    assert grounded(fact("user.x", "May", source=INFERRED), T)
    assert not grounded(fact("user.x", "June", source=INFERRED), T)
    assert normalized("Hello, World!") == " hello world "


def test_a_value_filed_under_several_keys_from_one_turn_is_dropped_everywhere():
    other = TurnPair(U, "s", 1, "My dog is called Porto.", "", 1_700_000_100)
    facts = [fact("user.city", "Porto"), fact("user.dog_name", "Porto"),
             fact("user.city", "Porto"),  # the same key twice is not ambiguous
             fact("user.dog_name", "Porto", turn=other), fact("user.budget", "80"),
             FactInput("user.team", "Search", turn_id=12345)]  # a turn not in the call
    kept, dropped = ground(facts, {T.id: T, other.id: other})
    assert [(f.key, f.value, f.turn_id) for f in kept] == [
        ("user.dog_name", "Porto", other.id), ("user.budget", "80", T.id)]
    assert dropped == 4


def test_the_extractor_stores_the_grounded_facts_and_counts_the_rest(tmp_path):
    out = {"facts": [
        {"key": "user.location", "value": "Porto", "source": "explicit", "valid_from": None,
         "turn": 0},
        {"key": "user.budget", "value": "eighty", "source": "explicit", "valid_from": None,
         "turn": 0}]}
    backend = MockBackend("m", answer=json.dumps(out).replace("{", "{{").replace("}", "}}"))
    with FactStore(f"sqlite:///{tmp_path / 'f.sqlite3'}") as store:
        schema = ExtractionSchema.from_config()
        result = Extractor(backend, schema, store).extract(U, [T])
        assert (result.facts_written, result.ungrounded) == (1, 1)
        assert [f.value for f in store.active(U)] == ["Porto"]
        loose = Extractor(backend, schema, store, grounding=False).extract(U, [T])
        assert (loose.facts_written, loose.ungrounded) == (2, 0)
    with pytest.raises(ConfigError) as err:
        check_extraction_config(ExtractionConfig(grounding="yes"))
    assert err.value.field == "extraction.grounding"


def test_a_value_stated_by_a_neighbouring_turn_moves_to_that_turn():
    """The 0.5B model often cites the turn next to the one that says it."""
    t0 = TurnPair(U, "s", 0, "I live in Lyon, close to the river.", "Nice.", 1_700_000_000)
    t1 = TurnPair(U, "s", 1, "Our daily standup is at 9:30.", "Noted.", 1_700_000_000)
    t2 = TurnPair(U, "s", 2, "We moved to Lyon's old town.", "Lovely.", 1_700_000_000)
    calls = {t.id: t for t in (t0, t1, t2)}
    kept, dropped = ground([FactInput("user.city", "Lyon", turn_id=t1.id),
                            FactInput("user.standup_time", "9:30", turn_id=t2.id),
                            FactInput("user.team", "Payments", turn_id=t1.id)], calls)
    # Lyon: t0 and t2 both say it, equally near t1: the later one; 9:30: only t1 says it
    assert [(f.key, f.turn_id) for f in kept] == [("user.city", t2.id),
                                                  ("user.standup_time", t1.id)]
    assert dropped == 1  # no turn of the call says "Payments"
