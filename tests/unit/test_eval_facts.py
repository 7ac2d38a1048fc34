"""The benchmark's fact layer on fakes: extraction over each user's conversation into the run's
fact store (cached on disk), the *_facts conditions inject the active value of a planted
correction and never its stale one, and the knowledge-update / temporal / stale-rate table."""

from __future__ import annotations

import json
import re

import polars as pl
import pytest

from memroute.accounting.cost import Pricing
from memroute.config import RetrievalConfig, RouterConfig
from memroute.config.fact_layer import FactLayerConfig, fact_layer_fields
from memroute.datasets.conversations import as_eval_conversation
from memroute.datasets.generate.synthetic import generate, write_json
from memroute.datasets.locomo import load_locomo
from memroute.errors import ConfigError
from memroute.eval.benchmark import ingest, run_conditions
from memroute.eval.causes import add_causes
from memroute.eval.conditions import CONDITIONS
from memroute.eval.fact_layer import build_fact_layer, cache_key, chunks
from memroute.eval.fact_metrics import fact_layer_table, with_fact_flags
from memroute.eval.report import predictions_frame, tables
from memroute.memory.facts.extraction_schema import ExtractionSchema
from memroute.routing.facts_block import facts_header
from memroute.routing.router import Tier
from memroute.types import ModelReply

from .fakes import FakeBackend, FakeRetriever

FIELDS = [{"field": "user.correction", "category": "temporal",
           "description": "the value the user corrected"}]
_TURN = re.compile(r"^Turn (\d+) \([^)]*\)\nUser: (.*)$", re.MULTILINE)


class ExtractingBackend:
    """Extracts the planted corrections: the turn stating the old value asserts it, the later
    one stating the new value asserts that (conversation order makes the new one win)."""

    def __init__(self, said: dict[str, str], model_id: str = "extractor") -> None:
        self.said = said  # the user's words -> the value they state
        self.model_id = model_id
        self.calls = 0

    def generate(self, messages, *, max_tokens=32, temperature=0.0, options=None, **kw):
        self.calls += 1
        facts = [{"key": "user.correction", "value": value, "source": "explicit",
                  "valid_from": None, "turn": int(n)}
                 for n, text in _TURN.findall(messages[1].content)
                 for words, value in self.said.items() if words in text]
        text = json.dumps({"facts": facts})
        return ModelReply(text, self.model_id, [-0.1], prompt_tokens=10, completion_tokens=1)


def planted(convs) -> dict[str, str]:
    """The text of each correction's turns (evidence: [new turn, old turn]) -> its value."""
    out = {}
    for conv in convs:
        for qa in conv.qa:
            if qa.stale_answer:
                new, old = qa.evidence
                out[conv.find_turn(new).text] = qa.answer
                out[conv.find_turn(old).text] = qa.stale_answer
    return out


class FactEcho(FakeBackend):
    """Answers a correction question with the value of the injected facts block, else with
    the stale value (what a model misled by the old turn-pair says)."""

    def __init__(self, stale_by_question: dict[str, str]) -> None:
        super().__init__("small", answer="no idea", logprob=-0.1)
        self.stale = stale_by_question

    def generate(self, messages, **kw):
        system, question = messages[0].content, messages[-1].content
        current = re.search(r"- user\.correction: (.*) \(since", system)
        self.answer = current.group(1) if current else self.stale.get(question, "no idea")
        return super().generate(messages, **kw)


@pytest.fixture
def dataset(tmp_path):
    write_json(generate(num_users=2, sessions_per_user=3, seed=1), tmp_path / "d.json")
    convs = load_locomo(tmp_path / "d.json")
    corrections = [qa for c in convs for qa in c.qa if qa.stale_answer]
    assert len(corrections) == 2  # one planted correction per user
    return convs, corrections


def layer(tmp_path, convs, corrections, *, run="run", model_id="extractor"):
    backend = ExtractingBackend(planted(convs), model_id)
    run_dir = tmp_path / run
    run_dir.mkdir()
    cfg = FactLayerConfig(cache_dir=str(tmp_path / "cache"), turns_per_call=4)
    store, stats = build_fact_layer([as_eval_conversation(c) for c in convs], backend, FIELDS,
                                    cfg, run_dir, progress=False)
    return store, stats, backend


