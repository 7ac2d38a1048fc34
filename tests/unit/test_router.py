import pytest

from memroute.accounting.cost import Pricing
from memroute.config import RetrievalConfig, RouterConfig
from memroute.errors import InvalidRequest
from memroute.routing.router import RouteRequest, Router, Tier
from memroute.types import RouteResult, TurnPair

from .fakes import FakeBackend, FakeRetriever


def make(tau=0.5, small_lp=-0.3, use_memory=True, use_routing=True, store=True, grounding="memory"):
    small = FakeBackend("small", answer="Rex", logprob=small_lp)
    large = FakeBackend("large", answer="Rex the dog", logprob=-0.05)
    retriever = FakeRetriever()
    retriever.remember([TurnPair("alice", "s1", 0, "my dog is called Rex", "Nice name!", 1714521600)])
    cfg = RouterConfig(tau=tau, use_memory=use_memory, use_routing=use_routing, store_answers=store,
                       grounding=grounding)
    router = Router(
        [Tier("small", small, Pricing(0.5)), Tier("large", large, Pricing(1.5))],
        cfg,
        RetrievalConfig(top_k=3, probe_token_budget=64, token_budget=256),
        retriever if use_memory else None,
    )
    return router, small, large, retriever


def test_accepts_on_small_when_confident():
    router, small, large, _ = make(tau=0.5, small_lp=-0.3)  # c = 0.9
    res = router.route("alice", "what is my dog called?")
    assert res.answer == "Rex"
    assert res.decision.answered_tier == 0 and not res.decision.escalated
    assert res.decision.confidences == [pytest.approx(0.9)]
    assert len(res.calls) == 1 and res.calls[0].accepted
    assert not large.prompts


def test_escalates_below_tau_with_the_same_memories():
    router, small, large, _ = make(tau=0.95, small_lp=-0.3)
    res = router.route("alice", "what is my dog called?")
    assert res.decision.answered_tier == 1 and res.decision.escalated
    assert res.answer == "Rex the dog"
    assert [c.accepted for c in res.calls] == [False, True]
    assert len(res.decision.confidences) == 2
    # both tiers saw the retrieved memory in their system context
    assert "Rex" in small.prompts[0][0].content and "Rex" in large.prompts[0][0].content


def test_tau_one_always_escalates_tau_zero_never():
    # The confidence rule alone: "dog?" retrieves nothing, so grounding would escalate it too.
    router, *_ = make(tau=1.0, small_lp=-0.01, grounding="off")
    assert router.route("alice", "dog?").decision.answered_tier == 1
    router, *_ = make(tau=0.0, small_lp=-9.0, grounding="off")
    assert router.route("alice", "dog?").decision.answered_tier == 0


def test_routing_off_uses_first_model_only():
    router, small, large, _ = make(tau=1.0, use_routing=False)
    res = router.route("alice", "dog?")
    assert res.decision.answered_tier == 0 and not large.prompts


def test_token_attribution_is_exact_against_the_backend_count():
    router, small, _, _ = make(tau=0.0)
    res = router.route("alice", "what is my dog called?")
    call = res.calls[0]
    with_mem = small.count_tokens(small.prompts[0])
    assert call.input_tokens == with_mem
    assert call.injected_tokens > 0
    # (in + 4 out) * P/8 with P=0.5
    assert call.eff_cost == pytest.approx((with_mem + 4 * call.output_tokens) * 0.5 / 8)


def test_memory_off_injects_nothing():
    router, small, _, _ = make(tau=0.0, use_memory=False)
    res = router.route("alice", "what is my dog called?")
    assert res.calls[0].injected_tokens == 0 and res.decision.memories == []


def test_answers_become_memories_of_that_user_whichever_tier_answered():
    router, _, _, retriever = make(tau=1.0)
    router.route("alice", "where do I live?", session_time=1717200000)
    stored = retriever.pairs[-1]
    assert stored.user_id == "alice" and stored.user_text == "where do I live?"
    assert stored.assistant_text == "Rex the dog" and stored.source_model == "large"
    assert stored.session_time == 1717200000


def test_no_store_when_disabled():
    router, _, _, retriever = make(store=False)
    router.route("alice", "q?")
    assert len(retriever.pairs) == 1


def test_batch_equals_singles():
    router, *_ = make(tau=0.5, grounding="off")  # bob has no memory: grounding would escalate
    batch = router.route_many([RouteRequest("alice", "dog?"), RouteRequest("bob", "dog?")])
    assert [r.answer for r in batch] == ["Rex", "Rex"]
    assert batch[1].decision.memories == []  # bob has no memories of alice


@pytest.mark.parametrize("uid", ['x" or user_id != "', "", None, "a b", {"a": 1}])
def test_bad_user_ids_are_rejected_before_any_model_call(uid):
    router, small, _, retriever = make()
    with pytest.raises(InvalidRequest):
        router.route(uid, "q?")
    assert not small.prompts and len(retriever.pairs) == 1


def test_empty_query_and_bad_tau_rejected():
    router, *_ = make()
    with pytest.raises(InvalidRequest, match="empty"):
        router.route("alice", "   ")
    with pytest.raises(InvalidRequest) as e:
        make(tau=1.5)
    assert e.value.field == "router.tau"


# -- the facts block -------------------------------------------------------------------------

FACT_T0 = 1714521600  # 1 May 2024


