"""Open-vocabulary fact keys (``extraction.keys=open``, memroute/memory/facts/keys.py): the
extractor proposes keys, bad ones are refused and counted, and each user's keys are matched by
embedding so two pets stay two keys while two spellings of one key merge. The replay's rows and
report say which tier extracted."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import numpy as np
import polars as pl
import pytest

from memroute.config.extraction import ExtractionConfig, check_extraction_config
from memroute.errors import ConfigError
from memroute.memory.facts import ACTIVE, FactInput, FactStore
from memroute.memory.facts.extraction import INVALID_OUTPUT, ExtractionSchema, Extractor
from memroute.memory.facts.extraction_parser import parse_extraction_output
from memroute.memory.facts.extraction_schema import json_schema
from memroute.memory.facts.key_registry import known_keys
from memroute.memory.facts.keys import (
    KeyCanonicalizer,
    KeyRejected,
    KnownKey,
    key_text,
    normalize_key,
)
from memroute.types import ModelReply, TurnPair

USER = "acme:alice"
T0 = int(datetime(2023, 5, 8, tzinfo=timezone.utc).timestamp())
THRESHOLD = 0.8
STOP = {"the", "of", "s", "user", "a", "what", "is", "called"}


class WordEncoder:
    """Bag of content words (no stop words; one dimension per word, no collisions),
    L2-normalised: texts that share their content words are near, a different animal is a
    different direction."""

    name, dim = "words", 512

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.vocab: dict[str, int] = {}

    def encode(self, texts):
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"[a-z0-9]+", t.lower()):
                if w not in STOP:
                    out[i, self.vocab.setdefault(w, len(self.vocab))] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


class Scripted:
    """The extraction model: one scripted JSON output per call, in order."""

    model_id = "scripted-extractor"

    def __init__(self, *outputs: dict) -> None:
        self.outputs = [json.dumps(o) for o in outputs]
        self.options = []

    def count_text_tokens(self, text: str) -> int:
        return len(text.split())

    def generate(self, messages, *, max_tokens=32, temperature=0.0, options=None, **kw):
        self.options.append(options)
        text = self.outputs.pop(0)
        return ModelReply(text, self.model_id, [-0.1], prompt_tokens=10, completion_tokens=1)

    def close(self) -> None:
        pass


def turn(i: int, text: str, day: int = 0) -> TurnPair:
    return TurnPair(USER, "s1", i, text, "Noted.", T0 + day * 86400)


def item(key: str, value: str, description: str, turn_no: int = 0) -> dict:
    return {"description": description, "key": key, "value": value, "source": "explicit",
            "valid_from": None, "turn": turn_no}


def facts(*items: dict) -> dict:
    return {"facts": list(items)}


@pytest.fixture
def store(tmp_path):
    s = FactStore(f"sqlite:///{tmp_path / 'facts.sqlite3'}")
    yield s
    s.close()


def extractor(backend, store, *, encoder=None, **cfg):
    config = ExtractionConfig(key_match_threshold=THRESHOLD, **cfg)
    return Extractor.from_config(backend, store, config, encoder=encoder, units=False)


# -- config and key shape ------------------------------------------------------------------------


def test_open_keys_are_the_default_and_bad_settings_name_their_field():
    cfg = check_extraction_config(ExtractionConfig())
    assert cfg.keys == "open" and 0 < cfg.key_match_threshold <= 1
    for name, value in (("keys", "free"), ("key_match_threshold", 0.0),
                        ("key_match_threshold", 1.5), ("key_match_threshold", True),
                        ("key_match_threshold", "0.8")):
        with pytest.raises(ConfigError) as err:
            check_extraction_config(ExtractionConfig(**{name: value}))
        assert err.value.field == f"extraction.{name}"


@pytest.mark.parametrize(("raw", "key"), [
    ("pet.rabbit.name", "pet.rabbit.name"),
    ("  Pet Rabbit-Name ", "pet_rabbit_name"),
    ("pet_._rabbit", "pet.rabbit"),
    ("event/caterer", "event_caterer"),
    ("a__b", "a_b"),
])
def test_keys_are_normalised(raw, key):
    assert normalize_key(raw) == key


@pytest.mark.parametrize(("raw", "why"), [
    ("", "empty"),
    ("  _ ", "empty"),
    ("rabbit's name!", "outside a-z 0-9"),
    ("haustier.kätzchen", "outside a-z 0-9"),
    ("pet..name", "empty segment"),
    (".pet", "empty segment"),
    ("a.b.c.d.e", "5 segments"),
    ("x" * 65, "65 characters"),
    (7, "must be a string"),
])
def test_bad_keys_are_refused_with_the_reason(raw, why):
    with pytest.raises(KeyRejected, match=re.escape(why)):
        normalize_key(raw)


def test_the_open_output_schema_takes_a_described_key_the_fixed_one_enumerates():
    open_schema = ExtractionSchema.from_config(open_keys=True, units=False)
    item_schema = json_schema(open_schema, 2)["properties"]["facts"]["items"]
    assert list(item_schema["properties"])[:2] == ["description", "key"]
    assert "enum" not in item_schema["properties"]["key"]
    assert re.fullmatch(item_schema["properties"]["key"]["pattern"], "pet.rabbit.name")
    assert not re.fullmatch(item_schema["properties"]["key"]["pattern"], "a.b.c.d.e")
    assert item_schema["required"][0] == "description"
    fixed = json_schema(ExtractionSchema.from_config(units=False), 2)["properties"]["facts"]
    assert "user.name" in fixed["items"]["properties"]["key"]["enum"]
    assert "description" not in fixed["items"]["properties"]


def test_a_bad_key_drops_its_fact_only_and_a_fixed_schema_still_refuses_it():
    schema = ExtractionSchema.from_config(open_keys=True, units=False)
    text = json.dumps(facts(item("pet..name", "Wombat", "a pet"),
                            item("pet.rabbit.name", "Wombat", "the user's rabbit"),
                            item("Rabbit's Name", "Wombat", "the user's rabbit")))
    parsed = parse_extraction_output(text, schema, [turn(0, "My rabbit is Wombat.")])
    assert [f.key for f in parsed.facts] == ["pet.rabbit.name"]
    assert parsed.facts[0].category == "temporal" and parsed.descriptions == ("the user's rabbit",)
    assert len(parsed.rejected) == 2
    assert parsed.rejected[0].startswith("facts[0]:") and "empty segment" in parsed.rejected[0]
    assert parsed.rejected[1].startswith("facts[2]:") and "outside a-z" in parsed.rejected[1]
    with pytest.raises(Exception, match="not a field of the schema"):
        fixed = json.dumps(facts({k: v for k, v in item("pet.rabbit.name", "W", "").items()
                                  if k != "description"}))
        parse_extraction_output(fixed, ExtractionSchema.from_config(units=False),
                                [turn(0, "My rabbit is W.")])


# -- the canonicaliser ---------------------------------------------------------------------------


def test_two_spellings_merge_two_animals_do_not():
    canon = KeyCanonicalizer(WordEncoder(), THRESHOLD)
    known = [KnownKey("user.name", "profile", "the name the user goes by"),
             KnownKey("pet.rabbit.name", "temporal", "the name of the user's pet rabbit")]
    out = canon.resolve([("rabbit_name", "the name of the user's rabbit"),
                         ("pet.parrot.name", "the name of the user's pet parrot"),
                         ("parrot_name", "the name of the user's parrot"),
                         ("user.name", "")], known)
    assert [r.key for r in out] == ["pet.rabbit.name", "pet.parrot.name", "pet.parrot.name",
                                    "user.name"]
    assert [r.merged for r in out] == [True, False, True, False]
    assert out[0].similarity >= THRESHOLD and out[1].known is None
    # the measured pair the fixed schema merged is far apart here
    enc = WordEncoder()
    a, b = enc.encode([key_text("pet.rabbit.name", "the name of the user's pet rabbit"),
                       key_text("user.name", "the name the user goes by")])
    assert float(a @ b) < THRESHOLD


def test_without_an_encoder_only_exact_spellings_merge():
    out = KeyCanonicalizer(None, THRESHOLD).resolve(
        [("rabbit_name", "x"), ("pet.rabbit.name", "y")],
        [KnownKey("pet.rabbit.name", "temporal")])
    assert [(r.key, r.known is not None) for r in out] == [("rabbit_name", False),
                                                         ("pet.rabbit.name", True)]


def test_key_vectors_are_cached():
    enc = WordEncoder()
    canon = KeyCanonicalizer(enc, THRESHOLD)
    known = [KnownKey("pet.rabbit.name", "temporal", "the name of the user's pet rabbit")]
    canon.resolve([("rabbit_name", "the rabbit's name")], known)
    canon.resolve([("dog_name", "the dog's name")], known)
    assert enc.calls[1] == ["dog name: the dog's name"]  # the user's key was not re-embedded


def test_a_bad_threshold_names_the_field():
    with pytest.raises(ConfigError) as err:
        KeyCanonicalizer(None, 0)
    assert err.value.field == "extraction.key_match_threshold"


# -- the extractor, end to end on a real fact store ---------------------------------------------


def test_two_pets_stay_two_active_keys_and_neither_is_the_users_name(store):
    store.assert_fact(USER, FactInput("user.name", "Alice", "profile"), now=T0)
    backend = Scripted(
        facts(item("pet.rabbit.name", "Wombat", "the name of the user's pet rabbit")),
        facts(item("pet.parrot.name", "Dumpling", "the name of the user's pet parrot")),
    )
    ex = extractor(backend, store, encoder=WordEncoder())
    first = ex.extract(USER, [turn(0, "My rabbit is called Wombat.")])
    second = ex.extract(USER, [turn(1, "And my parrot is called Dumpling.", day=1)])
    assert (first.facts_written, first.keys_new, first.keys_merged) == (1, 1, 0)
    assert (second.facts_written, second.keys_new, second.keys_merged) == (1, 1, 0)
    active = {f.key: f for f in store.active(USER)}
    assert {k: f.value for k, f in active.items()} == {
        "pet.parrot.name": "Dumpling", "pet.rabbit.name": "Wombat", "user.name": "Alice"}
    assert all(f.status == ACTIVE and f.superseded_by is None for f in active.values())
    assert [f.value for f in store.timeline(USER, "user.name")] == ["Alice"]
    assert [f.value for f in store.timeline(USER, "pet.rabbit.name")] == ["Wombat"]
    # the output schema offered a free key; the descriptions are kept for later matches
    key_schema = backend.options[0].json_schema["properties"]["facts"]["items"]["properties"]
    assert "pattern" in key_schema["key"]
    described = {k.key: k.description for k in known_keys(store, USER)}
    assert described == {"pet.parrot.name": "the name of the user's pet parrot",
                         "pet.rabbit.name": "the name of the user's pet rabbit",
                         "user.name": ""}


def test_another_spelling_of_a_key_supersedes_its_value(store):
    backend = Scripted(
        facts(item("pet.rabbit.name", "Wombat", "the name of the user's pet rabbit")),
        facts(item("rabbit_name", "Biscuit", "the name of the user's rabbit")),
    )
    ex = extractor(backend, store, encoder=WordEncoder())
    ex.extract(USER, [turn(0, "My rabbit is called Wombat.")])
    result = ex.extract(USER, [turn(1, "I renamed my rabbit: she is Biscuit now.", day=1)])
    assert (result.keys_merged, result.keys_new) == (1, 0)
    [old, new] = store.timeline(USER, "pet.rabbit.name")
    assert (old.value, old.status, new.value, new.status) == (
        "Wombat", "superseded", "Biscuit", "active")
    assert store.timeline(USER, "rabbit_name") == []


def test_two_spellings_in_one_output_merge_and_the_later_value_wins(store):
    backend = Scripted(facts(
        item("rabbit_name", "Wombat", "the name of the user's rabbit", 0),
        item("pet.rabbit.name", "Biscuit", "the name of the user's pet rabbit", 1)))
    result = extractor(backend, store, encoder=WordEncoder()).extract(
        USER, [turn(0, "My rabbit is Wombat."), turn(1, "No wait, my rabbit is Biscuit.")])
    assert (result.facts_written, result.keys_merged, result.keys_new) == (2, 1, 1)
    assert [(f.value, f.status) for f in store.timeline(USER, "rabbit_name")] == [
        ("Wombat", "superseded"), ("Biscuit", "active")]


def test_a_merged_key_keeps_its_category(store):
    # no description recorded for user.diet: the schema field's is compared with the proposal's
    store.assert_fact(USER, FactInput("user.diet", "vegetarian", "profile"), now=T0)
    backend = Scripted(facts(item("diet", "vegan", "what the user eats or avoids (vegetarian, "
                                                   "allergies...)")))
    extractor(backend, store, encoder=WordEncoder()).extract(USER, [turn(0, "I am vegan now.")])
    [fact] = store.active(USER)
    assert (fact.key, fact.value, fact.category) == ("user.diet", "vegan", "profile")


def test_invalid_keys_are_counted_not_stored(store):
    backend = Scripted(facts(
        item("pet..name", "Wombat", "a pet's name"),
        item("pet.rabbit.name", "Wombat", "the name of the user's pet rabbit"),
        item("the rabbit's name", "Wombat", "the name of the user's rabbit")))
    result = extractor(backend, store, encoder=WordEncoder()).extract(
        USER, [turn(0, "My rabbit is called Wombat.")])
    assert (result.skipped_reason, result.facts_written, result.keys_rejected) == (None, 1, 2)
    assert "empty segment" in result.key_rejections[0]
    assert [f.key for f in store.active(USER)] == ["pet.rabbit.name"]


def test_a_key_of_the_wrong_type_still_refuses_the_output(store):
    bad = facts({**item("pet.rabbit.name", "Wombat", "x"), "key": 7})
    result = extractor(Scripted(bad, bad), store).extract(USER, [turn(0, "Wombat.")])
    assert result.skipped_reason == INVALID_OUTPUT and store.active(USER) == []


def test_fixed_keys_keep_the_schema_only(store):
    backend = Scripted(facts({k: v for k, v in item("user.pet", "a rabbit, Wombat", "").items()
                              if k != "description"}))
    result = extractor(backend, store, keys="fixed").extract(
        USER, [turn(0, "I have a rabbit, Wombat.")])
    assert result.facts_written == 1 and result.keys_new == 0
    key_schema = backend.options[0].json_schema["properties"]["facts"]["items"]["properties"]
    assert "enum" in key_schema["key"] and "description" not in key_schema


def test_erasure_removes_the_key_descriptions(store):
    backend = Scripted(facts(item("pet.rabbit.name", "Wombat", "the name of the user's rabbit")))
    extractor(backend, store, encoder=WordEncoder()).extract(USER, [turn(0, "Rabbit: Wombat.")])
    assert known_keys(store, USER)
    store.erase_user(USER)
    assert known_keys(store, USER) == []
    with store.transaction("count", write=False) as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM fact_keys").scalar() == 0


# -- the replay says which tier extracted -------------------------------------------------------


def test_the_replay_rows_and_report_name_the_extracting_tier(tmp_path):
    from memroute.eval.replay.driver import Checkpoint, replay_strategy
    from memroute.eval.replay.facts import replay_facts
    from memroute.eval.replay.report import extraction_lines

    from .test_replay import req

    backend = Scripted(*[facts()] * 4)
    facts_layer = replay_facts(ExtractionConfig(threshold_tokens=1, tier=1), backend, tmp_path,
                               encoder=WordEncoder())
    try:
        assert facts_layer.stats()["extraction_tier"] == 1
        assert facts_layer.row_fields() == {"extraction_tier": 1,
                                            "extraction_model": "scripted-extractor",
                                            "extraction_keys": "open"}
    finally:
        facts_layer.close()

    class Echo:
        name, stores_memory = "memroute_facts", False
        row_fields = {"extraction_tier": 1, "extraction_model": "scripted-extractor",
                      "extraction_keys": "open"}

        def answer_many(self, wave):
            from memroute.eval.replay.outcome import Outcome

            return [Outcome("ok", 0, "m", False, [1.0], 1, 0, 1, 1.0, 1.0, 0.0, 0.0)
                    for _ in wave]

    rows = replay_strategy(Echo(), [req(0, "alice", "hi")], Checkpoint(tmp_path / "r.jsonl"))
    assert rows[0]["extraction_tier"] == 1 and rows[0]["extraction_model"] == "scripted-extractor"
    frame = pl.DataFrame([{**rows[0]}, {**rows[0], "strategy": "memroute",
                                        "extraction_tier": None, "extraction_model": None,
                                        "extraction_keys": None}])
    assert extraction_lines(frame) == "- memroute_facts: tier 1 (scripted-extractor), keys open"


def test_the_replay_refuses_an_extraction_tier_outside_the_cascade():
    from memroute.config.replay import ReplayConfig, check_replay_config
    from memroute.config.schema import ModelConfig

    cfg = ReplayConfig(trace="t.jsonl", strategies=["memroute", "memroute_facts"],
                       cascade={"0": ModelConfig(name="a", engine="mock", params_b=0.5)},
                       extraction=ExtractionConfig(tier=1))
    with pytest.raises(ConfigError) as err:
        check_replay_config(cfg)
    assert err.value.field == "extraction.tier"
