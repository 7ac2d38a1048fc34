"""Fact extraction (:mod:`memroute.memory.facts.extraction`) with the mock engine on a real
SQLite fact store: the schema and prompt, the strict parser, the retry, the lock, and a
correction over two runs that supersedes the earlier value."""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime, timezone

import pytest

from memroute.config.extraction import (
    DEFAULT_FIELDS,
    ExtractionConfig,
    check_extraction_config,
)
from memroute.errors import ConfigError, InvalidRequest
from memroute.llm.mock_backend import MockBackend
from memroute.memory.facts import ACTIVE, EXPLICIT, INFERRED, SUPERSEDED, FactStore
from memroute.memory.facts.extraction import (
    INVALID_OUTPUT,
    LOCKED,
    NO_TURNS,
    ExtractionError,
    ExtractionField,
    ExtractionSchema,
    Extractor,
    extraction_prompt,
    json_schema,
    needs_extraction,
    parse_extraction,
)
from memroute.types import TurnPair

USER = "acme:alice"
DAY = 86400
T0 = int(datetime(2023, 5, 8, tzinfo=timezone.utc).timestamp())
SCHEMA = ExtractionSchema.from_config()


def turn(i: int, text: str, *, day: int = 0, session: str = "s1", user: str = USER) -> TurnPair:
    return TurnPair(user, session, i, text, "Noted.", T0 + day * DAY)


def fact(key: str, value: str, turn_no: int = 0, *, source: str = EXPLICIT,
         valid_from: str | None = None) -> dict:
    return {"key": key, "value": value, "source": source, "valid_from": valid_from,
            "turn": turn_no}


def output(*facts: dict) -> str:
    return json.dumps({"facts": list(facts)})


def template(text: str) -> str:
    """A mock answer template that generates ``text`` literally (braces escaped)."""
    return text.replace("{", "{{").replace("}", "}}")


def mock(answer: str, *, rules: tuple = (), **kw) -> MockBackend:
    return MockBackend("mock-extractor", answer=template(answer), rules=list(rules), **kw)


@pytest.fixture
def store(tmp_path):
    s = FactStore(f"sqlite:///{tmp_path / 'facts.sqlite3'}")
    yield s
    s.close()


# -- schema, prompt, JSON Schema ---------------------------------------------------------------


def test_default_schema_and_config():
    cfg = check_extraction_config(ExtractionConfig())
    assert (cfg.threshold_tokens, cfg.max_tokens, cfg.retries) == (4000, 1024, 1)
    cats = {f.name: f.category for f in SCHEMA.fields}
    assert cats["user.name"] == cats["user.diet"] == "profile"
    assert cats["user.budget"] == cats["user.location"] == cats["user.partner"] == "temporal"
    assert cats["user.plan"] == "ephemeral"
    assert len(SCHEMA.fields) == len(DEFAULT_FIELDS)


@pytest.mark.parametrize(("fields", "field"), [
    ([{"field": "User Budget", "category": "temporal", "description": ""}],
     "extraction.fields[0].field"),
    ([{"field": "user.a", "category": "profile"}, {"field": "user.b", "category": "forever"}],
     "extraction.fields[1].category"),
    ([{"field": "user.a", "category": "profile"}, {"field": "user.a", "category": "profile"}],
     "extraction.fields[1].field"),
    ([{"field": "user.a", "category": "profile", "kind": "x"}], "extraction.fields[0].kind"),
    ([], "extraction.fields"),
    ("user.a", "extraction.fields"),
])
def test_bad_fields_name_the_field(fields, field):
    with pytest.raises(ConfigError) as err:
        check_extraction_config(ExtractionConfig(fields=fields))
    assert err.value.field == field


