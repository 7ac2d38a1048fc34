"""The compacting summary tree on the mock engine: budget kept, every compaction call counted."""

from __future__ import annotations

import pytest

from memroute.accounting.cost import Pricing, eff_cost
from memroute.config.summary import SummaryConfig, check_summary_config
from memroute.errors import ConfigError
from memroute.llm.mock_backend import MockBackend
from memroute.memory.summary import Compactor, SummaryMemory
from memroute.memory.summary.compactor import fit_tokens
from memroute.memory.summary.tree import view_line_tokens
from memroute.types import TurnPair

DAY = 86_400
T0 = 1_683_504_000  # 8 May 2023


def compactor(node_tokens: int = 24, answer: str = "{query}") -> Compactor:
    # the mock "summarizes" by echoing the history it is given, cut at max_tokens
    backend = MockBackend("mock-small", rules=[{"match": "^Compact this", "answer": answer}])
    return Compactor(backend, Pricing(params_b=0.5), tier=0, node_tokens=node_tokens)


def cfg(**kw) -> SummaryConfig:
    base = dict(budget_tokens=120, node_tokens=24, fan_in=2, leaf_trigger_tokens=60)
    return SummaryConfig(**{**base, **kw})


def session(user: str, s: int, turns: int = 3) -> list[TurnPair]:
    return [TurnPair(user, f"s{s}", s * 100 + i, f"In session {s} my code number {i} is C{s}{i}.",
                     f"Noted, code C{s}{i}.", T0 + s * DAY) for i in range(turns)]


def test_the_view_keeps_its_budget_after_every_turn_and_every_call_is_counted():
    mem = SummaryMemory(cfg(), compactor())
    for s in range(12):
        for pair in session("u", s):
            mem.remember([pair])
            assert mem.trees["u"].view_tokens() <= 120
    tree, calls = mem.trees["u"], mem.calls["u"]
    assert len(calls) == len(tree.nodes) > 12  # one call per node: 12 leaves and the merges
    assert max(n.level for n in tree.nodes.values()) >= 2  # merged upward, more than once
    for c in calls:  # each priced as any call: (in + 4*out) * P/8 with the compacting tier's P
        assert c.tier == 0 and c.model_id == "mock-small"
        assert c.eff_cost == pytest.approx(eff_cost(c.input_tokens, c.output_tokens, 0.5))
        assert 0 < c.output_tokens <= 24
    for n in tree.nodes.values():  # each summary fits node_tokens (the compactor's tokenizer)
        assert mem.compactor.count_text_tokens(n.summary) <= 24
    hits = mem.retrieve_many(["u"], ["anything"])[0]
    assert sum(view_line_tokens(h.memory.text, mem.compactor.count_text_tokens) for h in hits) <= 120
    assert [h.memory.session_time for h in hits] == sorted((h.memory.session_time for h in hits),
                                                           reverse=True)  # newest first


def test_a_session_becomes_a_leaf_when_the_next_one_starts_and_covers_its_pairs():
    mem = SummaryMemory(cfg(budget_tokens=400, leaf_trigger_tokens=300), compactor())
    first, second = session("u", 0), session("u", 1)
    mem.remember(first)
    assert mem.calls.get("u", []) == [] and len(mem.view("u")) == 3  # open: verbatim
    mem.remember(second[:1])
    tree = mem.trees["u"]
    (leaf,) = tree.nodes.values()
    assert leaf.level == 0 and leaf.covers == tuple(p.id for p in first)
    assert mem.covers(leaf.id) == leaf.covers and mem.is_summary(leaf.id)
    texts = [h.memory.text for h in mem.view("u")]
    assert texts[-1].startswith("[8 May 2023] Summary: ") and "Q: In session 1" in texts[0]
    assert len(mem.drain_calls("u")) == 1 and mem.drain_calls("u") == []


def test_leaves_merge_lowest_level_first_like_a_binary_counter():
    mem = SummaryMemory(cfg(budget_tokens=100, node_tokens=24, leaf_trigger_tokens=40), compactor())
    for s in range(9):
        mem.remember(session("u", s, turns=1))
    tree = mem.trees["u"]
    levels = [tree.nodes[i].level for i in tree.roots]
    assert levels == sorted(levels, reverse=True)  # older summaries are the more compacted
    for n in tree.nodes.values():
        for child in n.children:  # a parent covers exactly its children, in order
            assert tree.nodes[child].level < n.level
        if n.children:
            assert n.covers == tuple(c for k in n.children for c in tree.nodes[k].covers)


def test_users_compact_in_one_batch_per_round_and_stay_apart():
    backend_calls = []
    comp = compactor()
    inner = comp.backend.generate_many

    def spy(batch, **kw):
        backend_calls.append(len(batch))
        return inner(batch, **kw)

    comp.backend.generate_many = spy  # type: ignore[method-assign]
    mem = SummaryMemory(cfg(budget_tokens=400, leaf_trigger_tokens=300), comp)
    mem.remember(session("a", 0) + session("b", 0))
    mem.remember(session("a", 1)[:1] + session("b", 1)[:1])
    assert backend_calls == [2]  # both users' leaves in one engine call
    assert all(c in {p.id for p in session("a", 0)} for n in mem.trees["a"].nodes.values()
               for c in n.covers)
    assert mem.view("nobody") == []


def test_save_and_load_give_back_the_same_trees_and_calls(tmp_path):
    mem = SummaryMemory(cfg(), compactor())
    for s in range(5):
        mem.remember(session("u", s))
    mem.drain_calls("u")
    mem.save(tmp_path / "tree.json")
    again = SummaryMemory(cfg(), compactor())
    again.load(tmp_path / "tree.json")
    assert again.trees["u"].to_dict() == mem.trees["u"].to_dict()
    assert again.calls == mem.calls and again.drain_calls("u") == []
    assert [h.memory.text for h in again.view("u")] == [h.memory.text for h in mem.view("u")]


def test_fit_tokens_cuts_at_a_word_to_the_limit():
    count = compactor().count_text_tokens
    text = " ".join(f"word{i}" for i in range(50))
    cut = fit_tokens(text, 10, count)
    assert count(cut) <= 10 and text.startswith(cut) and cut


@pytest.mark.parametrize("kw, field", [
    ({"budget_tokens": 40, "node_tokens": 24}, "summary.budget_tokens"),
    ({"fan_in": 1}, "summary.fan_in"),
    ({"leaf_trigger_tokens": 110}, "summary.leaf_trigger_tokens"),
    ({"node_tokens": 0}, "summary.node_tokens"),
    ({"tier": 2}, "summary.tier"),
])
def test_a_bad_setting_is_refused_naming_it(kw, field):
    with pytest.raises(ConfigError) as e:
        check_summary_config(cfg(**kw), n_tiers=2)
    assert e.value.field == field
