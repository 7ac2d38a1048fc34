"""Atomic units beside the turn-pairs (:mod:`memroute.retrieval.with_units`): rank fusion of
the two lists, a unit counted as the turn it came from in evidence recall and in the
benchmark's injected evidence, and the benchmark's units from the fact layer's extraction."""

from __future__ import annotations

import json

import polars as pl
import pytest

from memroute.accounting.cost import Pricing
from memroute.config.fact_layer import FactLayerConfig, check_fact_layer_config
from memroute.config.schema import RetrievalConfig, RouterConfig
from memroute.datasets.conversations import as_eval_conversation
from memroute.datasets.records import RetrievalCase
from memroute.errors import ConfigError, InvalidRequest
from memroute.eval.benchmark import ingest, run_conditions
from memroute.eval.conditions import CONDITIONS
from memroute.eval.fact_layer import UNITS_FILE, add_units, build_fact_layer, load_units
from memroute.eval.report import predictions_frame
from memroute.eval.retrieval_eval import score_case
from memroute.memory.facts.extraction_schema import ExtractedUnit
from memroute.memory.units import UNIT_SOURCE, UnitWrite
from memroute.retrieval.with_units import WithUnits, fuse, is_unit, source_turn_id
from memroute.routing.router import Tier
from memroute.types import Memory, RetrievalHit, stable_id

from .fakes import FakeBackend, FakeRetriever
from .test_eval_facts import FIELDS, ExtractingBackend, dataset, planted  # noqa: F401

U = "acme:alice"


def turn_hit(i: int) -> RetrievalHit:
    m = Memory(stable_id(U, "s1", i), U, f"turn {i}", 100, "m", session_id="s1", turn_index=i)
    return RetrievalHit(m, 1.0)


def unit_hit(i: int, text: str = "") -> RetrievalHit:
    m = Memory(stable_id(UNIT_SOURCE, U, text or f"unit {i}"), U, text or f"unit {i}", 100,
               UNIT_SOURCE, session_id="s1", turn_index=i)
    return RetrievalHit(m, 0.5)


class Units:
    def __init__(self, hits=(), written=None):
        self.hits, self.asked, self.added = list(hits), [], []

    def search(self, user_id, query, top_k):
        self.asked.append((user_id, query, top_k))
        return self.hits[:top_k]

    def add(self, user_id, units):
        self.added.append((user_id, list(units)))
        return UnitWrite(len(units), 0)


def test_rank_fusion_interleaves_the_lists_and_turns_win_ties():
    fused = fuse([turn_hit(0), turn_hit(1)], [unit_hit(5), unit_hit(6)], 3)
    assert [is_unit(h.memory) for h in fused] == [False, True, False]
    assert [h.memory.text for h in fused] == ["turn 0", "unit 5", "turn 1"]
    assert fused[0].score == pytest.approx(1 / 61) and fused[0].score > fused[2].score
    heavier = fuse([turn_hit(0)], [unit_hit(5)], 2, unit_weight=2.0)
    assert heavier[0].memory.text == "unit 5"


def test_a_unit_names_its_source_turn_and_a_turn_itself():
    assert source_turn_id(unit_hit(3).memory) == stable_id(U, "s1", 3) == turn_hit(3).memory.id
    assert source_turn_id(turn_hit(2).memory) == turn_hit(2).memory.id


def test_with_units_asks_both_and_passes_the_rest_to_the_turns():
    turns, units = FakeRetriever(), Units([unit_hit(1)])
    both = WithUnits(turns, units, unit_k=3, default_top_k=2)
    assert both.retrieve(U, "where") == [RetrievalHit(unit_hit(1).memory, 1 / 61)]
    assert units.asked == [(U, "where", 3)]
    assert both.remember([]) == 0  # delegated to the turn retriever
    for bad, field in (({"unit_k": 0}, "unit_k"), ({"unit_weight": 0}, "unit_weight")):
        with pytest.raises(InvalidRequest) as err:
            WithUnits(turns, units, **bad)
        assert err.value.field == field


def test_evidence_recall_counts_a_unit_as_its_turn_once():
    gold = turn_hit(3).memory.id
    case = RetrievalCase(U, "q", "g", gold_pairs=(gold,), gold_sessions=("s1",))
    hits = [unit_hit(3, "a"), unit_hit(3, "b"), turn_hit(3), turn_hit(4)]
    scores = score_case(hits, case, ks=(1, 2))
    assert scores["turn_recall@1"] == 1.0 and scores["turn_mrr"] == 1.0


