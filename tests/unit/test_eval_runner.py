"""run_conditions + report on fakes: conditions pick the right tiers and the tables add up."""

import polars as pl
import pytest

from memroute.accounting.cost import Pricing
from memroute.config import RetrievalConfig, RouterConfig
from memroute.errors import ConfigError
from memroute.eval.benchmark import ingest, run_conditions
from memroute.eval.datasets.locomo import load_locomo
from memroute.eval.report import f1_by, predictions_frame, summary
from memroute.eval.synthetic import generate, write_json
from memroute.routing.router import Tier

from .fakes import FakeBackend, FakeRetriever

CONDS = ["cold_small", "cold_compound", "warm_memory_only", "warm_compound", "cold_large"]


@pytest.fixture
def setup(tmp_path):
    path = tmp_path / "d.json"
    write_json(generate(num_users=2, sessions_per_user=3, seed=1), path)
    convs = load_locomo(path, limit=6)
    retriever = FakeRetriever()
    dia = ingest(convs, retriever)
    small = FakeBackend("small", answer="no idea", logprob=-2.0)  # c = 0.33 < tau: escalates
    large = FakeBackend("large", answer="no idea at all", logprob=-0.1)
    tiers = [Tier("small", small, Pricing(0.5)), Tier("large", large, Pricing(1.5))]
    return convs, retriever, dia, tiers


def test_conditions_use_the_right_tiers_and_memory(setup):
    convs, retriever, dia, tiers = setup
    rows, timings = run_conditions(
        convs, tiers, retriever, RouterConfig(tau=0.5), RetrievalConfig(), CONDS,
        memory_dia_ids=dia, batch_size=4, progress=False,
    )
    df = predictions_frame(rows, {"small": 8.0, "large": 235.0})
    assert df.height == 6 * len(CONDS) and [t.condition for t in timings] == CONDS
    by = {c: df.filter(pl.col("condition") == c) for c in CONDS}
    assert by["cold_small"]["on_small"].all() and (by["cold_small"]["injected_tokens"] == 0).all()
    assert (~by["cold_large"]["on_small"]).all()
    assert by["warm_compound"]["escalated"].all()  # c = 0.33 < 0.5 everywhere
    assert (by["warm_memory_only"]["injected_tokens"] > 0).all()
    # evaluation does not write answers back into memory
    assert len(retriever.pairs) == len(dia)
    # production pricing: the large tier's tokens priced at 235B
    row = by["cold_large"].row(0, named=True)
    assert row["eff_cost_prod"] == pytest.approx(row["eff_cost"] * 235 / 1.5)

    table = summary(df, CONDS)
    assert table["condition"].to_list() == CONDS
    assert table.filter(pl.col("condition") == "cold_small")["% small"].item() == 100.0
    assert table.filter(pl.col("condition") == "cold_compound")["% small"].item() == 0.0
    wide = f1_by(df, "fact_type", CONDS)
    assert wide.height == len(CONDS) and "condition" in wide.columns


def test_unknown_condition_lists_names(setup):
    convs, retriever, dia, tiers = setup
    with pytest.raises(ConfigError, match="cold_small"):
        run_conditions(convs, tiers, retriever, RouterConfig(), RetrievalConfig(), ["lukewarm"],
                       memory_dia_ids=dia, progress=False)
