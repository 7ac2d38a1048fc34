"""Prompt layout for prefix caching (issue 28.3): ``router.memory_position=before_question`` puts
the per-question memories after everything that repeats across a user's requests; prefix-cache
hits are counted per call (engine-reported, or from token ids), reported in ``usage``, and
cached input is priced at the tier's ``cached_input_discount``."""

from __future__ import annotations

import polars as pl
import pytest

from memroute.accounting.cost import Pricing, eff_cost
from memroute.api.responses import memroute_report, usage
from memroute.config import RetrievalConfig, RouterConfig
from memroute.errors import ConfigError
from memroute.eval.replay.outcome import TierPrice, from_route_result
from memroute.eval.replay.report import prefix_cache_table
from memroute.llm.mock_backend import MockBackend
from memroute.llm.openai_wire import reported_cached
from memroute.llm.prefix_cache import PrefixCounter
from memroute.routing.prompt import MEMORY_HEADER, MemoryLayout, build_messages, memory_layout
from memroute.routing.router import RouteRequest, Router, Tier
from memroute.types import Memory, Message, RetrievalHit, TurnPair

from .fakes import FakeRetriever

QUESTION = "Where does my sister live?"
TURNS = (Message("user", "Who is my sister?"), Message("assistant", "Ana."),
         Message("user", "What does she do for a living?"), Message("assistant", "She sails."))


def hit(text: str = "My sister Ana lives in Lisbon.") -> RetrievalHit:
    pair = TurnPair("alice", "s0", 0, text, "Noted.", 1_683_500_000)
    return RetrievalHit(Memory(pair.id, "alice", pair.text(), pair.session_time, "s0"), 1.0)


# ------------------------------------------------------------------------------ the counter

def test_the_counter_serves_whole_leading_blocks_seen_before_and_never_the_last_token():
    c = PrefixCounter(block_size=4)
    assert c.cached(list(range(10))) == 0  # nothing seen yet
    assert c.cached(list(range(10))) == 8  # blocks [0:4], [4:8]; [8:9] is no full block
    assert c.cached(list(range(8))) == 4  # the last token is computed: 7 tokens, one block
    assert c.cached([*range(6), 99, 98, 97]) == 4  # diverges inside the second block
    assert c.cached([1, *range(1, 10)]) == 0  # the same tokens after another first block


def test_the_counter_is_bounded_like_the_engines_kv_pool():
    c = PrefixCounter(block_size=2, max_blocks=2)
    c.cached([1, 2, 3, 4, 5])
    c.cached([7, 8, 9, 10, 11])  # evicts the first prompt's blocks
    assert c.cached([1, 2, 3, 4, 5]) == 0


# ------------------------------------------------------------------------------ the layout

def test_before_question_puts_the_memories_right_before_the_question():
    layout = MemoryLayout(position="before_question")
    msgs = build_messages("SYS", QUESTION, [hit()], TURNS, facts="FACTS", layout=layout)
    assert msgs[0] == Message("system", "SYS\n\nFACTS")  # what repeats: first
    assert msgs[1:5] == list(TURNS)
    assert msgs[5].role == "system" and msgs[5].content.startswith(MEMORY_HEADER)
    assert "Lisbon" in msgs[5].content
    assert msgs[6] == Message("user", QUESTION)
    # without memories no empty message
    assert build_messages("SYS", QUESTION, [], TURNS, layout=layout)[-2:] == [TURNS[-1],
                                                                              msgs[6]]


def test_the_default_layout_is_unchanged():
    msgs = build_messages("SYS", QUESTION, [hit()], TURNS, facts="FACTS")
    assert msgs[0].content.startswith("SYS\n\nFACTS\n\n" + MEMORY_HEADER)
    assert msgs[1:] == [*TURNS, Message("user", QUESTION)]


def test_an_unknown_position_is_refused_naming_the_field():
    with pytest.raises(ConfigError) as err:
        memory_layout(RouterConfig(memory_position="first"))
    assert err.value.field == "router.memory_position"


FRIENDS = [("Ana", "plays chess"), ("Bea", "grows tomatoes"), ("Dan", "bakes bread"),
           ("Fay", "sings opera"), ("Gus", "flies kites"), ("Hal", "knits scarves")]


def conversation(position: str) -> list:
    """Six turns of one conversation, each question with another memory, on a mock tier."""
    backend = MockBackend("t0")
    retriever = FakeRetriever()
    retriever.remember([TurnPair("alice", "s0", i, f"{name} {does}.", "Noted.", 1_683_500_000 + i)
                        for i, (name, does) in enumerate(FRIENDS)])
    router = Router([Tier("t0", backend, Pricing(8.0, cached_input_discount=0.5))],
                    RouterConfig(tau=0.0, max_tokens=8, memory_position=position,
                                 store_answers=False),
                    RetrievalConfig(top_k=1), retriever)
    out, history = [], []
    for _, does in FRIENDS:
        q = f"Which of my friends {does.split()[0]} anything, as far as you remember it?"
        [res] = router.route_many([RouteRequest("alice", q, history=tuple(history))])
        out.append(res)
        history += [Message("user", q), Message("assistant", res.answer)]
    return out


