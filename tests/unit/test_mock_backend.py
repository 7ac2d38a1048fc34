"""The mock engine: protocol conformance, exact counts, rules -> confidence -> cascade decisions."""

from __future__ import annotations

import pytest

from memroute.accounting.cost import Pricing
from memroute.config import RetrievalConfig, RouterConfig
from memroute.config.schema import ModelConfig
from memroute.errors import AssetError, ConfigError, InvalidRequest
from memroute.llm.base import Backend
from memroute.llm.chat import chat_prompt_ids, text_token_count
from memroute.llm.factory import build_backend
from memroute.llm.mock_backend import MockBackend, SimpleTokenizer
from memroute.routing.confidence import mean_logprob, min_token, top2_margin
from memroute.routing.prompt import build_messages
from memroute.routing.router import Router, Tier
from memroute.types import Memory, Message, RetrievalHit, TurnPair

from .fakes import FakeRetriever

SYSTEM = "Answer briefly."


def mock(name: str = "mock-small", **engine_args) -> MockBackend:
    backend = build_backend(ModelConfig(name=name, engine="mock", engine_args=engine_args))
    assert isinstance(backend, MockBackend)
    return backend


def msgs(query: str, memories: list[str] = (), days: list[int] | None = None) -> list[Message]:
    """The Router's prompt for ``query`` with ``memories`` (ranked in this order) injected."""
    days = days or list(range(len(memories)))
    hits = [
        RetrievalHit(Memory(i, "alice", text, 1714521600 + 86400 * d, turn_index=i), 1.0)
        for i, (text, d) in enumerate(zip(memories, days))
    ]
    return build_messages(SYSTEM, query, hits)


def test_conforms_to_the_backend_protocol_and_is_exported():
    import memroute.llm

    b = mock()
    assert isinstance(b, Backend)
    assert memroute.llm.MockBackend is MockBackend
    assert b.model_id == "mock-small"
    b.close()  # a no-op; still usable
    assert b.generate(msgs("hi")).text == "I do not know."


@pytest.mark.parametrize("query", ["hi", "What is my locker code?", "a, b; c!  (d) é"])
def test_count_tokens_equals_prompt_tokens(query):
    b = mock()
    for m in (msgs(query), msgs(query, ["[1 May 2024] Q: My code is 44. / A: Noted."])):
        reply = b.generate(m)
        assert reply.prompt_tokens == b.count_tokens(m) > 0
        # the count is the text count of the fixed rendering, and what an ingress computes
        rendered = SimpleTokenizer.render([{"role": x.role, "content": x.content} for x in m])
        assert b.count_tokens(m) == b.count_text_tokens(rendered)
        assert len(chat_prompt_ids(SimpleTokenizer(), m)) == b.count_tokens(m)
    assert (
        b.count_text_tokens("Hello, world!")
        == 4
        == text_token_count(SimpleTokenizer(), "Hello, world!")
    )
    assert b.count_text_tokens("") == 0


def test_reply_follows_the_engine_conventions():
    b = mock(answer="The answer is forty-two.", logprob=-0.2, margin=1.5)
    r = b.generate(msgs("question?"))
    assert r.text == "The answer is forty-two."
    assert (
        r.completion_tokens
        == len(r.logprobs)
        == len(r.alt_logprobs)
        == b.count_text_tokens(r.text)
        == 7
    )
    assert r.logprobs == [-0.2] * 7
    assert all(a <= c for a, c in zip(r.alt_logprobs, r.logprobs))
    assert r.alt_logprobs == pytest.approx([-1.7] * 7)
    assert r.finish_reason == "stop" and r.model_id == "mock-small"


def test_max_tokens_truncates_and_stop_is_respected():
    b = mock(answer="one two three four five")
    r = b.generate(msgs("q"), max_tokens=2)
    assert (r.text, r.completion_tokens, len(r.logprobs), r.finish_reason) == (
        "one two",
        2,
        2,
        "length",
    )
    r = b.generate(msgs("q"), stop=[" three"])
    assert (r.text, r.completion_tokens, r.finish_reason) == ("one two", 2, "stop")
    r = b.generate(msgs("q"), stop=["four"], max_tokens=2)
    assert (r.text, r.finish_reason) == ("one two", "length")
    with pytest.raises(InvalidRequest) as e:
        b.generate(msgs("q"), max_tokens=0)
    assert e.value.field == "max_tokens"
    with pytest.raises(InvalidRequest):
        b.generate(msgs("q"), temperature=-1)