@pytest.mark.parametrize(("name", "value", "field"), [
    ("threshold_tokens", 0, "extraction.threshold_tokens"),
    ("max_tokens", "512", "extraction.max_tokens"),
    ("retries", -1, "extraction.retries"),
])
def test_bad_numbers_name_the_field(name, value, field):
    with pytest.raises(ConfigError) as err:
        check_extraction_config(ExtractionConfig(**{name: value}))
    assert err.value.field == field


def test_schema_rejects_bad_field_objects():
    with pytest.raises(ConfigError):
        ExtractionSchema((ExtractionField("user.a", "nope"),))


def test_needs_extraction():
    assert not needs_extraction(4000)
    assert needs_extraction(4001)
    assert needs_extraction(11, threshold=10)


def test_prompt_lists_keys_turns_dates_and_sources():
    turns = [turn(0, "My budget is 50 dollars."), turn(1, "I moved to Lyon.", day=3)]
    system, user = extraction_prompt(SCHEMA, turns)
    assert system.role == "system" and user.role == "user"
    for key in SCHEMA.keys:
        assert f"- {key}" in system.content
    assert '"explicit" when the user said it' in system.content
    assert '"inferred" when you concluded it' in system.content
    assert "YYYY-MM-DD" in system.content
    assert "Turn 0 (8 May 2023, 2023-05-08)\nUser: My budget is 50 dollars." in user.content
    assert "Turn 1 (11 May 2023, 2023-05-11)\nUser: I moved to Lyon." in user.content


def test_prompt_clips_long_assistant_replies():
    t = TurnPair(USER, "s", 0, "hi", "x" * 5000, T0)
    (_, user) = extraction_prompt(SCHEMA, [t])
    assert "x" * 300 + " ..." in user.content and "x" * 301 not in user.content


def test_json_schema_enumerates_keys_and_bounds_turns():
    js = json_schema(SCHEMA, n_turns=3)
    item = js["properties"]["facts"]["items"]
    assert item["properties"]["key"]["enum"] == list(SCHEMA.keys)
    assert item["properties"]["source"]["enum"] == ["explicit", "inferred"]
    assert item["properties"]["turn"] == {"type": "integer", "minimum": 0, "maximum": 2}
    assert set(item["required"]) == {"key", "value", "source", "valid_from", "turn"}
    assert item["additionalProperties"] is False and js["additionalProperties"] is False
    json.dumps(js)  # plain JSON: it travels to the engine


# -- the strict parser --------------------------------------------------------------------------


def test_parse_valid_output():
    turns = [turn(0, "a"), turn(1, "b", day=2)]
    facts = parse_extraction(output(
        fact("user.budget", "50", 0),
        fact("user.location", "Lyon", 1, source=INFERRED, valid_from="2021-03-01"),
        fact("user.name", "  Alice ", 1),
    ), SCHEMA, turns)
    budget, location, name = facts
    assert (budget.key, budget.value, budget.category, budget.source) == (
        "user.budget", "50", "temporal", EXPLICIT)
    assert budget.valid_from == T0 and budget.turn_id == turns[0].id  # default: the turn's time
    assert location.source == INFERRED and location.turn_id == turns[1].id
    assert location.valid_from == datetime(2021, 3, 1, tzinfo=timezone.utc).timestamp()
    assert name.value == "Alice" and name.category == "profile"
    assert parse_extraction('{"facts": []}', SCHEMA, turns) == []


def test_parse_accepts_a_code_fence():
    text = "```json\n" + output(fact("user.pet", "a cat named Tom")) + "\n```"
    assert parse_extraction(text, SCHEMA, [turn(0, "a")])[0].value == "a cat named Tom"