def test_the_new_layout_lets_the_cache_reuse_the_conversation_and_attribution_stays_exact():
    old, new = conversation("system"), conversation("before_question")
    for results in (old, new):
        for res in results:
            [call] = res.calls
            assert call.injected_tokens > 0 and call.cached_tokens <= call.input_tokens
    # Turn k reuses the system prompt and turns 1..k-2 in the new layout (the previous prompt
    # had them before its memories), the system prompt and the memory header in the old one.
    cached = [[r.calls[0].cached_tokens for r in rs] for rs in (old, new)]
    # (the old layout's memory header is a longer shared prefix than 1-2 short turns here)
    assert all(n > o + 16 for o, n in zip(cached[0][4:], cached[1][4:])), cached
    assert len(set(cached[0][1:])) == 1, cached  # the old layout never reuses the history
    assert all(b > a for a, b in zip(cached[1][2:], cached[1][3:])), cached  # grows with turns
    # same tokens either way: the layout moves the memories, it adds nothing
    for a, b in zip(old, new):
        ca, cb = a.calls[0], b.calls[0]
        assert (ca.base_prompt_tokens, ca.history_tokens) == (cb.base_prompt_tokens,
                                                              cb.history_tokens)
        assert abs(ca.injected_tokens - cb.injected_tokens) <= 8  # one more message's markers


def test_the_cache_discount_changes_effcost_as_configured():
    res = conversation("before_question")[-1]
    [call] = res.calls
    assert call.cached_tokens > 0
    full = eff_cost(call.input_tokens, call.output_tokens, 8.0)
    assert call.eff_cost == pytest.approx(full - 0.5 * call.cached_tokens * 8.0 / 8.0)
    assert Pricing(8.0).eff_cost(call.input_tokens, call.output_tokens, call.cached_tokens) == \
        pytest.approx(full)  # no discount: cached tokens cost whole
    with pytest.raises(ValueError):
        eff_cost(10, 1, 8.0, cached_tokens=11)


def test_usage_and_the_report_carry_the_cached_tokens_and_the_replay_prices_them():
    res = conversation("before_question")[-1]
    cached = res.calls[0].cached_tokens
    assert usage(res)["prompt_tokens_details"] == {"cached_tokens": cached}
    assert memroute_report(res)["tokens"]["cached"] == cached
    price = TierPrice(0.5, 8.0, usd_per_m_input=1.0, cached_input_discount=0.9)
    o = from_route_result(res, [price], [0])
    call = res.calls[0]
    assert o.tokens_cached == cached
    assert o.eff_cost_prod == pytest.approx(
        (call.input_tokens - 0.9 * cached + 4 * call.output_tokens) * 8.0 / 8.0)
    assert o.usd == pytest.approx((call.input_tokens - 0.9 * cached) / 1e6)
    undiscounted = from_route_result(res, [TierPrice(0.5, 8.0)], [0])
    assert undiscounted.eff_cost_prod - 0.9 * undiscounted.cached_prod == \
        pytest.approx(o.eff_cost_prod)  # any discount from one run's rows


def test_the_replay_report_tables_the_cache_share():
    rows = pl.DataFrame({"strategy": ["a", "a", "b"], "tokens_base": [60, 60, 60],
                         "tokens_injected": [40, 40, 40], "tokens_cached": [0, 50, 100]})
    t = prefix_cache_table(rows)
    assert t["cached %"].to_list() == [25.0, 100.0]
    assert t["prefill tok/req"].to_list() == [75.0, 0.0]
    assert prefix_cache_table(rows.drop("tokens_cached")).height == 0  # older rows
    assert "TTFT p50 ms" not in t.columns  # no engine said
    timed = prefix_cache_table(rows.with_columns(pl.Series("ttft_s", [0.1, 0.3, 0.2])))
    assert timed["TTFT p50 ms"].to_list()[1] == 200.0


def test_an_http_servers_cached_count_is_read_from_usage_and_never_guessed():
    assert reported_cached({"prompt_tokens_details": {"cached_tokens": 32}}, 100) == 32
    assert reported_cached({"prompt_tokens_details": {"cached_tokens": 320}}, 100) == 100
    assert reported_cached({"prompt_tokens": 100}, 100) == 0
    assert reported_cached({"prompt_tokens_details": None}, 100) == 0