def test_extraction_runs_in_conversation_order_and_is_cached(tmp_path, dataset):
    convs, corrections = dataset
    store, stats, backend = layer(tmp_path, convs, corrections)
    n_turns = sum(len(as_eval_conversation(c).records) for c in convs)
    assert not stats.cached and stats.turns == n_turns and backend.calls == stats.calls > 2
    assert stats.skipped_calls == 0 and (tmp_path / "run" / "facts.sqlite3").is_file()
    for conv, qa in zip(convs, corrections):
        [timeline] = [store.timeline(conv.sample_id, "user.correction")]
        # the old value first, superseded by the correction a later session made
        assert [f.value for f in timeline] == [qa.stale_answer, qa.answer]
        assert [f.status for f in timeline] == ["superseded", "active"]
    store.close()
    # a rerun reads the cache: no model call, the same facts in a new run folder
    again, stats2, backend2 = layer(tmp_path, convs, corrections, run="rerun")
    assert stats2.cached and backend2.calls == 0 and stats2.active_facts == stats.active_facts
    assert [f.value for f in again.active(convs[0].sample_id)] == [corrections[0].answer]
    again.close()
    # another model is another cache entry
    other, stats3, backend3 = layer(tmp_path, convs, corrections, run="other", model_id="m2")
    assert not stats3.cached and backend3.calls > 0
    other.close()


def test_chunks_keep_sessions_apart_in_time_order(dataset):
    conv = as_eval_conversation(dataset[0][0])
    parts = chunks([r.pair for r in reversed(conv.records)], 4)
    assert all(len(p) <= 4 and len({t.session_id for t in p}) == 1 for p in parts)
    flat = [t for p in parts for t in p]
    assert [t.id for t in flat] == [r.pair.id for r in conv.records]


def test_cache_key_depends_on_the_turns_model_and_schema(dataset):
    convs = [as_eval_conversation(c) for c in dataset[0]]
    schema = ExtractionSchema.from_config(FIELDS)
    cfg = FactLayerConfig()
    key = cache_key(convs, "m", schema, cfg)
    assert key == cache_key(convs, "m", schema, cfg)
    assert key != cache_key(convs, "m2", schema, cfg)
    assert key != cache_key(convs[:1], "m", schema, cfg)
    assert key != cache_key(convs, "m", ExtractionSchema.from_config(), cfg)
    assert key != cache_key(convs, "m", schema, FactLayerConfig(turns_per_call=3))


def test_facts_conditions_inject_the_current_value_never_the_stale_one(tmp_path, dataset):
    convs, corrections = dataset
    store, _, _ = layer(tmp_path, convs, corrections)
    small = FactEcho({qa.question: qa.stale_answer for qa in corrections})
    large = FakeBackend("large", answer="no idea", logprob=-0.1)
    tiers = [Tier("small", small, Pricing(0.5)), Tier("large", large, Pricing(1.5))]
    retriever = FakeRetriever()
    dia = ingest(convs, retriever)
    conds = ["warm_memory_only", "warm_memory_facts"]
    rows, _ = run_conditions(convs, tiers, retriever, RouterConfig(tau=0.5), RetrievalConfig(),
                             conds, memory_dia_ids=dia, batch_size=4, progress=False, facts=store)
    df = predictions_frame(rows, {})
    fix = df.filter(pl.col("stale_answer").is_not_null())
    with_facts = fix.filter(pl.col("condition") == "warm_memory_facts")
    assert with_facts.height == 2
    for row in with_facts.iter_rows(named=True):
        assert row["facts_block"].startswith(facts_header(0)[:30])
        assert f"user.correction: {row['reference']} (since" in row["facts_block"]
        assert row["stale_answer"] not in row["facts_block"]  # never injected as current
        assert row["facts_injected"] == 1 and row["prediction"] == row["reference"]
    # the block was in the prompt the model got, and counted as injected memory
    prompts = [p[0].content for p in small.prompts if "user.correction" in p[0].content]
    assert len(prompts) == sum(len(c.qa) for c in convs)  # every question of the condition
    plain = df.filter(pl.col("condition") == "warm_memory_only")
    assert (plain["facts_block"] == "").all() and (plain["facts_injected"] == 0).all()
    by_qid = {r["qid"]: r for r in plain.iter_rows(named=True)}
    for row in df.filter(pl.col("condition") == "warm_memory_facts").iter_rows(named=True):
        assert row["injected_tokens"] > by_qid[row["qid"]]["injected_tokens"]

    table = tables(add_causes(df), conds, "fact_type")["fact_layer"].to_dicts()
    assert [r["condition"] for r in table] == conds
    assert table[0]["stale %"] == 100.0 and table[1]["stale %"] == 0.0
    assert table[0]["update F1"] == 0.0 and table[1]["update F1"] == 100.0
    assert table[1]["stale n"] == 2 and table[1]["facts/q"] == 1.0
    store.close()