@pytest.mark.parametrize("text", [
    "not json at all",
    '{"facts": [',
    '{"facts": []} trailing',
    "[]",
    '{"facts": {}}',
    '{"facts": [], "extra": 1}',
    output(fact("user.budget", "50"), fact("user.salary", "100")),  # one unknown key
    output(fact("user.budget", "50"), fact("user.pet", "cat", source="confirmed")),
    output(fact("user.budget", "50", source="guessed")),
    output(fact("user.budget", "")),
    output(fact("user.budget", "   ")),
    output(fact("user.budget", "x" * 301)),
    output(fact("user.budget", "5\x000")),
    output(fact("user.budget", "50", 7)),  # no such turn
    output(fact("user.budget", "50", -1)),
    output(fact("user.budget", "50", valid_from="2023-02-30")),
    output(fact("user.budget", "50", valid_from="May 2023")),
    json.dumps({"facts": [{**fact("user.budget", "50"), "turn": True}]}),
    json.dumps({"facts": [{**fact("user.budget", "50"), "value": 50}]}),
    json.dumps({"facts": [{**fact("user.budget", "50"), "confidence": 0.9}]}),
    json.dumps({"facts": [{"key": "user.budget", "value": "50"}]}),
    json.dumps({"facts": ["user.budget=50"]}),
])
def test_parse_refuses_the_whole_output(text):
    with pytest.raises(ExtractionError):
        parse_extraction(text, SCHEMA, [turn(0, "a")])


# -- the extractor -----------------------------------------------------------------------------


def test_extract_writes_facts_with_the_schema(store):
    backend = mock(output(fact("user.budget", "50"), fact("user.plan", "a trip to Rome")))
    turns = [turn(0, "My budget is 50 and I plan a trip to Rome.")]
    result = Extractor(backend, SCHEMA, store).extract(USER, turns)
    assert (result.facts_written, result.attempts, result.skipped_reason) == (2, 1, None)
    opts = backend.last_options
    assert opts is not None and opts.json_schema == json_schema(SCHEMA, 1)
    active = {f.key: f for f in store.active(USER, now=T0 + 60)}
    assert active["user.budget"].value == "50" and active["user.budget"].turn_id == turns[0].id
    assert active["user.plan"].category == "ephemeral"
    assert active["user.plan"].expires_at == T0 + store.ephemeral_ttl_s


def test_invalid_then_valid_is_retried_once(store, caplog):
    valid = output(fact("user.pet", "a dog named Rex"))
    backend = mock("here you go: the user has a dog",
                   rules=({"match": "output was invalid", "answer": template(valid)},))
    result = Extractor(backend, SCHEMA, store).extract(USER, [turn(0, "I have a dog named Rex.")])
    assert (result.facts_written, result.attempts, result.skipped_reason) == (1, 2, None)
    assert store.active(USER)[0].value == "a dog named Rex"


def test_invalid_twice_is_skipped_and_nothing_stored(store, caplog):
    # the second item's unknown key refuses the whole output, the valid first item included
    bad = output(fact("user.budget", "50"), fact("user.salary", "9000"))
    backend = mock(bad)
    with caplog.at_level(logging.WARNING, logger="memroute.memory.facts.extraction"):
        result = Extractor(backend, SCHEMA, store).extract(USER, [turn(0, "budget 50")])
    assert (result.facts_written, result.attempts, result.skipped_reason) == (
        0, 2, INVALID_OUTPUT)
    assert "user.salary" in (result.error or "")
    assert store.active(USER) == [] and store.timeline(USER, "user.budget") == []
    assert any("skipped after 2 invalid" in r.getMessage() for r in caplog.records)


def test_no_retry_when_retries_is_zero(store):
    result = Extractor(mock("nope"), SCHEMA, store, retries=0).extract(USER, [turn(0, "x")])
    assert (result.attempts, result.skipped_reason) == (1, INVALID_OUTPUT)


def test_output_cut_at_max_tokens_is_invalid(store):
    long = output(*[fact("user.budget", f"{i}") for i in range(20)])
    result = Extractor(mock(long), SCHEMA, store, max_tokens=16).extract(USER, [turn(0, "x")])
    assert result.skipped_reason == INVALID_OUTPUT and "max_tokens" in (result.error or "")
    assert store.active(USER) == []


