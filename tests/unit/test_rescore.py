"""Saved run -> rescore on fakes: identical numbers, and every way it must refuse or differ."""

import json

import polars as pl
import pytest

from memroute.accounting.cost import Pricing
from memroute.config import BenchmarkConfig, ModelConfig, RetrievalConfig, RouterConfig
from memroute.eval import manifest as mf
from memroute.eval.benchmark import ingest, run_conditions
from memroute.eval.causes import WRONG_BELOW, add_causes
from memroute.datasets.locomo import load_locomo
from memroute.eval.report import predictions_frame, tables
from memroute.eval.rescore import EXIT_DIFFERENT, EXIT_DRIFT, EXIT_OK, rescore_run
from memroute.eval.run import save_run
from memroute.datasets.generate.synthetic import generate, write_json
from memroute.routing.router import Tier

from .fakes import FakeBackend, FakeRetriever

CONDS = ["cold_small", "warm_memory_only", "warm_compound", "cold_large"]


class ScriptedBackend(FakeBackend):
    """Answers per question: some right, some with the stale value, the rest a hedge."""

    def __init__(self, model_id, answers, logprob):
        super().__init__(model_id, logprob=logprob)
        self.answers = answers

    def generate(self, messages, **kw):
        self.answer = self.answers.get(messages[-1].content, "I don't know")
        return super().generate(messages, **kw)


@pytest.fixture
def run_dir(tmp_path):
    path = tmp_path / "d.json"
    write_json(generate(num_users=2, sessions_per_user=4, seed=3), path)
    convs = load_locomo(path, limit=12)
    qas = [qa for c in convs for qa in c.qa]
    answers = {qa.question: qa.answer for qa in qas[::2]}
    answers.update({qa.question: qa.stale_answer for qa in qas if qa.stale_answer})
    retriever = FakeRetriever()
    dia = ingest(convs, retriever)
    tiers = [Tier("small", ScriptedBackend("small", answers, -2.0), Pricing(0.5)),
             Tier("large", FakeBackend("large", answer="blue", logprob=-0.1), Pricing(1.5))]
    rows, _ = run_conditions(convs, tiers, retriever, RouterConfig(tau=0.5), RetrievalConfig(), CONDS,
                             memory_dia_ids=dia, batch_size=5, progress=False)
    df = add_causes(predictions_frame(rows, {"small": 8.0, "large": 235.0}), WRONG_BELOW)
    tabs = tables(df, CONDS, "fact_type")
    out = tmp_path / "run"
    out.mkdir()
    cfg = BenchmarkConfig(
        cascade={"0": ModelConfig(name="small", engine="openai_http", price_as_params_b=8.0, params_b=0.5),
                 "1": ModelConfig(name="large", engine="openai_http", price_as_params_b=235.0, params_b=1.5)},
        conditions=CONDS,
    )
    files = save_run(out, df, tabs, "report", {"router.system_prompt": cfg.router.system_prompt})
    mf.write_manifest(out, mf.build_manifest(cfg, flat_config={}, files=files, small_model="small",
                                             group_col="fact_type", wrong_below=WRONG_BELOW, assets=None))
    return out


def test_rescore_reproduces_every_number(run_dir):
    saved = pl.read_parquet(run_dir / "predictions.parquet")
    assert set(saved["cause"].drop_nulls()) >= {"stale_value", "hedged", "not_retrieved"}
    assert saved["correct"].any()
    res = rescore_run(run_dir)
    assert res.differences == [] and res.exit_code == EXIT_OK and not res.metric_changed
    rescored = pl.read_parquet(run_dir / "rescored_predictions.parquet")
    assert rescored.equals(saved)
    assert json.loads((run_dir / "rescored_metrics.json").read_text())["tables"] == \
        json.loads((run_dir / "metrics.json").read_text())["tables"]
    assert "identical to the saved run" in (run_dir / "rescored_summary.md").read_text()


def test_calls_file_holds_one_row_per_call(run_dir):
    preds = pl.read_parquet(run_dir / "predictions.parquet")
    calls = pl.read_parquet(run_dir / "calls.parquet")
    assert calls.height == preds["calls"].list.len().sum()
    assert {"condition", "qid", "call", "in", "base", "injected", "out", "eff_cost"} <= set(calls.columns)


def test_changed_saved_file_stops_the_rescore(run_dir):
    df = pl.read_parquet(run_dir / "predictions.parquet")
    df.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(0.123).otherwise(pl.col("f1")).alias("f1")) \
        .write_parquet(run_dir / "predictions.parquet")
    res = rescore_run(run_dir)
    assert res.exit_code == EXIT_DRIFT and res.file_changes == ["predictions.parquet"]
    assert not (run_dir / "rescored_summary.md").exists()
    # allowed: the recomputed f1 no longer matches the (tampered) saved one -> not reproducible
    res = rescore_run(run_dir, allow_drift=True)
    assert res.exit_code == EXIT_DIFFERENT
    assert any(d.startswith("f1: 1 row(s) differ") for d in res.differences)


def test_template_drift_names_the_template(run_dir):
    m = json.loads((run_dir / "manifest.json").read_text())
    m["templates"]["memory_injection"] = "0" * 64
    (run_dir / "manifest.json").write_text(json.dumps(m))
    res = rescore_run(run_dir)
    assert res.exit_code == EXIT_DRIFT and [n for n, _, _ in res.drift.changed] == ["memory_injection"]
    assert rescore_run(run_dir, allow_drift=True).exit_code == EXIT_OK


def test_other_threshold_changes_numbers_without_failing(run_dir):
    res = rescore_run(run_dir, wrong_below=1.01)  # nothing counts as correct
    assert res.metric_changed and res.exit_code == EXIT_OK
    assert any(d.startswith("correct:") for d in res.differences)


def test_rescore_config_composes_and_rejects_typos():
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from memroute.config import register_configs, to_object
    from memroute.config.rescore import RescoreConfig

    register_configs()
    GlobalHydra.instance().clear()
    conf = str(Path(__file__).resolve().parents[2] / "conf")
    try:
        with initialize_config_dir(config_dir=conf, version_base="1.3"):
            cfg = to_object(compose("rescore", overrides=["run_id=abc", "wrong_below=0.3"]), RescoreConfig)
            assert cfg.run_id == "abc" and cfg.wrong_below == 0.3 and cfg.allow_drift is False
            assert cfg.tracking.enabled
            for bad in ("wrong_below=high", "run_idd=abc"):  # schema-checked at compose time
                with pytest.raises(Exception, match="wrong_below|run_idd"):
                    to_object(compose("rescore", overrides=[bad]), RescoreConfig)
    finally:
        GlobalHydra.instance().clear()


def test_unknown_run_is_a_clear_config_error(tmp_path):
    from memroute.config import TrackingConfig
    from memroute.errors import ConfigError
    from memroute.eval.rescore import resolve_run_dir

    with pytest.raises(ConfigError, match="run_id"):
        resolve_run_dir(run_id=None, run_dir=None, output_dir=str(tmp_path), tracking=TrackingConfig())
    with pytest.raises(ConfigError, match="tracking is disabled"):
        resolve_run_dir(run_id="nope", run_dir=None, output_dir=str(tmp_path),
                        tracking=TrackingConfig(enabled=False))
    (tmp_path / "20260101-000000-abcdef").mkdir()
    assert resolve_run_dir(run_id="20260101-000000-abcdef", run_dir=None, output_dir=str(tmp_path),
                           tracking=TrackingConfig()).name == "20260101-000000-abcdef"