def facts_store(tmp_path):
    from memroute.memory.facts import FactInput, FactStore

    store = FactStore(f"sqlite:///{tmp_path / 'facts.sqlite3'}")
    store.assert_fact("alice", FactInput("user.location", "Porto", valid_from=FACT_T0))
    store.assert_fact("alice", FactInput("user.location", "Lisbon", valid_from=FACT_T0 + 86400))
    return store


def make_with_facts(facts, tau=0.95, token_budget=256, probe_budget=64):
    small = FakeBackend("small", answer="Rex", logprob=-0.3)
    large = FakeBackend("large", answer="Rex the dog", logprob=-0.05)
    retriever = FakeRetriever()
    retriever.remember([TurnPair("alice", "s1", 0, "my dog is called Rex", "Nice name!", FACT_T0)])
    router = Router(
        [Tier("small", small, Pricing(0.5)), Tier("large", large, Pricing(1.5))],
        RouterConfig(tau=tau, store_answers=False),
        RetrievalConfig(top_k=3, probe_token_budget=probe_budget, token_budget=token_budget),
        retriever, facts=facts,
    )
    return router, small, large


def test_active_facts_are_injected_before_the_turn_pairs_and_count_as_memory(tmp_path):
    store = facts_store(tmp_path)
    router, small, large = make_with_facts(store)
    res = router.route("alice", "where do I live and what is my dog called?",
                       session_time=FACT_T0 + 2 * 86400)
    for prompts in (small.prompts, large.prompts):  # each tier, with its own budget
        system = prompts[0][0].content
        assert "Current facts about the user (as of 3 May 2024):" in system
        assert "- user.location: Lisbon (since 2 May 2024)" in system
        assert "Porto" not in system  # the superseded value is never injected
        assert system.index("Lisbon") < system.index("Rex")  # facts first, then turn-pairs
    # the block is injected memory: exactly what the prompt adds over the bare one
    base = router.route("alice", "where do I live and what is my dog called?",
                        session_time=FACT_T0 + 2 * 86400, use_memory=False)
    plain, _, _ = make_with_facts(None)
    without = plain.route("alice", "where do I live and what is my dog called?",
                          session_time=FACT_T0 + 2 * 86400)
    for with_f, no_f, bare in zip(res.calls, without.calls, base.calls):
        assert bare.injected_tokens == 0
        assert with_f.injected_tokens > no_f.injected_tokens > 0
        assert with_f.base_prompt_tokens == no_f.base_prompt_tokens
    store.close()


def test_facts_fill_the_budget_first_and_turn_pairs_get_what_is_left(tmp_path):
    store = facts_store(tmp_path)
    # probe budget: the facts block (25 words) fits, the memory block next to it does not
    router, small, large = make_with_facts(store, probe_budget=30)
    res = router.route("alice", "what is my dog called?", session_time=FACT_T0 + 2 * 86400)
    probe = small.prompts[0][0].content
    assert "Lisbon" in probe and "Rex" not in probe
    assert 25 <= res.calls[0].injected_tokens <= 30 + 2  # + the blank-line separators
    assert "Rex" in large.prompts[0][0].content  # the larger escalation budget has room
    store.close()


def test_no_provider_or_memory_off_means_no_facts_block(tmp_path):
    router, small, _ = make_with_facts(None)
    router.route("alice", "dog?")
    assert "Current facts" not in small.prompts[0][0].content
    store = facts_store(tmp_path)
    router, small, _ = make_with_facts(store)
    router.route("alice", "dog?", use_memory=False)
    assert small.prompts[0][0].content == router.cfg.system_prompt
    router.route("bob", "dog?")  # a user without facts: no empty header
    assert "Current facts" not in small.prompts[-1][0].content
    store.close()


def test_an_unreadable_fact_store_degrades_the_member_when_isolating():
    def broken(uid):
        raise RuntimeError("fact store down")

    router, small, _ = make_with_facts(broken)
    [res] = router.route_each([RouteRequest("alice", "what is my dog called?")])
    assert isinstance(res, RouteResult) and res.decision.memory_degraded
    assert "Rex" in small.prompts[0][0].content  # the turn-pairs still came
    with pytest.raises(RuntimeError, match="fact store down"):
        router.route("alice", "dog?")


def test_the_small_model_reads_the_probe_budget_alone_or_in_the_cascade():
    """memory-only (the small tier alone) and the cascade's probe see the same memories, so the
    compound condition differs from memory-only by its escalations only."""
    def prompt_of(tiers):
        retriever = FakeRetriever()
        retriever.remember([TurnPair("alice", "s1", i, f"note {i}: " + "word " * 12, "ok", FACT_T0 + i)
                            for i in range(6)])
        router = Router(tiers, RouterConfig(tau=0.0, store_answers=False),
                        RetrievalConfig(top_k=6, probe_token_budget=40, token_budget=400), retriever)
        router.route("alice", "what are my notes?")
        return tiers[0].backend.prompts[-1][0].content

    alone = prompt_of([Tier("small", FakeBackend("small", answer="x", logprob=-0.1), Pricing(0.5))])
    cascade = prompt_of([Tier("small", FakeBackend("small", answer="x", logprob=-0.1), Pricing(0.5)),
                         Tier("large", FakeBackend("large", answer="y"), Pricing(1.5))])
    assert alone == cascade and alone.count("note ") < 6