def test_rules_set_answer_and_logprobs_hence_confidence():
    b = mock(
        logprob=-0.1,
        rules=[
            {"match": "(?i)why", "logprob": -2.4, "answer": "Because."},
            {"match": "(?i)code", "memories": True, "logprob": [-0.1, -2.0], "margin": 0.3},
            {"memories": True, "logprob": -0.3},
        ],
    )
    default = b.generate(msgs("Where is it?"))
    low = b.generate(msgs("Why is the sky blue?"))
    assert default.text == "I do not know." and low.text == "Because."
    assert mean_logprob(default, -3.0) == pytest.approx(1 - 0.1 / 3)
    assert mean_logprob(low, -3.0) == pytest.approx(0.2)
    # "code" without memories falls through to the default; with memories the cycled pattern
    assert b.generate(msgs("my code?")).logprobs[0] == -0.1
    mem = ["[1 May 2024] Q: My code is 44. / A: Your code is 44."]
    patterned = b.generate(msgs("my code?", mem))
    assert patterned.text == "Your code is 44."  # the memory echo
    assert patterned.logprobs == [-0.1, -2.0, -0.1, -2.0, -0.1]
    assert min_token(patterned, -3.0) < mean_logprob(patterned, -3.0)
    assert top2_margin(patterned, -3.0) == pytest.approx(0.1)
    assert b.generate(msgs("other?", mem)).logprobs[0] == -0.3


def test_default_answer_echoes_the_most_recent_memory():
    b = mock(memory_answer="Remembered: {memory_q} -> {memory_a}")
    older = "[1 May 2024] Q: My dog is Rex. / A: Nice."
    newer = "[2 May 2024] Q: My dog is now Max. / A: Noted, Max."
    r = b.generate(msgs("dog?", [newer, older], days=[1, 0]))  # rendered chronologically
    assert r.text == "Remembered: My dog is now Max. -> Noted, Max."
    assert mock().generate(msgs("dog?", [older])).text == "Nice."
    assert mock().generate(msgs("dog?")).text == "I do not know."
    echo = mock(answer="You said: {query}").generate(msgs("hello there"))
    assert echo.text == "You said: hello there"


def test_deterministic_and_batched():
    b = mock(rules=[{"match": "b", "logprob": -1.0}])
    batch = [msgs("a"), msgs("b"), msgs("c", ["[1 May 2024] Q: x / A: y"])]
    many = b.generate_many(batch, max_tokens=8)
    single = [
        mock(rules=[{"match": "b", "logprob": -1.0}]).generate(m, max_tokens=8) for m in batch
    ]

    def key(r):
        return (r.text, r.logprobs, r.alt_logprobs, r.prompt_tokens, r.completion_tokens)

    assert [key(r) for r in many] == [key(r) for r in single]
    assert len({r.latency_s for r in many}) == 1  # one engine call for the whole batch
    assert b.generate_many([]) == []


def test_simulated_latency():
    r = mock(latency_s=0.05).generate_many([msgs("a"), msgs("b")])
    assert all(x.latency_s >= 0.05 for x in r)
    assert mock().generate(msgs("a")).latency_s < 0.05


@pytest.mark.parametrize(
    "engine_args, field",
    [
        ({"temperature": 1}, "model.engine_args.temperature"),
        ({"logprob": 0.5}, "model.engine_args.logprob"),
        ({"margin": -1}, "model.engine_args.margin"),
        ({"rules": {"match": "x"}}, "model.engine_args.rules"),
        ({"rules": [{"match": "("}]}, "model.engine_args.rules[0].match"),
        ({"rules": [{}, {"logprob": "low"}]}, "model.engine_args.rules[1].logprob"),
        ({"rules": [{"pattern": "x"}]}, "model.engine_args.rules[0].pattern"),
        ({"rules": [{"memories": "yes"}]}, "model.engine_args.rules[0].memories"),
        ({"latency_s": -1}, "model.engine_args.latency_s"),
        ({"answer": 3}, "model.engine_args.answer"),
        ({"memory_answer": "{memory_b}"}, "model.engine_args.memory_answer"),
        ({"rules": [{"answer": "{"}]}, "model.engine_args.rules[0].answer"),
    ],
)
def test_bad_engine_args_name_the_field(engine_args, field):
    with pytest.raises(ConfigError) as e:
        mock(**engine_args)
    assert e.value.field == field and field in str(e.value)


