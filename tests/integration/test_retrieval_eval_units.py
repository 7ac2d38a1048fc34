"""The retrieval evaluation with atomic units beside the turn-pairs (``units_from``): real
MiniLM and Milvus Lite, units in their own collection, a unit scored as its source turn."""

from __future__ import annotations

import json
from dataclasses import asdict

import polars as pl
import pytest

from memroute.config.compose import compose
from memroute.config.retrieval_eval import RetrievalEvalConfig
from memroute.datasets.registry import dataset_cases
from memroute.errors import ConfigError
from memroute.eval.retrieval_run import run_retrieval_eval
from memroute.memory.facts.extraction_schema import ExtractedUnit


def config(tmp_path, *extra):
    return compose("retrieval_eval", [
        "dataset=longmemeval", "dataset.size=small", "strategies=[bm25]", "dims=[null]",
        "ks=[1,2,5]", "tracking=disabled", f"output_dir={tmp_path / 'out'}", *extra],
        RetrievalEvalConfig)


def test_units_pointing_at_the_gold_turn_are_found_and_scored_as_that_turn(tmp_path):
    cfg = config(tmp_path)
    pairs, cases = dataset_cases(cfg.dataset, tmp_path / "data")
    by_id = {p.id: p for p in pairs}
    units = tmp_path / "units.jsonl"
    with units.open("w") as f:  # a unit that says what each question asks, from its gold turn
        for case in cases:
            gold = by_id[case.gold_pairs[0]]
            unit = ExtractedUnit(f"Fact for the question: {case.query}", gold.user_id,
                                 gold.session_id, gold.turn_index, gold.session_time)
            f.write(json.dumps(asdict(unit)) + "\n")
    cfg = config(tmp_path, f"units_from={units}")
    out = run_retrieval_eval(cfg)
    scores = pl.read_parquet(out.run_dir / "scores.parquet")
    plain = scores.filter(pl.col("strategy") == "bm25")
    with_units = scores.filter(pl.col("strategy") == "bm25-units")
    assert plain.height == with_units.height == len(cases)
    # every question's own unit ranks first among the units, so at worst second overall (a
    # rank tie goes to the turn), and it counts as the gold turn it came from
    assert with_units["turn_recall_any@2"].mean() == 1.0
    assert plain["turn_recall_any@2"].mean() < 1.0  # not a test the turns pass alone
    assert (with_units["turn_recall_any@1"] >= plain["turn_recall_any@1"]).all()
    assert "| full | bm25-units |" in out.report


def test_a_missing_units_file_names_the_setting(tmp_path):
    with pytest.raises(ConfigError) as err:
        run_retrieval_eval(config(tmp_path, f"units_from={tmp_path / 'nope.jsonl'}"))
    assert err.value.field == "units_from"
