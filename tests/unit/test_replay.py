"""Replay core on mock tiers and the keyword fake retriever: waves keep per-user order, every
strategy answers, memory lowers escalations over time, a killed replay resumes without resending,
and the report's windows, ratios and break-even add up."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from memroute import build
from memroute.config import ModelConfig, RetrievalConfig, RouterConfig
from memroute.datasets.records import TraceRequest
from memroute.eval.replay.driver import Checkpoint, replay_strategy, waves
from memroute.eval.replay.outcome import CACHE_TIER, TierPrice
from memroute.eval.replay.report import break_even, write_report
from memroute.eval.replay.scoring import holds_value, memory_id
from memroute.eval.replay.strategies import (
    STRATEGIES,
    Routed,
    StrategyParts,
    needs_memory,
    route_request,
)
from memroute.types import Message

from .fakes import FakeRetriever

# The small mock is sure of itself only with memories in its prompt; the large one always is.
SMALL = ModelConfig(name="small", engine="mock", params_b=0.5, price_as_params_b=8.0,
                    engine_args={"logprob": -2.9, "rules": [{"memories": True, "logprob": -0.05}],
                                 "memory_answer": "{memory_a}", "answer": "no idea"})
LARGE = ModelConfig(name="large", engine="mock", params_b=8.0, price_as_params_b=235.0,
                    engine_args={"logprob": -0.01, "answer": "ZX-4471"})


def req(i: int, user: str, text: str, *, kind: str = "novel", fact: str | None = "f1",
        refs: tuple[str, ...] = ("ZX-4471",), stale: tuple[str, ...] = ()) -> TraceRequest:
    return TraceRequest(f"r{i}", 1_700_000_000 + 60 * i, "acme", user, f"{user}-d1",
                        (Message("user", text),), refs, stale, kind=kind, fact_id=fact,
                        domain="personal")


def trace(n_repeats: int = 6) -> list[TraceRequest]:
    rows = []
    for u in ("alice", "bob"):
        rows.append(req(len(rows), u, "What is my locker code?"))  # no memory yet: escalates
    for k in range(n_repeats):
        for u in ("alice", "bob"):
            rows.append(req(len(rows), u, "What is my locker code?", kind="repeat"))
    return rows


@pytest.fixture
def parts():
    tiers = build.tiers([SMALL, LARGE], None)
    prices = [TierPrice(m.params_b, m.price_as_params_b or m.params_b) for m in (SMALL, LARGE)]

    def make(retriever=None, encoder=None) -> StrategyParts:
        return StrategyParts(tiers, prices, RouterConfig(tau=0.5), RetrievalConfig(),
                             retriever, encoder=encoder, cache_threshold=0.9)
    return make


def test_waves_keep_each_users_order_and_the_size_limit():
    t = [req(i, u, "q") for i, u in enumerate(["a", "b", "a", "c", "d", "e", "b"])]
    got = [[seq for seq, _ in w] for w in waves(enumerate(t), 3)]
    assert got == [[0, 1], [2, 3, 4], [5, 6]]
    flat = [s for w in got for s in w]
    assert flat == sorted(flat)


def test_memroute_escalates_less_once_memory_holds_the_answer(tmp_path, parts):
    strategy = STRATEGIES.get("memroute")("memroute", parts(FakeRetriever()))
    rows = replay_strategy(strategy, trace(), Checkpoint(tmp_path / "rows.jsonl"), concurrency=2)
    assert [r["escalated"] for r in rows[:2]] == [True, True]  # cold: the large model answers
    assert not any(r["escalated"] for r in rows[2:])  # its answer is now a memory of the user
    assert all(r["tier"] == 0 for r in rows[2:]) and rows[2]["answer"] == "ZX-4471"
    assert rows[2]["evidence_hit"] is True and rows[0]["evidence_hit"] is None
    # The first answer's memory id is known in advance (deterministic turn-pair id).
    assert rows[0]["user_id"] == "acme:alice"
    assert memory_id("acme:alice", "alice-d1", 0) in rows[2]["memory_ids"]
    assert rows[2]["eff_cost"] < rows[0]["eff_cost"]
    assert rows[0]["eff_cost_prod"] > rows[0]["eff_cost"]  # priced as the production pair


def test_baselines_answer_every_request_their_way(tmp_path, parts):
    cp = Checkpoint(tmp_path / "rows.jsonl")
    t = trace(2)
    by = {}
    for name in ("always_small", "always_large", "cascade_no_memory"):
        by[name] = replay_strategy(STRATEGIES.get(name)(name, parts()), t, cp)
    assert {r["tier"] for r in by["always_small"]} == {0}
    assert {r["tier"] for r in by["always_large"]} == {1}
    assert all(r["escalated"] for r in by["cascade_no_memory"])  # never confident without memory
    assert all(r["memories"] == 0 and r["evidence_hit"] is None for rs in by.values() for r in rs)


def test_needs_memory_is_the_built_strategys_stores_memory(parts, monkeypatch):
    """The run picks which strategies get a memory store before building them: that choice is
    read from the builder, the same flag the built strategy carries, never a list of names."""
    monkeypatch.setitem(STRATEGIES._items, "memroute_copy", Routed("all", stores_memory=True,
                                                                   routing=True))
    for name in STRATEGIES.names():
        p = replace(parts(FakeRetriever(), encoder=lambda texts: np.ones((len(texts), 4))),
                    facts=lambda user: [], summary=object())
        assert STRATEGIES.get(name)(name, p).stores_memory is needs_memory(name), name
    assert {n for n in STRATEGIES.names() if needs_memory(n)} == {
        "memroute", "memroute_facts", "memroute_summary", "memroute_copy"}


def test_semantic_cache_reuses_answers_and_serves_stale_ones(tmp_path, parts):
    def encode(texts):  # one direction per distinct text: only exact repeats hit
        return np.stack([np.eye(8)[hash(t) % 8] for t in texts])

    t = [req(0, "alice", "What is my locker code?"),
         req(1, "alice", "What is my locker code?", kind="repeat"),
         req(2, "alice", "What is my locker code?", kind="repeat", refs=("QQ-1",), stale=("ZX-4471",))]
    rows = replay_strategy(STRATEGIES.get("semantic_cache")("semantic_cache", parts(encoder=encode)), t,
                           Checkpoint(tmp_path / "rows.jsonl"))
    assert [r["cache_hit"] for r in rows] == [False, True, True]
    assert rows[1]["tier"] == CACHE_TIER and rows[1]["eff_cost"] == 0
    assert rows[2]["answer"] == "ZX-4471" and rows[2]["stale"] is True  # the cache cannot know
    assert rows[2]["value_hit"] is False and rows[0]["value_hit"] is not None


def test_a_killed_replay_resumes_without_resending(tmp_path, parts):
    t = trace(3)
    path = tmp_path / "rows.jsonl"

    class Killed(Exception):
        pass

    sent: list[str] = []
    retriever = FakeRetriever()
    strategy = STRATEGIES.get("memroute")("memroute", parts(retriever))
    inner = strategy.answer_many

    def counting(wave):
        sent.extend(r.request_id for _, r in wave)
        return inner(wave)

    strategy.answer_many = counting
    calls = {"n": 0}

    def kill_after_two_waves(rows):
        calls["n"] += 1
        if calls["n"] == 2:
            raise Killed

    with pytest.raises(Killed):
        replay_strategy(strategy, t, Checkpoint(path), concurrency=2, on_wave=kill_after_two_waves)
    assert len(Checkpoint(path).rows) == 4
    rows = replay_strategy(strategy, t, Checkpoint(path), concurrency=2)
    assert len(sent) == len(set(sent)) == len(t)  # nothing sent twice
    assert sorted(r["request_id"] for r in rows) == sorted(r.request_id for r in t)
    assert len({p.id for p in retriever.pairs}) == len(retriever.pairs) == len(t)


def test_a_line_cut_by_the_kill_is_dropped(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"strategy": "s", "request_id": "r0"}) + "\n" + '{"strategy": "s", "req')
    assert Checkpoint(path).done == {("s", "r0")}


def test_route_request_uses_the_namespace_session_and_row_number():
    r = route_request(7, req(7, "alice", "hi"))
    assert (r.user_id, r.session_id, r.turn_index, r.query) == ("acme:alice", "alice-d1", 7, "hi")


def _rows(costs: dict[str, list[float]]) -> pl.DataFrame:
    recs = []
    for s, cs in costs.items():
        for i, c in enumerate(cs):
            recs.append({"strategy": s, "seq": i, "eff_cost": c, "eff_cost_prod": c, "usd": c / 100,
                         "escalated": c > 5, "f1": 0.5, "evidence_hit": None, "stale": None,
                         "latency_s": 0.1, "kind": "repeat", "domain": "personal"})
    return pl.DataFrame(recs)


def test_break_even_is_where_memroute_stays_below():
    rows = _rows({"memroute": [10, 10, 1, 1, 1, 1], "always_large": [5, 5, 5, 5, 5, 5]})
    # cumulative: 10 20 21 22 23 24 vs 5 10 15 20 25 30 -> at or below from request 4 on
    assert break_even(rows, "always_large") == 4
    assert break_even(_rows({"memroute": [9, 9], "always_small": [1, 1]}), "always_small") is None


def test_report_windows_and_first_last_ratio(tmp_path):
    rows = _rows({"memroute": [10, 1, 1, 1], "always_large": [5, 5, 5, 5]})
    report, files = write_report(rows, tmp_path, window=2)
    win = pl.read_csv(tmp_path / "windows.csv")
    m = win.filter(pl.col("strategy") == "memroute").sort("window")
    assert m["EffCost/req"].to_list() == [5.5, 1.0] and m["esc %"].to_list() == [50.0, 0.0]
    # cumulative 10 11 12 13 vs 5 10 15 20: at or below from request 2 on
    assert "vs always_large: from request 2" in report
    assert "| memroute | 50.0 | 0.0 | 0.0 |" in report  # esc % first, last, last/first
    assert all((tmp_path / f).is_file() for f in files)
    # rows from before the value measure still report, with an empty column
    assert "value %" in win.columns and win["value %"].null_count() == win.height


def test_a_line_cut_by_a_kill_never_hides_the_rows_appended_after_the_resume(tmp_path):
    path = tmp_path / "rows.jsonl"
    first = Checkpoint(path)
    first.append([{"strategy": "memroute", "request_id": f"r{i}", "seq": i, "f1": None} for i in range(3)])
    with path.open("a") as fh:  # the kill: half a row, no newline
        fh.write('{"strategy": "memroute", "request_id": "r3", "se')
    resumed = Checkpoint(path)
    assert resumed.done == {("memroute", f"r{i}") for i in range(3)}  # r3 is redone
    resumed.append([{"strategy": "memroute", "request_id": "r3", "seq": 3, "f1": 0.5}])
    again = Checkpoint(path)
    assert again.done == {("memroute", f"r{i}") for i in range(4)}
    assert [r["seq"] for r in again.iter_rows("memroute")] == [0, 1, 2, 3]
    frame = again.frame()  # read columnar from the file; nulls and floats in one column
    assert frame["seq"].to_list() == [0, 1, 2, 3] and frame["f1"].to_list() == [None, None, None, 0.5]


def test_session_history_sends_each_sessions_earlier_turns_and_the_cache_reuses_them(
        tmp_path, parts):
    """replay.session_history: a request carries its session's earlier questions and this
    strategy's answers; another session starts empty. With the memories before the question
    (router.memory_position), the conversation is a prefix the cache reuses."""
    t = trace(3)
    t.append(replace(req(len(t), "alice", "What is my locker code?"), session_id="alice-d2"))
    p = replace(parts(FakeRetriever()), session_history=True,
                router=RouterConfig(tau=0.5, memory_position="before_question"))
    rows = replay_strategy(STRATEGIES.get("memroute")("memroute", p), t,
                           Checkpoint(tmp_path / "rows.jsonl"), concurrency=2)
    alice = [r for r in rows if r["user_id"] == "acme:alice"]
    history = [r["tokens_history"] for r in alice]
    assert history[0] == 0 and history[-1] == 0  # a session's first request; a new session
    assert history[1] > 0 and history[1] < history[2] < history[3]  # the session grows
    assert alice[3]["tokens_cached"] > alice[1]["tokens_cached"]
    off = replay_strategy(STRATEGIES.get("memroute")("memroute", parts(FakeRetriever())), t,
                          Checkpoint(tmp_path / "off.jsonl"), concurrency=2)
    assert all(r["tokens_history"] == 0 for r in off)  # the default: the question alone


def test_a_right_value_said_in_a_sentence_holds_the_value():
    assert holds_value("Our wedding budget is $19,500.", ("19,500",)) is True
    assert holds_value("19500", ("$19,500",)) is True
    assert holds_value("Our wedding budget is $19,000.", ("19,500",)) is False
    assert holds_value("NQ-1391", ("NJ-1391",)) is False  # a code is compared whole
    assert holds_value("Lyon", ("Galway", "Lyon")) is True  # any one reference
    assert holds_value("anything", ()) is None