def test_the_conf_yamls_load_as_model_configs():
    from pathlib import Path

    from omegaconf import OmegaConf

    from memroute.config import to_object

    root = Path(__file__).resolve().parents[2] / "conf" / "model"
    small, large = (
        to_object(OmegaConf.load(root / f), ModelConfig) for f in ("mock.yaml", "mock-large.yaml")
    )
    assert (small.engine, large.engine) == ("mock", "mock")
    assert large.params_b > small.params_b
    assert isinstance(build_backend(small), MockBackend) and isinstance(
        build_backend(large), MockBackend
    )


def test_a_real_tokenizer_folder_counts_with_its_chat_template():
    try:
        b = build_backend(
            ModelConfig(
                name="m",
                engine="mock",
                asset="smollm2-135m",
                engine_args={"answer": "Paris, France."},
            )
        )
    except AssetError as exc:
        pytest.skip(f"no smollm2-135m asset: {exc}")
    from memroute.config.schema import AssetsConfig
    from serve.tokenizers import local_tokenizer

    m = msgs("What is the capital of France?")
    r = b.generate(m, max_tokens=2)
    assert r.prompt_tokens == b.count_tokens(m) == len(chat_prompt_ids(b.tokenizer, m))
    assert r.completion_tokens == 2 == len(r.logprobs) and r.finish_reason == "length"
    tok = local_tokenizer(
        ModelConfig(name="m", engine="mock", asset="smollm2-135m"), AssetsConfig()
    )
    assert len(chat_prompt_ids(tok, m)) == r.prompt_tokens


def test_the_ingress_counts_like_the_engine_without_a_folder():
    from memroute.config.schema import AssetsConfig
    from serve.tokenizers import local_tokenizer

    tok = local_tokenizer(ModelConfig(name="m", engine="mock"), AssetsConfig())
    b = mock()
    m = msgs("How many tokens, exactly?", ["[1 May 2024] Q: a / A: b"])
    assert len(chat_prompt_ids(tok, m)) == b.count_tokens(m)
    assert text_token_count(tok, "- [1 May 2024] Q: a / A: b") == b.count_text_tokens(
        "- [1 May 2024] Q: a / A: b"
    )


def test_router_with_two_mock_tiers_escalates_exactly_when_a_rule_says_so():
    rules = [{"match": "(?i)^why", "logprob": -2.5}]  # c = 1/6 < tau
    small = mock("mock-small", rules=rules, logprob=-0.1)
    large = mock("mock-large", answer="Large answer.", logprob=-0.05)
    retriever = FakeRetriever()
    retriever.remember(
        [TurnPair("alice", "s1", 0, "My dog is called Rex", "Rex, noted.", 1714521600)]
    )
    router = Router(
        [Tier("small", small, Pricing(0.5)), Tier("large", large, Pricing(8.0))],
        RouterConfig(tau=0.5, store_answers=False),
        RetrievalConfig(top_k=3, probe_token_budget=64, token_budget=256),
        retriever,
    )
    easy = router.route("alice", "what is my dog called?")
    assert not easy.decision.escalated and easy.decision.answered_model == "mock-small"
    assert easy.answer == "Rex, noted."  # the memory reached the model
    assert easy.decision.confidences == [pytest.approx(1 - 0.1 / 3)]
    call = easy.calls[0]
    assert call.injected_tokens > 0
    assert call.base_prompt_tokens + call.injected_tokens == small.count_tokens(easy.messages)
    assert "Today is" in easy.messages[0].content  # the memory block as the router lays it out

    hard = router.route("bob", "Why is the sky blue?")
    assert hard.decision.escalated and hard.decision.answered_model == "mock-large"
    assert hard.answer == "Large answer."
    assert hard.decision.confidences == [pytest.approx(1 / 6), pytest.approx(1 - 0.05 / 3)]
    assert [c.accepted for c in hard.calls] == [False, True]
    assert hard.calls[1].eff_cost > hard.calls[0].eff_cost


def test_memories_are_found_by_their_shape():
    from memroute.llm.mock_backend import latest_memory

    assert latest_memory("Rules:\n- be brief\n- no lists") is None
    system = (
        "Be brief.\n\nMemories:\n- [1 May 2024] Q: a / A: b\n- [2 May 2024] Q: two\nlines / A: ok\n"
    )
    assert latest_memory(system) == ("[2 May 2024] Q: two\nlines / A: ok", "two\nlines", "ok")
    # a statement's acknowledgement is not shown: the memory answers with what the user said
    stated = "Memories:\n- [1 May 2024] Q: a / A: b\n- [2 May 2024] Q: My locker code is ZX-4471.\n"
    said = "My locker code is ZX-4471."
    assert latest_memory(stated) == (f"[2 May 2024] Q: {said}", said, said)
