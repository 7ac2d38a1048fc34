"""The summary-tree conditions in the benchmark, on mock tiers: the view is what is injected, a
summary counts as the turns it covers, lost facts are ``compacted_away``, compaction is priced."""

import polars as pl
import pytest

from memroute.accounting.cost import Pricing
from memroute.config import RetrievalConfig, RouterConfig
from memroute.config.summary import SummaryConfig
from memroute.datasets.conversations import as_eval_conversation
from memroute.datasets.generate.synthetic import generate, write_json
from memroute.datasets.locomo import load_locomo
from memroute.errors import ConfigError
from memroute.eval.benchmark import ingest, run_conditions
from memroute.eval.causes import add_causes
from memroute.eval.report import predictions_frame, summary
from memroute.eval.summary_run import TREES_FILE, add_compaction_costs, build_summary_memory
from memroute.llm.mock_backend import MockBackend
from memroute.routing.router import Tier

from .fakes import FakeRetriever

CONDS = ["warm_memory_only", "warm_summary_only"]


def tiers(compact_answer: str) -> list[Tier]:
    # the small tier answers from memory and, asked to compact, writes ``compact_answer``
    small = MockBackend("mock-small", rules=[{"match": "^Compact this", "answer": compact_answer}])
    return [Tier("small", small, Pricing(0.5)), Tier("large", MockBackend("mock-large"), Pricing(8))]


@pytest.fixture
def convs(tmp_path):
    path = tmp_path / "d.json"
    write_json(generate(num_users=2, sessions_per_user=4, seed=3), path)
    return load_locomo(path, limit=8)


def run(convs, tmp_path, compact_answer):
    ts = tiers(compact_answer)
    cfg = SummaryConfig(budget_tokens=300, node_tokens=60, leaf_trigger_tokens=200)
    trees = build_summary_memory([as_eval_conversation(c) for c in convs], ts[0], cfg,
                                 tier_index=0, progress=False, run_dir=tmp_path)
    retriever = FakeRetriever()
    dia = ingest(convs, retriever)
    rows, _ = run_conditions(convs, ts, retriever, RouterConfig(), RetrievalConfig(), CONDS,
                             memory_dia_ids=dia, progress=False, summary_memory=trees)
    df = add_causes(add_compaction_costs(predictions_frame(rows, {"mock-small": 8.0}), trees,
                                         {"mock-small": 8.0}))
    return trees, df


def test_the_summary_condition_injects_the_view_and_prices_the_compaction(convs, tmp_path):
    trees, df = run(convs, tmp_path, "{query}")  # an echoing compactor: a cut transcript
    summ = df.filter(pl.col("condition") == "warm_summary_only")
    verb = df.filter(pl.col("condition") == "warm_memory_only")
    # every answer saw its user's whole view (all within the tree's budget), summaries included
    for r in summ.iter_rows(named=True):
        view = {h.memory.id for h in trees.view(r["sample_id"])}
        assert set(r["memory_ids"]) == view
        lines = r["compacted_text"].split("\n")  # one line per summary in the view
        assert len(lines) == len(trees.trees[r["sample_id"]].roots)
        assert all("] Summary: " in line for line in lines)
    assert summ["evidence_compacted"].drop_nulls().len() > 0
    assert verb["evidence_compacted"].null_count() == verb.height  # verbatim: not applicable
    # the compaction is priced once per user, spread over that user's questions
    stats = trees.stats()
    assert summ["compaction_eff_cost"].sum() == pytest.approx(stats["compaction_eff_cost"])
    assert summ["compaction_calls"].sum() == pytest.approx(stats["compaction_calls"])
    assert (verb["compaction_eff_cost"] == 0).all()
    # ... at production prices too: P = 8 instead of the stand-in's 0.5
    assert summ["compaction_eff_cost_prod"].sum() == pytest.approx(16 * stats["compaction_eff_cost"])
    table = summary(df, CONDS).filter(pl.col("condition") == "warm_summary_only")
    assert table["EffCost+compaction"].item() == pytest.approx(
        round(summ["eff_cost"].sum() + stats["compaction_eff_cost"]), abs=1)
    assert (tmp_path / TREES_FILE).exists()


def test_a_compactor_that_drops_the_details_makes_compacted_away_failures(convs, tmp_path):
    _, df = run(convs, tmp_path, "The user chatted about various things.")
    summ = df.filter(pl.col("condition") == "warm_summary_only")
    lost = summ.filter(pl.col("cause") == "compacted_away")
    assert lost.height > 0
    assert lost["evidence_compacted"].all()  # only where the evidence was inside a summary
    assert (df.filter(pl.col("condition") == "warm_memory_only")["cause"] != "compacted_away").all()


def test_the_summary_conditions_need_the_trees(convs):
    retriever = FakeRetriever()
    dia = ingest(convs, retriever)
    with pytest.raises(ConfigError, match="warm_summary_only") as err:
        run_conditions(convs, tiers("x"), retriever, RouterConfig(), RetrievalConfig(),
                       ["warm_summary_only"], memory_dia_ids=dia, progress=False)
    assert err.value.field == "conditions"


def test_the_report_says_which_fact_types_the_compaction_lost(convs, tmp_path):
    from memroute.eval.summary_run import compaction_section, lost_by_group

    trees, df = run(convs, tmp_path, "The user chatted about various things.")
    lost = lost_by_group(df, "fact_type")
    assert lost["condition"].unique().to_list() == ["warm_summary_only"]
    summ = df.filter(pl.col("condition") == "warm_summary_only")
    assert lost["n"].sum() == summ.height
    assert lost["compacted_away"].sum() == (summ["cause"] == "compacted_away").sum() > 0
    head, table = compaction_section(trees, df, "fact_type")
    assert f"{trees.stats()['compaction_calls']} compaction calls" in head
    assert "per fact_type" in table
