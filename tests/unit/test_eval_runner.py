"""run_conditions + report on fakes: conditions pick the right tiers and the tables add up."""

import polars as pl
import pytest

from memroute.accounting.cost import Pricing
from memroute.config import RetrievalConfig, RouterConfig
from memroute.errors import ConfigError
from memroute.eval.benchmark import ingest, run_conditions
from memroute.datasets.locomo import load_locomo
from memroute.eval.report import f1_by, predictions_frame, summary
from memroute.datasets.generate.synthetic import generate, write_json
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
        # "all": the keyword fake retrieves on shared stopwords, which the subject filter drops
        convs, tiers, retriever, RouterConfig(tau=0.5, first_tier_memories="all"),
        RetrievalConfig(), CONDS, memory_dia_ids=dia, batch_size=4, progress=False,
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


# -- full_context_large -------------------------------------------------------------------------


def test_full_context_gives_the_last_tier_the_whole_history_as_base_prompt(setup, tmp_path):
    _, retriever, _, tiers = setup
    write_json(generate(num_users=2, sessions_per_user=3, seed=1), tmp_path / "two.json")
    convs = load_locomo(tmp_path / "two.json")  # both users
    dia = ingest(convs, FakeRetriever())
    small, large = tiers[0].backend, tiers[1].backend
    rows, timings = run_conditions(
        convs, tiers, retriever, RouterConfig(tau=0.5), RetrievalConfig(), ["full_context_large"],
        memory_dia_ids=dia, batch_size=4, progress=False, context_tokens=[4096, 100_000],
    )
    df = predictions_frame(rows, {"small": 8.0, "large": 235.0})
    assert len(convs) == 2 and df.height == sum(len(c.qa) for c in convs)
    assert timings[0].condition == "full_context_large"
    assert small.prompts == []  # the last tier only, no routing
    assert (~df["on_small"]).all() and (~df["escalated"]).all()
    # history is base prompt, not injected memory; no memory block
    assert (df["injected_tokens"] == 0).all() and (df["memory_bytes"] == 0).all() and (df["memories"] == 0).all()
    assert (df["base_tokens"] == df["input_tokens"]).all()
    # the whole conversation: every turn, evidence in the prompt
    for conv in convs:
        sub = df.filter(pl.col("sample_id") == conv.sample_id)
        assert (sub["history_turns"] == conv.num_turns).all() and (sub["history_turns_total"] == conv.num_turns).all()
        all_dia = sorted(t.dia_id for s in conv.sessions for t in s.turns)
        assert sub["injected_dia_ids"].to_list() == [all_dia] * sub.height
    assert df.filter(pl.col("evidence").list.len() > 0)["evidence_injected"].all()
    # conversation by conversation: one shared system message each, the question alone after it
    assert [p[1].content for p in large.prompts] == [qa.question for c in convs for qa in c.qa]
    lo, systems = 0, []
    for conv in convs:
        prompts = large.prompts[lo : lo + len(conv.qa)]
        lo += len(conv.qa)
        assert all([m.role for m in p] == ["system", "user"] for p in prompts)
        systems.append({p[0].content for p in prompts})
        assert len(systems[-1]) == 1 and conv.sessions[-1].turns[-1].text in next(iter(systems[-1]))
    assert systems[0] != systems[1]


def test_full_context_trims_to_the_window_and_records_what_was_given(setup):
    convs, retriever, dia, tiers = setup
    rows, _ = run_conditions(
        convs, tiers, retriever, RouterConfig(), RetrievalConfig(), ["full_context_large"],
        memory_dia_ids=dia, progress=False, context_tokens=[4096, 400],
    )
    df = predictions_frame(rows, {})
    assert (df["history_turns"] < df["history_turns_total"]).all() and (df["history_tokens"] > 0).all()
    assert (df["input_tokens"] + 32 <= 400).all()  # max_tokens 32 still fits the window
    # the evidence of an old turn was trimmed away: not in the prompt
    assert (~df.filter(pl.col("evidence").list.len() > 0)["evidence_injected"]).any()


def test_full_context_needs_the_context_windows(setup):
    convs, retriever, dia, tiers = setup
    with pytest.raises(ConfigError, match="max_model_len") as err:
        run_conditions(convs, tiers, retriever, RouterConfig(), RetrievalConfig(), ["full_context_large"],
                       memory_dia_ids=dia, progress=False)
    assert err.value.field == "conditions"


# -- LongMemEval-format set -------------------------------------------------------------------


@pytest.fixture
def lme(tmp_path):
    from memroute.config import DatasetConfig
    from memroute.datasets.registry import dataset_conversations

    return dataset_conversations(DatasetConfig(name="longmemeval", size="small", seed=0), tmp_path)


