"""The transformers back end on the real SmolLM2-135M (converted bf16 folder, run in float32)."""

from __future__ import annotations

import math

import pytest

from memroute.errors import InvalidRequest
from memroute.llm.transformers_backend import TransformersBackend
from memroute.types import Message

CAT = [Message("system", "Memory: the user's cat is named Tom."),
       Message("user", "What is my cat's name?")]
COUNT = [Message("user", "Count from 1 to 10, separated by commas.")]
SKY = [Message("system", "Answer with one word."), Message("user", "What color is the sky?")]
MULTI_TURN = [Message("system", "Be brief."), Message("user", "Hi!"),
              Message("assistant", "Hello! How can I help?"), Message("user", "Name a fruit.")]


@pytest.fixture(scope="session")
def smol_folder(assets):
    return assets.hf_folder("smollm2-135m")


@pytest.fixture(scope="module")
def hf(smol_folder):
    backend = TransformersBackend("smollm2-135m", smol_folder, dtype="float32")
    yield backend
    backend.close()


def assert_well_formed(reply, backend, messages):
    assert reply.model_id == backend.model_id
    assert reply.completion_tokens == len(reply.logprobs) == len(reply.alt_logprobs) > 0
    assert all(lp <= 0.0 and math.isfinite(lp) for lp in reply.logprobs)
    assert reply.prompt_tokens == backend.count_tokens(messages)
    assert reply.finish_reason in ("stop", "length")
    assert reply.latency_s > 0


def test_greedy_is_deterministic_and_well_formed(hf):
    a = hf.generate(SKY, max_tokens=12)
    b = hf.generate(SKY, max_tokens=12)
    assert a.text == b.text and a.logprobs == b.logprobs
    assert_well_formed(a, hf, SKY)
    # greedy picks the arg-max: the best other token is never more likely
    assert all(alt <= lp + 1e-6 for lp, alt in zip(a.logprobs, a.alt_logprobs))
    assert a.completion_tokens == 12 and a.finish_reason == "length"


def test_planted_fact_in_the_system_message_is_answered(hf):
    reply = hf.generate(CAT, max_tokens=16)
    assert_well_formed(reply, hf, CAT)
    assert reply.finish_reason == "stop"  # a short answer ends with EOS, which is not counted
    assert "Tom" in reply.text


def test_count_tokens_is_the_chat_template_length(hf):
    for messages in (CAT, COUNT, MULTI_TURN):
        ids = hf.tokenizer.apply_chat_template(
            [{"role": m.role, "content": m.content} for m in messages],
            add_generation_prompt=True, tokenize=True, return_dict=False,
        )
        assert hf.count_tokens(messages) == len(ids)
    longer = [CAT[0], Message("user", CAT[1].content + " Answer in one word.")]
    extra = hf.count_text_tokens(" Answer in one word.")
    assert hf.count_tokens(longer) == hf.count_tokens(CAT) + extra
    assert hf.count_text_tokens("hello world") == 2
    assert hf.count_text_tokens("") == 0


def test_stop_string_truncates_text_and_logprobs(hf):
    full = hf.generate(COUNT, max_tokens=10)
    assert "3," in full.text  # the model counts; otherwise this test checks nothing
    cut = hf.generate(COUNT, max_tokens=10, stop=["3,", "7"])
    assert cut.text == full.text[: full.text.index("3,")]
    assert cut.finish_reason == "stop"
    assert cut.completion_tokens == len(cut.logprobs) == hf.count_text_tokens(cut.text)
    assert cut.logprobs == pytest.approx(full.logprobs[: cut.completion_tokens], abs=1e-5)


def test_generate_many_equals_one_by_one(hf):
    batch = [CAT, COUNT, MULTI_TURN]
    many = hf.generate_many(batch, max_tokens=8)
    singles = [hf.generate(m, max_tokens=8) for m in batch]
    assert [r.text for r in many] == [r.text for r in singles]
    for m, s, msgs in zip(many, singles, batch):
        assert m.prompt_tokens == s.prompt_tokens == hf.count_tokens(msgs)
        assert m.logprobs == pytest.approx(s.logprobs, abs=1e-3)


def test_teacher_forced_scores_match_generation(hf):
    reply = hf.generate(MULTI_TURN, max_tokens=10)
    ids = hf.tokenizer.encode(reply.text, add_special_tokens=False)
    assert len(ids) == reply.completion_tokens
    assert hf.score_completion(MULTI_TURN, ids) == pytest.approx(reply.logprobs, abs=1e-4)


def test_sampling_and_argument_errors(hf):
    reply = hf.generate(SKY, max_tokens=6, temperature=0.8)
    assert 0 < reply.completion_tokens <= 6
    assert all(lp <= 0.0 for lp in reply.logprobs)
    with pytest.raises(InvalidRequest):
        hf.generate(SKY, max_tokens=0)
    with pytest.raises(InvalidRequest):
        hf.generate([Message("robot", "hi")])  # type: ignore[arg-type]