def test_fact_layer_config_checks_the_unit_settings():
    for bad, field in (({"unit_k": 0}, "fact_layer.unit_k"),
                       ({"unit_weight": -1.0}, "fact_layer.unit_weight"),
                       ({"tier": -1}, "fact_layer.tier")):
        with pytest.raises(ConfigError) as err:
            check_fact_layer_config(FactLayerConfig(**bad))
        assert err.value.field == field


class UnitExtractingBackend(ExtractingBackend):
    """The corrections as facts and, when the schema asks for units, one unit per fact."""

    def generate(self, messages, **kw):
        reply = super().generate(messages, **kw)
        if '"units"' in messages[0].content:
            facts = json.loads(reply.text)["facts"]
            units = [{"text": f"The user said the value is {f['value']}.", "turn": f["turn"]}
                     for f in facts]
            reply.text = json.dumps({"facts": facts, "units": units})
        return reply


def test_the_units_conditions_index_the_extracted_units_and_count_their_evidence(
        tmp_path, dataset):  # noqa: F811
    convs, corrections = dataset
    evals = [as_eval_conversation(c) for c in convs]
    cfg = FactLayerConfig(cache_dir=str(tmp_path / "cache"), turns_per_call=4, units=True)
    run = tmp_path / "run"
    run.mkdir()
    store, stats = build_fact_layer(evals, UnitExtractingBackend(planted(convs)), FIELDS, cfg,
                                    run, progress=False)
    units = load_units(run)
    assert stats.units == len(units) == 2 * len(corrections)  # old and new value, each user
    assert all(isinstance(u, ExtractedUnit) for u in units)
    # the cache keeps them: a rerun reads the same units without a model call
    rerun = tmp_path / "rerun"
    rerun.mkdir()
    backend = UnitExtractingBackend(planted(convs))
    store2, stats2 = build_fact_layer(evals, backend, FIELDS, cfg, rerun, progress=False)
    assert stats2.cached and backend.calls == 0 and load_units(rerun) == units
    assert (rerun / UNITS_FILE).read_text() == (run / UNITS_FILE).read_text()

    # the benchmark: the units condition retrieves units beside the turns
    turns = FakeRetriever()
    dia = ingest(convs, turns)
    index = Units()
    by_text = {}
    for u in units:
        m = Memory(stable_id(UNIT_SOURCE, u.user_id, u.text), u.user_id, u.text,
                   u.session_time, UNIT_SOURCE, session_id=u.session_id,
                   turn_index=u.turn_index)
        by_text.setdefault(u.user_id, []).append(RetrievalHit(m, 0.5))
    index.search = lambda uid, q, k: by_text.get(uid, [])[:k]
    assert add_units(index, units) == len(units)
    both = WithUnits(turns, index, unit_k=cfg.unit_k)
    assert sorted(uid for uid, _ in index.added) == sorted({u.user_id for u in units})
    tiers = [Tier("small", FakeBackend("small"), Pricing(0.5))]
    conds = ["warm_memory_only", "warm_memory_units"]
    rows, _ = run_conditions(convs, tiers, turns, RouterConfig(), RetrievalConfig(), conds,
                             memory_dia_ids=dia, progress=False, units_retriever=both)
    df = predictions_frame(rows, {})
    with_units = df.filter(pl.col("condition") == "warm_memory_units")
    assert with_units["units_injected"].min() >= 1
    assert (df.filter(pl.col("condition") == "warm_memory_only")["units_injected"] == 0).all()
    # a unit's evidence is its source turn's: the correction questions see their evidence
    fixes = with_units.filter(pl.col("stale_answer").is_not_null())
    assert fixes["evidence_injected"].all()
    with pytest.raises(ConfigError, match="warm_memory_units") as err:
        run_conditions(convs, tiers, turns, RouterConfig(), RetrievalConfig(),
                       ["warm_memory_units"], memory_dia_ids=dia, progress=False)
    assert err.value.field == "conditions" and CONDITIONS.get("warm_compound_units").units
    store.close()
    store2.close()