def test_longmemeval_set_is_one_user_per_question_with_dated_questions(lme):
    from memroute.datasets.longmemeval import QUESTION_TYPES

    assert len(lme) == 12 and all(len(c.qa) == 1 for c in lme)
    assert len({c.sample_id for c in lme}) == 12
    for conv in lme:
        qa = conv.qa[0]
        assert qa.question.startswith("[Current date: ") and all(r.pair.user_id == conv.sample_id for r in conv.records)
        # history sessions are chronological; every turn's key names a stored turn-pair
        keys = {k for r in conv.records for k in r.dia_ids}
        assert {t.key for s in conv.history for t in s.turns} == keys
        if qa.qid.endswith("_abs"):
            assert qa.category == 5 and qa.fact_type == "abstention" and qa.evidence == ()
        else:
            assert qa.category is None and qa.fact_type in QUESTION_TYPES and set(qa.evidence) <= keys and qa.evidence
    assert any(c.qa[0].fact_type == "abstention" for c in lme)


def test_longmemeval_question_types_keep_only_those_types(tmp_path):
    from memroute.config import DatasetConfig
    from memroute.datasets.registry import dataset_conversations

    cfg = DatasetConfig(name="longmemeval", size="small", seed=0,
                        question_types=["knowledge-update", "temporal-reasoning"])
    kept = dataset_conversations(cfg, tmp_path)
    types = {c.qa[0].qid: c.qa[0].fact_type for c in kept}
    assert kept and set(types.values()) <= {"knowledge-update", "temporal-reasoning", "abstention"}
    assert "knowledge-update" in types.values()
    with pytest.raises(ConfigError) as err:
        dataset_conversations(DatasetConfig(name="longmemeval", size="small",
                                            question_types=["knowledge_update"]), tmp_path)
    assert err.value.field == "dataset.question_types" and "knowledge-update" in str(err.value)


def test_longmemeval_runs_under_every_condition_with_per_type_groups(lme):
    retriever = FakeRetriever()
    dia = ingest(lme, retriever)
    assert len(retriever.pairs) == sum(len(c.records) for c in lme)
    small = FakeBackend("small", answer="not mentioned", logprob=-0.1)
    large = FakeBackend("large", answer="Lisbon", logprob=-0.1)
    tiers = [Tier("small", small, Pricing(0.5)), Tier("large", large, Pricing(1.5))]
    conds = [*CONDS, "full_context_large"]
    rows, _ = run_conditions(lme, tiers, retriever, RouterConfig(), RetrievalConfig(), conds,
                             memory_dia_ids=dia, batch_size=5, progress=False, context_tokens=[4096, 32768])
    df = predictions_frame(rows, {}).with_columns(pl.col("category").cast(pl.Int64))
    assert df.height == 12 * len(conds)
    # abstention: LoCoMo category-5 rule ("not mentioned" is right, anything else wrong)
    abst = df.filter(pl.col("fact_type") == "abstention")
    assert abst.height and (abst.filter(pl.col("on_small"))["f1"] == 1.0).all()
    assert (abst.filter(~pl.col("on_small"))["f1"] == 0.0).all()
    assert abst["evidence_injected"].is_null().all()  # no gold: never "not retrieved"
    # warm memory hits the has_answer pairs by their keys
    warm = df.filter((pl.col("condition") == "warm_memory_only") & (pl.col("fact_type") != "abstention"))
    assert warm["evidence_injected"].any()
    wide = f1_by(df, "fact_type", conds)
    assert "abstention" in wide.columns and "multi-session" in wide.columns


def test_only_the_tiers_of_the_selected_conditions_are_needed():
    from memroute.eval.run import needed_tiers

    assert needed_tiers(["warm_memory_only"], 2) == {0}
    assert needed_tiers(["cold_large", "full_context_large"], 3) == {2}
    assert needed_tiers(["cold_small", "warm_compound"], 3) == {0, 1, 2}
    with pytest.raises(ConfigError, match="warm_everything") as err:
        needed_tiers(["warm_memory_only", "warm_everything"], 2)
    assert err.value.field == "conditions"


def test_an_unloaded_tier_fails_loudly_if_called_anyway(setup):
    from memroute.build import UnusedBackend

    convs, retriever, dia, tiers = setup
    unused = UnusedBackend("large")
    tiers = [tiers[0], Tier("large", unused, Pricing(1.5))]
    rows, _ = run_conditions(  # the first tier alone: the placeholder is never touched
        convs, tiers, retriever, RouterConfig(tau=0.5), RetrievalConfig(), ["warm_memory_only"],
        memory_dia_ids=dia, batch_size=4, progress=False,
    )
    assert len(rows) == 6
    with pytest.raises(RuntimeError, match="not loaded"):
        run_conditions(
            convs, tiers, retriever, RouterConfig(tau=0.5), RetrievalConfig(), ["cold_large"],
            memory_dia_ids=dia, batch_size=4, progress=False,
        )
    unused.close()  # a no-op, as run_benchmark closes every tier
