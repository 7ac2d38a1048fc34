"""GenerationOptions, tools and streaming on real small models.

SmolLM2-135M on transformers: stop / max_tokens with client log-probs, seed reproducibility, a
presence penalty changing the output, top_logprobs shapes, streaming. Qwen2.5-0.5B on
transformers (marked slow: a real 0.5B model) calls a ``get_weather(city)`` tool for an obvious
question. vLLM (SmolLM2, marked vllm like the other vLLM suites): top_p / seed / logprobs and a
real incremental stream. Each model is loaded once for the module.
"""

from __future__ import annotations

import json
import math
import time

import pytest

from memroute.llm.options import GenerationOptions
from memroute.llm.transformers_backend import TransformersBackend
from memroute.types import Message, ModelReply

COUNT = [Message("user", "Count from 1 to 10, separated by commas.")]
HELLO = [Message("user", "Repeat the word hello five times.")]
SKY = [Message("system", "Answer with one word."), Message("user", "What color is the sky?")]
STORY = [Message("user", "Tell me a short story about a cat.")]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="session")
def smol_folder(assets):
    return assets.hf_folder("smollm2-135m")


@pytest.fixture(scope="module")
def smol(smol_folder):
    backend = TransformersBackend("smollm2-135m", smol_folder, dtype="float32")
    yield backend
    backend.close()


def assert_client_logprobs(reply: ModelReply, k: int) -> None:
    n = reply.completion_tokens
    assert n == len(reply.logprobs) == len(reply.token_texts) == len(reply.top_logprobs) > 0
    for text, lp, row in zip(reply.token_texts, reply.logprobs, reply.top_logprobs):
        assert len(row) == k
        values = [v for _, v in row]
        assert values == sorted(values, reverse=True)
        assert all(v <= 0 and math.isfinite(v) for v in values)
        assert isinstance(text, str)


# -- transformers: SmolLM2 ------------------------------------------------------------------


def test_stop_and_max_tokens_with_client_logprobs(smol):
    opts = GenerationOptions(logprobs=True, top_logprobs=3)
    full = smol.generate(COUNT, max_tokens=10, options=opts)
    assert "3," in full.text and full.finish_reason == "length"
    assert full.completion_tokens == 10
    assert_client_logprobs(full, 3)
    assert "".join(full.token_texts) == full.text
    cut = smol.generate(COUNT, max_tokens=10, stop=["3,"], options=opts)
    assert cut.text == full.text[: full.text.index("3,")] and cut.finish_reason == "stop"
    assert cut.token_texts == full.token_texts[: cut.completion_tokens]
    assert_client_logprobs(cut, 3)
    # greedy: the chosen token heads its own list, and the runner-up is the top-2 alternative
    for text, lp, alt, row in zip(full.token_texts, full.logprobs, full.alt_logprobs,
                                  full.top_logprobs):
        assert row[0][0] == text and row[0][1] == pytest.approx(lp, abs=1e-5)
        assert row[1][1] == pytest.approx(alt, abs=1e-5)


def test_seed_makes_sampling_reproducible(smol):
    opts = GenerationOptions(seed=1234, top_p=0.95)
    a = smol.generate(STORY, max_tokens=12, temperature=1.0, options=opts)
    b = smol.generate(STORY, max_tokens=12, temperature=1.0, options=opts)
    assert (a.text, a.logprobs) == (b.text, b.logprobs)
    others = {smol.generate(STORY, max_tokens=12, temperature=1.0,
                            options=GenerationOptions(seed=s)).text for s in (1, 2, 3)}
    assert others - {a.text}  # other seeds sample other texts


def test_presence_penalty_changes_the_output(smol):
    plain = smol.generate(HELLO, max_tokens=16)
    assert plain.text.lower().count("hello") >= 5
    penalised = smol.generate(HELLO, max_tokens=16,
                              options=GenerationOptions(presence_penalty=1.0))
    assert penalised.text != plain.text
    assert penalised.text.lower().count("hello") < plain.text.lower().count("hello")
    assert penalised.prompt_tokens == plain.prompt_tokens == smol.count_tokens(HELLO)


