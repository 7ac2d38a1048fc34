"""The router end to end on real parts: Milvus Lite, MiniLM, SmolLM2-135M, generated conversations."""

from __future__ import annotations


import pytest

from memroute.accounting.cost import Pricing
from memroute.config import MemoryConfig, RetrievalConfig, RouterConfig
from memroute.eval.benchmark import ingest
from memroute.datasets.locomo import load_locomo
from memroute.datasets.generate.synthetic import generate, write_json
from memroute.routing.grounding import grounded, sources
from memroute.routing.prompt import build_messages
from memroute.routing.router import RouteRequest, Router, Tier


@pytest.fixture(scope="module")
def world(tmp_path_factory, encoder):
    from memroute.memory import MilvusMemoryStore
    from memroute.retrieval.retriever import HybridRetriever

    tmp = tmp_path_factory.mktemp("e2e")
    path = tmp / "synthetic.json"
    write_json(generate(num_users=2, sessions_per_user=3, seed=7), path)
    conversations = load_locomo(path)
    store = MilvusMemoryStore(MemoryConfig(uri=str(tmp / "milvus.db")), encoder.dim)
    retriever = HybridRetriever(encoder, store, RetrievalConfig(top_k=5))
    dia = ingest(conversations, retriever)
    store.flush()
    yield conversations, store, retriever, dia
    store.close()


def make_router(tiny_hf, retriever, **router_kw):
    cfg = RouterConfig(max_tokens=12, **router_kw)
    tiers = [Tier("small", tiny_hf, Pricing(0.135)), Tier("large", tiny_hf, Pricing(1.7))]
    return Router(tiers, cfg, RetrievalConfig(top_k=5, probe_token_budget=256, token_budget=512), retriever)


def test_planted_turn_is_retrieved_and_injected(world, tiny_hf):
    conversations, _, retriever, dia = world
    router = make_router(tiny_hf, retriever, tau=0.0, store_answers=False)
    found = total = 0
    for conv in conversations:
        qas = conv.qa[:4]
        results = router.route_many([RouteRequest(conv.sample_id, qa.question) for qa in qas])
        for qa, res in zip(qas, results):
            injected = {d for h in res.decision.memories for d in dia[h.memory.id]}
            found += bool(set(qa.evidence) & injected)
            total += 1
            # only this user's memories are ever injected
            assert all(h.memory.user_id == conv.sample_id for h in res.decision.memories)
    assert found / total >= 0.75, f"planted evidence injected for {found}/{total} questions"


def test_token_counts_equal_the_tokenizer(world, tiny_hf):
    conversations, _, retriever, _ = world
    router = make_router(tiny_hf, retriever, tau=0.0, store_answers=False)
    conv = conversations[0]
    qa = conv.qa[0]
    res = router.route(conv.sample_id, qa.question)
    call = res.calls[0]
    tok = tiny_hf.tokenizer  # the model's own tokenizer
    base = build_messages(router.cfg.system_prompt, qa.question)
    full = res.messages  # the prompt the router sent (its memory layout: dates, today, order)
    assert full[0].content.startswith(base[0].content) and "Today is" in full[0].content
    render = lambda msgs: tok.apply_chat_template(  # noqa: E731
        [{"role": m.role, "content": m.content} for m in msgs], add_generation_prompt=True, tokenize=True
    )
    n_base, n_full = len(_ids(render(base))), len(_ids(render(full)))
    assert call.base_prompt_tokens == n_base
    assert call.input_tokens == n_full
    assert call.injected_tokens == n_full - n_base > 0
    assert call.output_tokens == len(tok(res.answer, add_special_tokens=False)["input_ids"]) or call.output_tokens > 0
    assert call.eff_cost == pytest.approx((n_full + 4 * call.output_tokens) * 0.135 / 8)


def _ids(x):
    return x["input_ids"] if isinstance(x, dict) or hasattr(x, "keys") else x


def test_tau_one_escalates_every_time_and_tau_zero_never(world, tiny_hf):
    conversations, _, retriever, _ = world
    conv = conversations[1]
    reqs = [RouteRequest(conv.sample_id, qa.question) for qa in conv.qa[:3]]
    always = make_router(tiny_hf, retriever, tau=1.0, store_answers=False).route_many(reqs)
    assert all(r.decision.answered_tier == 1 and r.decision.escalated and len(r.calls) == 2 for r in always)
    assert all(r.calls[0].confidence < 1.0 for r in always)
    # the confidence rule alone: grounding would still refuse an answer read from nowhere
    never = make_router(tiny_hf, retriever, tau=0.0, store_answers=False,
                        grounding="off").route_many(reqs)
    assert all(r.decision.answered_tier == 0 and len(r.calls) == 1 for r in never)


def test_answers_are_stored_as_memories_of_that_user(world, tiny_hf):
    conversations, store, retriever, _ = world
    user = conversations[0].sample_id
    other = conversations[1].sample_id
    before, before_other = store.count(user), store.count(other)
    router = make_router(tiny_hf, retriever, tau=1.0)  # escalates: the large tier's answer is stored
    res = router.route(user, "Please remember that my locker code is QX-9913.", session_time=1735689600)
    store.flush()
    assert store.count(user) == before + 1 and store.count(other) == before_other
    texts = [m.text for m in store.list_user(user)]
    assert any("QX-9913" in t and res.answer.strip()[:20] in t for t in texts)
    # the new memory is retrievable for the next question of the same user only
    hits = retriever.retrieve(user, "what is my locker code?")
    assert any("QX-9913" in h.memory.text for h in hits)
    assert not any("QX-9913" in h.memory.text for h in retriever.retrieve(other, "what is my locker code?"))


def test_a_real_models_answer_is_kept_only_when_its_memories_hold_it(world, tiny_hf):
    # tau 0: every answer is confident enough, so grounding alone decides which are kept
    conversations, _, retriever, _ = world
    conv = conversations[1]
    reqs = [RouteRequest(conv.sample_id, qa.question) for qa in conv.qa[:4]]
    results = make_router(tiny_hf, retriever, tau=0.0, store_answers=False).route_many(reqs)
    assert any(r.calls[0].grounded is not None for r in results)  # the questions were checked
    for req, r in zip(reqs, results):
        probe = r.calls[0]
        assert (r.decision.answered_tier == 0) == (probe.grounded is not False)
        if r.decision.answered_tier == 0 and probe.grounded:  # the rule's verdict on what it saw
            texts = sources(r.decision.memories, {tiny_hf.model_id}, question=req.query)
            assert grounded(r.answer, texts, 0.5)
