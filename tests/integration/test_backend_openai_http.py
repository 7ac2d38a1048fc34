"""The OpenAI HTTP back end against a real vLLM OpenAI server started here on 127.0.0.1.

The greedy replies of the in-process engine are computed first (and that engine closed), then
the server starts; its answers must be the same text with the same log-probs.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

pytest.importorskip("vllm")

from memroute.errors import BackendError  # noqa: E402
from memroute.llm.openai_http import OpenAIHTTPBackend  # noqa: E402
from memroute.types import Message  # noqa: E402

pytestmark = pytest.mark.vllm

SERVED = "smollm2-135m"
CAT = [Message("system", "Memory: the user's cat is named Tom."),
       Message("user", "What is my cat's name?")]
COUNT = [Message("user", "Count from 1 to 10, separated by commas.")]
SKY = [Message("system", "Answer with one word."), Message("user", "What color is the sky?")]
PROMPTS = [CAT, COUNT, SKY]
STARTUP_TIMEOUT_S = 300


@pytest.fixture(scope="session")
def smol_folder(assets):
    return assets.hf_folder("smollm2-135m")


@pytest.fixture(scope="module")
def inproc_replies(smol_folder):
    """Greedy replies of the in-process engine, one prompt at a time (batch of 1, as served)."""
    from memroute.llm.vllm_backend import VLLMBackend

    llm = VLLMBackend(SERVED, smol_folder, max_model_len=2048, dtype="bfloat16")
    try:
        return [llm.generate(m, max_tokens=12) for m in PROMPTS]
    finally:
        llm.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group (it spawns an engine-core child), SIGKILL if stuck."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def server(smol_folder, inproc_replies, tmp_path_factory):
    port = _free_port()
    log_path = tmp_path_factory.mktemp("vllm_server") / "server.log"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1",
               OMP_NUM_THREADS=str(len(os.sched_getaffinity(0))))
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the in-process engine set it; not for servers
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(smol_folder),
           "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048",
           "--dtype", "bfloat16", "--enforce-eager", "--served-model-name", SERVED]
    with open(log_path, "wb") as log:
        # Own session: the engine-core child is in the same process group, stopped together.
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM server exited ({proc.returncode}):\n"
                            f"{log_path.read_text(errors='replace')[-3000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM server not healthy after {STARTUP_TIMEOUT_S}s:\n"
                            f"{log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(1)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def http(server):
    backend = OpenAIHTTPBackend("smollm2-135m-http", server, served_model=SERVED, timeout=120)
    yield backend
    backend.close()


def test_greedy_replies_equal_the_in_process_engine(http, inproc_replies):
    for messages, ref in zip(PROMPTS, inproc_replies):
        reply = http.generate(messages, max_tokens=12)
        assert reply.model_id == "smollm2-135m-http"
        assert reply.text == ref.text
        assert reply.completion_tokens == len(reply.logprobs) == len(reply.alt_logprobs) > 0
        assert reply.completion_tokens == ref.completion_tokens
        assert reply.logprobs == pytest.approx(ref.logprobs, abs=1e-3)
        assert reply.alt_logprobs == pytest.approx(ref.alt_logprobs, abs=1e-3)
        assert all(lp <= 0.0 and math.isfinite(lp) for lp in reply.logprobs)
        assert all(alt <= lp + 1e-6 for lp, alt in zip(reply.logprobs, reply.alt_logprobs))
        # /tokenize renders the same chat template as the completion
        assert reply.prompt_tokens == http.count_tokens(messages) == ref.prompt_tokens
        assert reply.finish_reason == ref.finish_reason


def test_counts_match_a_local_tokenizer(http, server, smol_folder):
    local = OpenAIHTTPBackend("local", server, served_model=SERVED, tokenizer_path=smol_folder)
    try:
        for messages in PROMPTS:
            assert local.count_tokens(messages) == http.count_tokens(messages)
        text = "Lisbon, 8 May 2023: moved into a flat near the river."
        assert local.count_text_tokens(text) == http.count_text_tokens(text) > 5
    finally:
        local.close()


def test_stop_string_and_concurrent_batch(http):
    cut = http.generate(COUNT, max_tokens=10, stop=["3,"])
    assert cut.text.endswith("2, ") and "3," not in cut.text and cut.finish_reason == "stop"
    assert cut.completion_tokens == len(cut.logprobs) == http.count_text_tokens(cut.text)
    replies = http.generate_many(PROMPTS, max_tokens=6)
    assert [r.prompt_tokens for r in replies] == [http.count_tokens(m) for m in PROMPTS]
    assert all(0 < r.completion_tokens == len(r.logprobs) <= 6 for r in replies)


def test_unknown_served_model_is_a_backend_error_naming_it(server):
    wrong = OpenAIHTTPBackend("ghost", server, served_model="no-such-model")
    try:
        with pytest.raises(BackendError) as exc:
            wrong.generate(CAT, max_tokens=4)
        assert "no-such-model" in str(exc.value) and "404" in str(exc.value)
        assert exc.value.status == 502
    finally:
        wrong.close()