def test_valid_from_from_the_output_and_the_turn(store):
    backend = mock(output(fact("user.employer", "Acme", 1, valid_from="2022-01-15"),
                          fact("user.location", "Oslo", 1)))
    turns = [turn(0, "hello"), turn(1, "I work at Acme since 15 January 2022, in Oslo.", day=5)]
    Extractor(backend, SCHEMA, store).extract(USER, turns)
    active = {f.key: f for f in store.active(USER)}
    jan15 = datetime(2022, 1, 15, tzinfo=timezone.utc).timestamp()
    assert active["user.employer"].valid_from == jan15
    assert active["user.location"].valid_from == T0 + 5 * DAY


def test_lock_held_elsewhere_skips(store):
    backend = mock(output(fact("user.budget", "50")))
    assert store.try_user_lock(USER, owner="other-run")
    try:
        result = Extractor(backend, SCHEMA, store).extract(USER, [turn(0, "budget 50")])
    finally:
        store.release_user_lock(USER, owner="other-run")
    assert (result.facts_written, result.attempts, result.skipped_reason) == (0, 0, LOCKED)
    assert backend.last_options is None  # the model was never called
    assert store.active(USER) == []
    # released: the next run extracts
    assert Extractor(backend, SCHEMA, store).extract(USER, [turn(0, "budget 50")]).facts_written == 1


def test_two_threads_one_user_exactly_one_runs(store):
    backend = mock(output(fact("user.budget", "50")), latency_s=0.5)
    extractor = Extractor(backend, SCHEMA, store)
    barrier = threading.Barrier(2)
    results: list = [None, None]

    def run(i: int) -> None:
        barrier.wait(timeout=10)
        results[i] = extractor.extract(USER, [turn(0, "my budget is 50", session=f"s{i}")])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    reasons = sorted(str(r.skipped_reason) for r in results)
    assert reasons == ["None", LOCKED]
    assert sum(r.facts_written for r in results) == 1
    assert len(store.timeline(USER, "user.budget")) == 1


def test_other_users_are_not_blocked(store):
    backend = mock(output(fact("user.budget", "50")))
    assert store.try_user_lock(USER, owner="other-run")
    bob = "acme:bob"
    result = Extractor(backend, SCHEMA, store).extract(bob, [turn(0, "budget 50", user=bob)])
    assert result.facts_written == 1 and store.active(USER) == []


def test_turns_of_another_user_are_refused(store):
    with pytest.raises(InvalidRequest):
        Extractor(mock("{}"), SCHEMA, store).extract(USER, [turn(0, "x", user="acme:bob")])


def test_no_turns(store):
    assert Extractor(mock("{}"), SCHEMA, store).extract(USER, []).skipped_reason == NO_TURNS


def test_correction_over_two_runs_supersedes(store):
    first = [turn(0, "My budget is 50 dollars for the trip.")]
    later = [turn(0, "Actually my budget is 80 dollars.", day=4, session="s2")]
    backend = mock('{"facts": []}', rules=(
        {"match": "budget is 50", "answer": template(output(fact("user.budget", "50")))},
        {"match": "budget is 80", "answer": template(output(fact("user.budget", "80")))},
    ))
    extractor = Extractor(backend, SCHEMA, store)
    assert extractor.extract(USER, first).facts_written == 1
    assert extractor.extract(USER, later).facts_written == 1
    active = [f for f in store.active(USER) if f.key == "user.budget"]
    assert [f.value for f in active] == ["80"]
    assert active[0].valid_from == T0 + 4 * DAY and active[0].turn_id == later[0].id
    old, new = store.timeline(USER, "user.budget")
    assert (old.value, old.status, new.value, new.status) == ("50", SUPERSEDED, "80", ACTIVE)
    assert old.valid_until == T0 + 4 * DAY and old.superseded_by == new.id
    assert store.as_of(USER, "user.budget", valid_at=T0 + DAY).value == "50"


