"""The replay's memroute_summary strategy on mock tiers: the tree is the memory, each request pays
for the compaction its stored turn caused, and a resumed run continues the saved trees."""

from __future__ import annotations

import pytest

from memroute import build
from memroute.config import ModelConfig, RetrievalConfig, RouterConfig
from memroute.config.replay import ReplayConfig, check_replay_config
from memroute.config.summary import SummaryConfig
from memroute.datasets.records import TraceRequest
from memroute.errors import ConfigError
from memroute.eval.replay.driver import Checkpoint, replay_strategy
from memroute.eval.replay.outcome import TierPrice
from memroute.eval.replay.run import summary_memory
from memroute.eval.replay.strategies import STRATEGIES, StrategyParts, needs_memory, needs_summary
from memroute.types import Message

COMPACT = {"match": "^Compact this", "answer": "The user's locker code is ZX-4471."}
SMALL = ModelConfig(name="small", engine="mock", params_b=0.5, price_as_params_b=8.0,
                    engine_args={"logprob": -2.9, "answer": "no idea",
                                 "rules": [COMPACT, {"memories": True, "logprob": -0.05}]})
LARGE = ModelConfig(name="large", engine="mock", params_b=8.0, price_as_params_b=235.0,
                    engine_args={"logprob": -0.01, "answer": "ZX-4471"})
CFG = SummaryConfig(budget_tokens=200, node_tokens=40, leaf_trigger_tokens=120)


def trace(sessions: int = 6) -> list[TraceRequest]:
    rows = []
    for s in range(sessions):  # one question per session: each new session closes the last
        for u in ("alice", "bob"):
            i = len(rows)
            rows.append(TraceRequest(f"r{i}", 1_700_000_000 + 86_400 * s, "acme", u, f"{u}-s{s}",
                                     (Message("user", "What is my locker code?"),), ("ZX-4471",),
                                     kind="novel" if s == 0 else "repeat", fact_id="f1",
                                     domain="personal"))
    return rows


@pytest.fixture
def tiers():
    return build.tiers([SMALL, LARGE], None)


def parts(tiers, path):
    prices = [TierPrice(m.params_b, m.price_as_params_b or m.params_b) for m in (SMALL, LARGE)]
    return StrategyParts(tiers, prices, RouterConfig(tau=0.5), RetrievalConfig(), None,
                         summary=summary_memory(CFG, tiers, path), summary_file=path)


def test_each_request_pays_for_the_compaction_its_turn_caused(tmp_path, tiers):
    p = parts(tiers, tmp_path / "trees.json")
    strategy = STRATEGIES.get("memroute_summary")("memroute_summary", p)
    rows = replay_strategy(strategy, trace(), Checkpoint(tmp_path / "rows.jsonl"), concurrency=2)
    tree = p.summary
    stats = tree.stats()
    assert stats["compaction_calls"] == sum(r["compaction_calls"] for r in rows) > 0
    assert sum(r["compaction_eff_cost"] for r in rows) == pytest.approx(stats["compaction_eff_cost"])
    for r in rows:  # compaction is in the request's cost, priced by the compacting tier (slot 0)
        if r["compaction_calls"]:
            assert r["compaction_eff_cost_prod"] == pytest.approx(16 * r["compaction_eff_cost"])
            assert r["eff_cost"] >= r["compaction_eff_cost"] > 0
    # the first session's turn is compacted when the second starts; later questions see the
    # summary (its covered turn-pair ids count as evidence) and the small model answers
    later = [r for r in rows if r["session_id"].endswith(("-s2", "-s3", "-s4", "-s5"))]
    assert all(r["evidence_hit"] for r in later)
    assert all(r["tier"] == 0 and not r["escalated"] for r in later)
    assert (tmp_path / "trees.json").exists()


def test_a_resumed_run_continues_the_saved_trees(tmp_path, tiers):
    path = tmp_path / "trees.json"
    first = parts(tiers, path)
    replay_strategy(STRATEGIES.get("memroute_summary")("memroute_summary", first), trace(3),
                    Checkpoint(tmp_path / "rows.jsonl"))
    again = parts(tiers, path)  # loads the file
    assert {u: t.to_dict() for u, t in again.summary.trees.items()} == {
        u: t.to_dict() for u, t in first.summary.trees.items()}
    assert again.summary.drain_calls("acme:alice") == []  # already charged to their requests


def test_the_strategy_is_registered_with_its_needs():
    assert needs_summary("memroute_summary") and needs_memory("memroute_summary")
    assert not needs_summary("memroute")


def test_a_bad_summary_setting_is_refused_before_anything_loads():
    cfg = ReplayConfig(trace="t.jsonl", strategies=["memroute_summary"],
                       summary=SummaryConfig(fan_in=1))
    cfg.cascade = {"0": SMALL, "1": LARGE}
    with pytest.raises(ConfigError) as e:
        check_replay_config(cfg)
    assert e.value.field == "summary.fan_in"


def test_the_report_shows_what_compaction_cost(tmp_path, tiers):
    import polars as pl

    from memroute.eval.replay.report import compaction_table, write_report

    p = parts(tiers, tmp_path / "trees.json")
    cp = Checkpoint(tmp_path / "rows.jsonl")
    replay_strategy(STRATEGIES.get("memroute_summary")("memroute_summary", p), trace(), cp)
    replay_strategy(STRATEGIES.get("always_small")("always_small", p), trace(), cp)
    rows = cp.frame()
    table = compaction_table(rows)
    assert table["strategy"].to_list() == ["memroute_summary"]  # the others compact nothing
    assert table["compaction calls"].item() == p.summary.stats()["compaction_calls"]
    share = table["% of EffCost@prod"].item()
    mine = rows.filter(pl.col("strategy") == "memroute_summary")
    assert share == pytest.approx(
        100 * mine["compaction_eff_cost_prod"].sum() / mine["eff_cost_prod"].sum(), abs=0.05)
    report, _ = write_report(rows, tmp_path, window=4)
    assert "Compaction (the summary tree's own calls" in report