def test_stream_yields_deltas_before_generation_completes(smol):
    t0 = time.perf_counter()
    stamps = [(time.perf_counter() - t0, item) for item in smol.stream(STORY, max_tokens=32)]
    *deltas, (t_end, reply) = stamps
    assert isinstance(reply, ModelReply) and len(deltas) > 5
    t_first = deltas[0][0]
    assert t_first < 0.5 * t_end, (t_first, t_end)
    assert "".join(d for _, d in deltas) == reply.text
    ref = smol.generate(STORY, max_tokens=32)
    assert reply.text == ref.text and reply.completion_tokens == ref.completion_tokens
    assert reply.logprobs == pytest.approx(ref.logprobs, abs=1e-4)


# -- transformers: Qwen2.5-0.5B with a tool -------------------------------------------------


@pytest.fixture(scope="module")
def qwen(assets):
    backend = TransformersBackend("qwen2.5-0.5b", assets.hf_folder("qwen2.5-0.5b"),
                                  dtype="float32")
    yield backend
    backend.close()


@pytest.mark.slow
def test_qwen_calls_the_weather_tool(qwen):
    question = [Message("user", "What is the weather like in Paris right now?")]
    opts = GenerationOptions(tools=(WEATHER,))
    reply = qwen.generate(question, max_tokens=40, options=opts)
    assert reply.finish_reason == "tool_calls", reply.text
    [call] = reply.tool_calls
    assert call.name == "get_weather" and call.id.startswith("call_")
    assert "paris" in json.loads(call.arguments)["city"].lower()
    assert reply.text == ""
    # the prompt holds the tool (native template) and the log-probs cover the call's tokens
    assert reply.prompt_tokens == qwen.count_tokens(question, tools=(WEATHER,))
    assert reply.prompt_tokens > qwen.count_tokens(question) + 50
    assert reply.completion_tokens == len(reply.logprobs) > 10


# -- vLLM: SmolLM2 --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smol_vllm(smol_folder):
    pytest.importorskip("vllm")
    from memroute.llm.vllm_backend import VLLMBackend

    backend = VLLMBackend("smollm2-135m", smol_folder, max_model_len=2048, dtype="bfloat16")
    yield backend
    backend.close()


@pytest.mark.vllm
def test_vllm_top_p_seed_logprobs_and_stream(smol_vllm):
    llm = smol_vllm
    seeded = GenerationOptions(seed=42, top_p=0.9)
    a = llm.generate(STORY, max_tokens=12, temperature=1.0, options=seeded)
    b = llm.generate(STORY, max_tokens=12, temperature=1.0, options=seeded)
    assert (a.text, a.logprobs) == (b.text, b.logprobs)
    others = {llm.generate(STORY, max_tokens=12, temperature=1.0,
                           options=GenerationOptions(seed=s)).text for s in (1, 2, 3)}
    assert others - {a.text}
    # a nucleus this small keeps only the most likely token: sampling becomes greedy. Each
    # sampled token is the top-1 of its own step (the greedy decode itself can differ on a
    # near-tie between the two kernels: "associated" / "described" on an AMD EPYC host)
    narrow = llm.generate(SKY, max_tokens=6, temperature=1.0, options=GenerationOptions(
        top_p=1e-6, seed=7, logprobs=True, top_logprobs=2))
    assert narrow.top_logprobs and len(narrow.top_logprobs) == len(narrow.logprobs)
    for lp, row in zip(narrow.logprobs, narrow.top_logprobs):
        assert lp >= max(alt for _, alt in row) - 1e-3

    opts = GenerationOptions(logprobs=True, top_logprobs=4)
    full = llm.generate(COUNT, max_tokens=10, options=opts)
    assert_client_logprobs(full, 4)
    assert "".join(full.token_texts) == full.text
    for text, lp, row in zip(full.token_texts, full.logprobs, full.top_logprobs):
        assert row[0] == (text, pytest.approx(lp, abs=1e-6))
    cut = llm.generate(COUNT, max_tokens=10, stop=["3,"], options=opts)
    assert cut.token_texts == full.token_texts[: cut.completion_tokens]

    # the stream steps the engine: deltas join to the reply generate gives
    items = list(llm.stream(COUNT, max_tokens=10, options=opts))
    *deltas, reply = items
    assert len(deltas) > 3 and "".join(deltas) == reply.text == full.text
    assert reply.logprobs == pytest.approx(full.logprobs, abs=1e-6)
    assert reply.top_logprobs == full.top_logprobs