def test_a_facts_condition_without_the_store_names_the_field(dataset):
    convs, _ = dataset
    tiers = [Tier("small", FakeBackend("small"), Pricing(0.5))]
    with pytest.raises(ConfigError, match="warm_memory_facts") as err:
        run_conditions(convs, tiers, FakeRetriever(), RouterConfig(), RetrievalConfig(),
                       ["warm_memory_facts"], memory_dia_ids={}, progress=False)
    assert err.value.field == "conditions"
    assert CONDITIONS.get("warm_compound_facts").facts and not CONDITIONS.get("warm_compound").facts


# -- the table on hand-made rows --------------------------------------------------------------


def _row(cond, fact_type, f1, prediction, reference, stale=None, category=None):
    return {"condition": cond, "fact_type": fact_type, "category": category, "f1": f1,
            "prediction": prediction, "reference": reference, "stale_answer": stale}


def test_fact_layer_table_on_hand_made_rows():
    rows = [
        _row("a", "correction", 0.0, "Lisbon", "Madrid", stale="Lisbon"),
        _row("a", "correction", 1.0, "Madrid", "Madrid", stale="Lisbon"),
        _row("a", "knowledge-update", 0.5, "x y", "x"),  # no stale value recorded
        _row("a", "temporal-reasoning", 0.25, "3 days", "4 days"),
        _row("a", "cat2", 0.75, "May 2023", "7 May 2023", category=2),
        _row("a", "name", 1.0, "Rex", "Rex"),
        _row("b", "correction", 0.0, "Lisbon and Madrid", "Madrid", stale="Lisbon"),
        _row("b", "date", 1.0, "4 June", "4 June", category=2),
    ]
    df = pl.DataFrame(rows)
    table = {r["condition"]: r for r in fact_layer_table(df, ["b", "a"]).to_dicts()}
    assert list(table) == ["b", "a"]
    a, b = table["a"], table["b"]
    assert (a["n"], a["update n"], a["temporal n"], a["stale n"]) == (6, 3, 2, 2)
    assert a["F1"] == pytest.approx(100 * 3.5 / 6, abs=0.05)
    assert a["update F1"] == 50.0 and a["temporal F1"] == 50.0
    assert a["stale %"] == 50.0  # one of the two with a stale value answered it
    # naming both values is not stale (the stale_value cause's rule)
    assert b["stale %"] == 0.0 and b["temporal F1"] == 100.0 and b["update F1"] == 0.0
    flags = with_fact_flags(df)
    assert flags["stale"].to_list() == [True, False, None, None, None, None, False, None]


def test_table_without_stale_values_or_facts_columns_is_null_not_zero():
    df = pl.DataFrame([_row("a", "cat1", 1.0, "x", "x")])
    [r] = fact_layer_table(df, ["a"]).to_dicts()
    assert r["stale n"] == 0 and r["stale %"] is None and r["update F1"] is None
    assert "facts/q" not in r


def test_benchmark_config_has_the_built_in_sets_schema():
    from memroute.config import BenchmarkConfig
    from memroute.config.compose import compose

    cfg = compose("benchmark", [], BenchmarkConfig)
    keys = [f["field"] for f in fact_layer_fields(cfg.fact_layer, "synthetic")]
    assert {"user.city", "user.team", "user.standup_time"} <= set(keys)  # the corrections
    default = fact_layer_fields(cfg.fact_layer, "locomo")
    assert default and "user.city" not in [f["field"] for f in default]
    with pytest.raises(ConfigError) as err:
        fact_layer_fields(FactLayerConfig(fields=[{"field": "Bad Key", "category": "temporal"}]),
                          "synthetic")
    assert err.value.field == "fact_layer.fields[0].field"
