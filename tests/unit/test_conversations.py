"""The client's conversation reaches the tiers: its system prompt (memories appended to it, the
router's own prompt only when it sends none), its earlier turns (trimmed oldest-first to the
tier's context, counted as their own token component), and the question; what is remembered is
the last user turn and the answer."""

from __future__ import annotations

from memroute.accounting.cost import Pricing
from memroute.config import RetrievalConfig, RouterConfig
from memroute.routing.prompt import MEMORY_HEADER
from memroute.routing.router import RouteRequest, Router, Tier
from memroute.types import Message

from .fakes import FakeBackend, FakeRetriever, words

PERSONA = "You are Captain Hook. Always answer in pirate speak."
TURNS = (Message("user", "Who is my sister?"), Message("assistant", "Ana, arr."),
         Message("user", "Where does she live?"), Message("assistant", "Lisbon, arr."))


def router(backend, *, context_tokens=None, retriever=None):
    return Router([Tier("t0", backend, Pricing(0.5), context_tokens=context_tokens)],
                  RouterConfig(tau=0.5, max_tokens=8), RetrievalConfig(top_k=3),
                  retriever or FakeRetriever())


def seeded_retriever() -> FakeRetriever:
    from memroute.types import TurnPair

    r = FakeRetriever()
    r.remember([TurnPair("alice", "s0", 0, "My sister Ana loves sailing.", "Noted.", 1_683_500_000)])
    return r


def test_without_a_system_prompt_or_history_the_prompt_is_the_papers():
    backend = FakeBackend("t0")
    res = router(backend).route("alice", "What is my sister's name?")
    [prompt] = backend.prompts
    assert prompt == [Message("system", RouterConfig().system_prompt),
                      Message("user", "What is my sister's name?")]
    assert res.calls[0].history_tokens == 0


def test_the_clients_system_prompt_is_kept_and_the_memories_appended_to_it():
    backend = FakeBackend("t0")
    router(backend, retriever=seeded_retriever()).route_many(
        [RouteRequest("alice", "What does my sister love?", system=PERSONA)])
    system = backend.prompts[0][0]
    assert system.role == "system" and system.content.startswith(PERSONA)
    assert MEMORY_HEADER in system.content and "sailing" in system.content
    assert RouterConfig().system_prompt not in system.content  # not substituted, not added


def test_history_sits_between_system_and_question_and_is_its_own_token_component():
    backend = FakeBackend("t0")
    retriever = seeded_retriever()
    [res] = router(backend, retriever=retriever).route_many(
        [RouteRequest("alice", "And what does my sister love?", history=TURNS)])
    prompt = backend.prompts[0]
    assert prompt[1:-1] == list(TURNS)
    assert prompt[-1] == Message("user", "And what does my sister love?")
    call = res.calls[0]
    assert call.history_tokens == sum(words(m.content) + 2 for m in TURNS)  # the fake's count
    assert call.injected_tokens > 0
    assert call.base_prompt_tokens + call.injected_tokens + call.history_tokens == \
        backend.count_tokens(prompt) == call.input_tokens
    stored = retriever.pairs[-1]  # the new pair: the last user turn and the answer, no history
    assert (stored.user_text, stored.assistant_text) == ("And what does my sister love?", "blue")


def test_history_is_trimmed_oldest_first_to_the_tiers_context():
    backend = FakeBackend("t0")
    without = router(backend).route("alice", "And her job?")
    # max_tokens 8, then room for the two newest turns as trim_history estimates them (words +
    # 6 each: 10 + 8); the fake counts them as 6 + 4
    room = without.calls[0].base_prompt_tokens + 8 + 18
    [res] = router(backend, context_tokens=room).route_many(
        [RouteRequest("alice", "And her job?", history=TURNS)])
    prompt = backend.prompts[-1]
    assert prompt[1:-1] == list(TURNS[2:])  # the oldest two dropped
    assert backend.count_tokens(prompt) + 8 <= room  # prompt + max_tokens fit the context
    assert res.calls[0].history_tokens == 10


def test_the_server_passes_the_clients_conversation_through(tmp_path, monkeypatch):
    from memroute.config.schema import ModelConfig
    from memroute.namespace import namespace

    from .fakes import call_like_ingress, serving_core

    core = serving_core(tmp_path, monkeypatch, ModelConfig(name="mock-small", engine="mock"),
                        api_keys={"sk-a": "acme"})
    try:
        seen = []
        inner = core.test_backends[0].generate_many
        monkeypatch.setattr(core.test_backends[0], "generate_many",
                            lambda batch, **kw: (seen.extend(batch), inner(batch, **kw))[1])
        messages = [{"role": "system", "content": PERSONA},
                    *({"role": m.role, "content": m.content} for m in TURNS),
                    {"role": "user", "content": "And what is her job?"}]
        resp = call_like_ingress(core, {"model": "memroute", "user": "alice", "messages": messages})
        assert resp.status == 200, resp.body
        [prompt] = seen
        assert prompt[0].content.startswith(PERSONA) and prompt[1:-1] == list(TURNS)
        tokens = resp.body["memroute"]["tokens"]
        assert tokens["history"] > 0
        assert tokens["base"] + tokens["injected"] + tokens["history"] == \
            resp.body["usage"]["prompt_tokens"]
        assert resp.headers["x-memroute-tokens-history"] == str(tokens["history"])
        assert core.drain(10)
        [pair] = core.store.list_user(namespace("acme", "alice"))
        assert pair.user_text == "And what is her job?"
    finally:
        core.close()


class QueryLog(FakeRetriever):
    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []

    def retrieve_many(self, user_ids, queries, *, top_k=None):
        self.queries += list(queries)
        return super().retrieve_many(user_ids, queries, top_k=top_k)


def test_a_follow_up_is_searched_with_the_name_it_refers_to_and_answered_as_asked():
    log = QueryLog()
    history = (Message("user", "What does Caroline paint?"), Message("assistant", "Sunsets."))
    backend = FakeBackend("t0")
    router(backend, retriever=log).route_many(
        [RouteRequest("alice", "When did she start?", history=history),
         RouteRequest("bob", "What does Melanie paint?", history=history)])
    assert log.queries == ["When did she start? Caroline", "What does Melanie paint?"]
    assert backend.prompts[0][-1] == Message("user", "When did she start?")  # the model: as sent


def test_followup_never_searches_with_the_turn_alone_and_a_bad_mode_is_a_config_error():
    import pytest

    from memroute.errors import ConfigError

    log = QueryLog()
    history = (Message("user", "What does Caroline paint?"),)
    Router([Tier("t0", FakeBackend("t0"), Pricing(0.5))], RouterConfig(),
           RetrievalConfig(followup="never"), log).route_many(
        [RouteRequest("alice", "When did she start?", history=history)])
    assert log.queries == ["When did she start?"]
    with pytest.raises(ConfigError) as e:
        Router([Tier("t0", FakeBackend("t0"), Pricing(0.5))], RouterConfig(),
               RetrievalConfig(followup="sometimes"), log)
    assert e.value.field == "retrieval.followup"