def test_correction_in_one_run_keeps_conversation_order(store):
    # the model lists the later value first: the store still sees the conversation's order
    turns = [turn(0, "My budget is 50."), turn(1, "Actually my budget is 80.", day=1)]
    backend = mock(output(fact("user.budget", "80", 1), fact("user.budget", "50", 0)))
    assert Extractor(backend, SCHEMA, store).extract(USER, turns).facts_written == 2
    old, new = store.timeline(USER, "user.budget")
    assert (old.value, old.status, new.value, new.status) == ("50", SUPERSEDED, "80", ACTIVE)


def test_from_config(store):
    cfg = ExtractionConfig(retries=0, max_tokens=64,
                           fields=[{"field": "user.color", "category": "profile",
                                    "description": "favourite colour"}])
    ex = Extractor.from_config(mock(output(fact("user.color", "green"))), store, cfg)
    assert ex.schema.keys == ("user.color",) and (ex.retries, ex.max_tokens) == (0, 64)
    assert ex.extract(USER, [turn(0, "I love green")]).facts_written == 1


# -- atomic context units in the extraction output ---------------------------------------------

from memroute.memory.facts.extraction_parser import parse_extraction_output  # noqa: E402
from memroute.memory.facts.extraction_prompt import system_prompt  # noqa: E402
from memroute.memory.facts.extraction_schema import (  # noqa: E402 - the units' part of the file
    MAX_UNIT_CHARS,
    MAX_UNITS,
    ExtractedUnit,
)
from memroute.memory.units import UnitWrite  # noqa: E402

DOG = "On 8 May 2023 Alice adopted a golden retriever named Biscuit."


def with_units(facts: list[dict], units: list) -> str:
    return json.dumps({"facts": facts, "units": units})


def test_units_are_parsed_with_their_source_turn():
    turns = [turn(0, "a"), turn(1, "b", day=2, session="s2")]
    parsed = parse_extraction_output(with_units(
        [fact("user.pet", "a dog named Biscuit", 1)],
        [{"text": "  " + DOG + "\n", "turn": 0},
         {"text": "On 10 May 2023 Alice  moved to Lyon.", "turn": 1}]), SCHEMA, turns)
    assert [f.key for f in parsed.facts] == ["user.pet"]
    first, second = parsed.units
    assert first == ExtractedUnit(DOG, USER, "s1", 0, T0)  # whitespace normalized
    assert second.text == "On 10 May 2023 Alice moved to Lyon."
    assert (second.session_id, second.session_time, second.turn_id) == ("s2", T0 + 2 * DAY, turns[1].id)


def test_an_output_without_units_still_parses_as_no_units():
    parsed = parse_extraction_output(output(fact("user.budget", "50")), SCHEMA, [turn(0, "a")])
    assert [f.value for f in parsed.facts] == ["50"] and parsed.units == []
    assert parse_extraction_output(with_units([], []), SCHEMA, [turn(0, "a")]).units == []


@pytest.mark.parametrize("units", [
    {"text": DOG, "turn": 0},  # not a list
    [DOG],
    [{"text": DOG}],
    [{"text": DOG, "turn": 0, "who": "Alice"}],
    [{"text": DOG, "turn": 3}],  # no such turn
    [{"text": DOG, "turn": True}],
    [{"text": 5, "turn": 0}],
    [{"text": "Yes.", "turn": 0}],  # too short to stand alone
    [{"text": "x" * (MAX_UNIT_CHARS + 1), "turn": 0}],
    [{"text": DOG + "\x00", "turn": 0}],
    [{"text": DOG, "turn": 0}] * (MAX_UNITS + 1),
    [{"text": DOG, "turn": 0}, {"text": "", "turn": 0}],  # one bad unit refuses all
])
def test_one_bad_unit_refuses_the_whole_output(units):
    with pytest.raises(ExtractionError):
        parse_extraction_output(with_units([fact("user.budget", "50")], units), SCHEMA,
                                [turn(0, "a")])
    with pytest.raises(ExtractionError):  # the facts-only reader refuses it too
        parse_extraction(with_units([fact("user.budget", "50")], units), SCHEMA, [turn(0, "a")])


def test_json_schema_and_prompt_ask_for_units():
    js = json_schema(SCHEMA, n_turns=2)
    unit = js["properties"]["units"]["items"]
    assert js["required"] == ["facts", "units"] and js["properties"]["units"]["maxItems"] == 4
    assert unit["properties"]["turn"]["maximum"] == 1 and unit["additionalProperties"] is False
    assert unit["properties"]["text"]["maxLength"] == MAX_UNIT_CHARS
    prompt = system_prompt(SCHEMA)
    assert '"units"' in prompt and "No pronouns" in prompt and "No relative dates" in prompt
    assert '{"facts": [], "units": []}' in prompt


class Sink:
    def __init__(self, fail: bool = False) -> None:
        self.got, self.fail = [], fail

    def add(self, user_id, units):
        if self.fail:
            raise RuntimeError("milvus is down")
        self.got.append((user_id, list(units)))
        return UnitWrite(written=len(units) - 1, suppressed=1)


def test_the_extractor_hands_units_to_its_sink_after_the_facts(store):
    answer = with_units([fact("user.pet", "a dog named Biscuit")],
                        [{"text": DOG, "turn": 0}, {"text": DOG.replace("named", "called"), "turn": 0}])
    sink = Sink()
    result = Extractor(mock(answer), SCHEMA, store, unit_sink=sink).extract(USER, [turn(0, "I adopted a dog named Biscuit.")])
    assert (result.facts_written, result.units_written, result.units_suppressed) == (1, 1, 1)
    assert [u.text for u in result.units] == [DOG, DOG.replace("named", "called")]
    assert sink.got[0][0] == USER and len(sink.got[0][1]) == 2
    no_sink = Extractor(mock(answer), SCHEMA, store).extract(USER, [turn(0, "I adopted a dog named Biscuit.")])
    assert len(no_sink.units) == 2 and no_sink.units_written == 0


def test_a_failing_sink_propagates_after_the_facts_are_stored(store):
    answer = with_units([fact("user.pet", "a dog named Biscuit")], [{"text": DOG, "turn": 0}])
    with pytest.raises(RuntimeError):
        Extractor(mock(answer), SCHEMA, store, unit_sink=Sink(fail=True)).extract(USER, [turn(0, "I adopted a dog named Biscuit.")])
    assert [f.value for f in store.active(USER, now=T0 + 60)] == ["a dog named Biscuit"]


def test_a_facts_only_schema_asks_for_and_allows_no_units():
    facts_only = ExtractionSchema.from_config(units=False)
    js = json_schema(facts_only, 3)
    assert set(js["properties"]) == {"facts"} and js["required"] == ["facts"]
    prompt = extraction_prompt(facts_only, [turn(0, "I live in Lyon.")])
    assert "units" not in prompt[0].content and "units" not in prompt[1].content
    assert set(json_schema(SCHEMA, 3)["required"]) == {"facts", "units"}


def test_the_constrained_output_is_bounded_by_the_turns_read():
    from memroute.memory.facts.extraction_schema import FACTS_PER_TURN, MAX_FACTS, UNITS_PER_TURN

    assert json_schema(SCHEMA, 3)["properties"]["facts"]["maxItems"] == 3 * FACTS_PER_TURN
    assert json_schema(SCHEMA)["properties"]["facts"]["maxItems"] == MAX_FACTS
    assert json_schema(SCHEMA, 3)["properties"]["units"]["maxItems"] == 3 * UNITS_PER_TURN
    assert json_schema(SCHEMA)["properties"]["units"]["maxItems"] == MAX_UNITS
