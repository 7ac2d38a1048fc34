"""Back-end helpers without models: message conversion, top-2 alternatives, stop-string cuts,
the OpenAI reply parser (over httpx's mock transport), vLLM output trimming, and the factory."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from types import SimpleNamespace

import httpx
import pytest

from memroute.config.schema import ModelConfig
from memroute.errors import BackendError, ConfigError, InvalidRequest
from memroute.llm.chat import chat_prompt_ids, text_token_count
from memroute.llm.factory import ENGINES, build_backend
from memroute.llm.messages import to_chat_dicts
from memroute.llm.openai_http import OpenAIHTTPBackend
from memroute.llm.replies import alt_logprob, cut_at_stop, find_stop, token_starts, tokens_before
from memroute.types import Message
from memroute.llm.prefix_cache import PrefixCounter

# -- message conversion ---------------------------------------------------------------------


def test_to_chat_dicts_accepts_messages_and_mappings():
    out = to_chat_dicts([Message("system", "ctx"), {"role": "user", "content": "q"}])
    assert out == [{"role": "system", "content": "ctx"}, {"role": "user", "content": "q"}]


@pytest.mark.parametrize(
    "messages, field",
    [
        ([], "messages"),
        ("hello", "messages"),
        ([Message("user", "a"), {"role": "robot", "content": "x"}], "messages[1].role"),
        # "tool" is a role now; calls are for assistant turns only and need a function name
        ([{"role": "user", "content": "a",
           "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]}],
         "messages[0].tool_calls"),
        ([{"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {}}]}],
         "messages[0].tool_calls[0].function.name"),
        ([{"role": "tool", "content": "x", "tool_call_id": 3}], "messages[0].tool_call_id"),
        ([{"role": "user", "content": 3}], "messages[0].content"),
        ([("user", "hi")], "messages[0]"),
    ],
)
def test_to_chat_dicts_names_the_bad_message(messages, field):
    with pytest.raises(InvalidRequest) as err:
        to_chat_dicts(messages)
    assert err.value.field == field and err.value.status == 400


class _TemplateTokenizer:
    """Renders like a chat template; returns ids in one of the shapes tokenizers use."""

    def __init__(self, shape: str) -> None:
        self.shape = shape
        self.seen = None

    def apply_chat_template(self, msgs, add_generation_prompt, tokenize):
        assert add_generation_prompt and tokenize
        self.seen = msgs
        ids = list(range(sum(len(m["content"]) for m in msgs) + 3))
        if self.shape == "dict":
            return {"input_ids": ids, "attention_mask": [1] * len(ids)}
        if self.shape == "batched":
            return [ids]
        return ids

    def encode(self, text, add_special_tokens):
        assert add_special_tokens is False
        return text.split()


@pytest.mark.parametrize("shape", ["list", "dict", "batched"])
def test_chat_prompt_ids_unwraps_every_return_shape(shape):
    tok = _TemplateTokenizer(shape)
    ids = chat_prompt_ids(tok, [Message("system", "ab"), Message("user", "cde")])
    assert ids == list(range(8))
    assert tok.seen == [{"role": "system", "content": "ab"}, {"role": "user", "content": "cde"}]
    assert text_token_count(tok, "a b c") == 3


# -- top-2 alternative ----------------------------------------------------------------------


def test_alt_logprob_is_the_best_other_token():
    assert alt_logprob([(5, -0.1), (7, -2.0)], chosen=5) == -2.0
    # the chosen token is not the top-1 (sampling): the alternative is the top-1
    assert alt_logprob([(9, -3.0), (1, -0.5), (2, -0.9)], chosen=9) == -0.5
    # an exact tie (bf16): the alternative equals the chosen log-prob
    assert alt_logprob([(57, -2.4), (504, -2.4)], chosen=57) == -2.4
    # duplicate token strings from a server: one occurrence is the chosen one, the other counts
    assert alt_logprob([("a", -0.2), ("a", -1.5)], chosen="a") == -1.5
    assert alt_logprob([(3, -0.1)], chosen=3) == -math.inf


# -- stop strings ---------------------------------------------------------------------------


def test_find_stop_takes_the_earliest_of_several():
    assert find_stop("1, 2, 3, 4", ["4", ", 3", ""]) == 4
    assert find_stop("abc", ["x"]) is None
    assert find_stop("abc", None) is None


def test_cut_at_stop_drops_the_stop_tokens_and_keeps_a_straddling_one():
    pieces = ["1", ",", " ", "2", ",", " ", "3", ","]
    text = "".join(pieces)
    starts = token_starts(pieces)
    assert starts == [0, 1, 2, 3, 4, 5, 6, 7]
    cut, keep, stopped = cut_at_stop(text, starts, ["3,"])
    assert (cut, keep, stopped) == ("1, 2, ", 6, True)
    # "Hello" straddles the stop "lo wor": its first characters are in the text, so it stays
    pieces = ["He", "llo", " wor", "ld"]
    cut, keep, stopped = cut_at_stop("".join(pieces), token_starts(pieces), ["lo wor"])
    assert (cut, keep, stopped) == ("Hel", 2, True)
    assert cut_at_stop("abc", [0, 1, 2], ["zz"]) == ("abc", 3, False)
    assert tokens_before([0, 2, 5], 0) == 0


# -- OpenAI HTTP reply parsing (mock transport, no server) ----------------------------------


def _entry(tok: str, lp: float, alt_tok: str, alt_lp: float) -> dict:
    return {"token": tok, "logprob": lp,
            "top_logprobs": [{"token": tok, "logprob": lp}, {"token": alt_tok, "logprob": alt_lp}]}


def _completion(content: str, entries: list, finish: str, **extra) -> dict:
    choice = {"index": 0, "message": {"role": "assistant", "content": content},
              "finish_reason": finish, "logprobs": {"content": entries}, **extra}
    return {"choices": [choice], "usage": {"prompt_tokens": 11, "completion_tokens": len(entries)}}


def _http_backend(handler, **kwargs) -> tuple[OpenAIHTTPBackend, list]:
    seen: list = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request)

    backend = OpenAIHTTPBackend("small", "http://127.0.0.1:9/v1", served_model="srv", **kwargs)
    backend._client = httpx.Client(transport=httpx.MockTransport(record),
                                   headers=backend._client.headers)
    return backend, seen


def test_http_vllm_eos_entry_is_excluded():
    entries = [_entry("Tom", -0.2, "Tim", -2.0), _entry(".", -0.1, "!", -3.0),
               _entry("<|im_end|>", -0.05, "\n", -4.0)]
    body = _completion("Tom.", entries, "stop", stop_reason=None)
    backend, seen = _http_backend(lambda r: httpx.Response(200, json=body), api_key="k3y")
    reply = backend.generate([Message("user", "name?")], max_tokens=8, stop=["\n\n"])
    assert reply.text == "Tom." and reply.finish_reason == "stop"
    assert reply.logprobs == [-0.2, -0.1] and reply.alt_logprobs == [-2.0, -3.0]
    assert reply.completion_tokens == 2 and reply.prompt_tokens == 11
    sent = json.loads(seen[0].content)
    assert seen[0].url == "http://127.0.0.1:9/v1/chat/completions"
    assert seen[0].headers["authorization"] == "Bearer k3y"
    assert sent["model"] == "srv" and sent["logprobs"] is True and sent["top_logprobs"] == 2
    assert sent["stop"] == ["\n\n"] and sent["temperature"] == 0.0 and sent["max_tokens"] == 8


def test_http_stop_string_tokens_are_excluded():
    pieces = ["1", ",", " ", "2", ",", " ", "3", ","]
    entries = [_entry(p, -0.5, "x", -1.0) for p in pieces]
    body = _completion("1, 2, ", entries, "stop", stop_reason="3,")
    backend, _ = _http_backend(lambda r: httpx.Response(200, json=body))
    reply = backend.generate([Message("user", "count")], stop=["3,"])
    assert reply.text == "1, 2, " and reply.completion_tokens == 6 == len(reply.logprobs)


def test_http_length_finish_keeps_every_token_and_generic_servers_use_offsets():
    entries = [_entry("a", -0.5, "b", -1.0), _entry("b", -0.6, "c", -1.0)]
    body = _completion("ab", entries, "length")
    backend, _ = _http_backend(lambda r: httpx.Response(200, json=body))
    assert backend.generate([Message("user", "q")]).completion_tokens == 2
    # no stop_reason field (not vLLM): an EOS entry starting at the end of the text is dropped
    eos = entries + [_entry("</s>", -0.1, "c", -2.0)]
    backend, _ = _http_backend(lambda r: httpx.Response(200, json=_completion("ab", eos, "stop")))
    assert backend.generate([Message("user", "q")]).logprobs == [-0.5, -0.6]


def test_http_errors_carry_status_and_server_message():
    err = {"error": {"message": "The model `srv` does not exist.", "type": "NotFoundError",
                     "code": 404}}
    backend, _ = _http_backend(lambda r: httpx.Response(404, json=err))
    with pytest.raises(BackendError) as exc:
        backend.generate([Message("user", "q")])
    assert "404" in str(exc.value) and "The model `srv` does not exist." in str(exc.value)
    assert exc.value.status == 502

    backend, _ = _http_backend(lambda r: httpx.Response(500, text="boom"))
    with pytest.raises(BackendError, match="500: boom"):
        backend.generate([Message("user", "q")])

    no_lp = _completion("hi", [], "stop")
    no_lp["choices"][0]["logprobs"] = None
    backend, _ = _http_backend(lambda r: httpx.Response(200, json=no_lp))
    with pytest.raises(BackendError, match="no logprobs"):
        backend.generate([Message("user", "q")])

    def refuse(request):
        raise httpx.ConnectError("refused", request=request)

    backend, _ = _http_backend(refuse)
    with pytest.raises(BackendError, match="cannot reach"):
        backend.count_tokens([Message("user", "q")])


def test_http_counts_through_tokenize_at_the_server_root():
    backend, seen = _http_backend(lambda r: httpx.Response(200, json={"count": 17, "tokens": []}))
    assert backend.count_tokens([Message("user", "q")]) == 17
    assert backend.count_text_tokens("hello world") == 17
    assert [str(r.url) for r in seen] == ["http://127.0.0.1:9/tokenize"] * 2
    first, second = (json.loads(r.content) for r in seen)
    assert first == {"model": "srv", "messages": [{"role": "user", "content": "q"}],
                     "add_generation_prompt": True}
    assert second == {"model": "srv", "prompt": "hello world", "add_special_tokens": False}


def test_http_generate_many_keeps_order():
    def answer(request):
        q = json.loads(request.content)["messages"][0]["content"]
        return httpx.Response(200, json=_completion(q.upper(), [_entry(q.upper(), -0.1, "z", -1)],
                                                    "length"))

    backend, _ = _http_backend(answer)
    replies = backend.generate_many([[Message("user", w)] for w in "abcde"])
    assert [r.text for r in replies] == list("ABCDE")


def test_http_rejects_a_non_http_base_url():
    with pytest.raises(InvalidRequest) as exc:
        OpenAIHTTPBackend("m", "127.0.0.1:8000")
    assert exc.value.field == "model.base_url"


# -- vLLM output trimming (fake RequestOutput, no engine) -----------------------------------


class _CharTokenizer:
    """Token id i decodes to VOCAB[i]; id 0 is the special EOS."""

    VOCAB = ("<eos>", "1", ",", " ", "2", "3")

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.VOCAB[i] for i in ids if not (skip_special_tokens and i == 0))


def _vllm_output(ids, text, finish, stop_reason):
    lp = [{t: SimpleNamespace(logprob=-0.1 * (k + 1)), 99: SimpleNamespace(logprob=-5.0)}
          for k, t in enumerate(ids)]
    out = SimpleNamespace(token_ids=ids, logprobs=lp, text=text, finish_reason=finish,
                          stop_reason=stop_reason)
    return SimpleNamespace(outputs=[out], prompt_token_ids=[7] * 13)


def _bare_vllm_backend():
    from memroute.llm.vllm_backend import VLLMBackend

    backend = object.__new__(VLLMBackend)  # no engine: only the output parsing is tested
    backend.model_id = "v"
    backend._tokenizer = _CharTokenizer()
    backend.prefix_cache, backend.prefix_caching = PrefixCounter(), False  # no engine cache
    return backend


def test_vllm_reply_drops_eos_and_stop_string_tokens():
    backend = _bare_vllm_backend()
    eos = backend._reply(_vllm_output([1, 2, 0], "1,", "stop", None), [], 0.5)
    assert eos.text == "1," and eos.logprobs == pytest.approx([-0.1, -0.2])
    assert eos.alt_logprobs == [-5.0, -5.0] and eos.prompt_tokens == 13
    # stop string "2," : vLLM cut the text, but reported the tokens "2" and ","
    stop = backend._reply(_vllm_output([1, 2, 3, 4, 2], "1, ", "stop", "2,"), ["2,"], 0.5)
    assert stop.text == "1, " and stop.completion_tokens == 3 == len(stop.alt_logprobs)
    length = backend._reply(_vllm_output([1, 2, 3], "1, ", "length", None), [], 0.5)
    assert length.completion_tokens == 3 and length.finish_reason == "length"


# -- factory --------------------------------------------------------------------------------


def test_factory_unknown_engine_lists_the_available_ones():
    with pytest.raises(ConfigError) as exc:
        build_backend(ModelConfig(engine="x"))
    assert str(exc.value) == "Unknown engine 'x'. Available: mock, openai_http, transformers, vllm"
    assert exc.value.field == "model.engine"
    assert ENGINES.names() == ["mock", "openai_http", "transformers", "vllm"]


def test_factory_openai_http_reads_the_key_env_var(monkeypatch):
    cfg = ModelConfig(name="big", engine="openai_http", base_url="http://127.0.0.1:9/v1",
                      api_key_env="MEMROUTE_TEST_KEY", served_model="srv")
    monkeypatch.delenv("MEMROUTE_TEST_KEY", raising=False)
    with pytest.raises(ConfigError) as exc:
        build_backend(cfg)
    assert exc.value.field == "model.api_key_env" and "MEMROUTE_TEST_KEY" in str(exc.value)
    monkeypatch.setenv("MEMROUTE_TEST_KEY", "s3cret")
    backend = build_backend(cfg)
    assert backend.model_id == "big" and backend.served_model == "srv"
    assert backend._client.headers["authorization"] == "Bearer s3cret"
    backend.close()


def test_factory_config_errors_name_the_field():
    with pytest.raises(ConfigError) as exc:
        build_backend(ModelConfig(engine="openai_http"))
    assert exc.value.field == "model.base_url"
    with pytest.raises(ConfigError) as exc:
        build_backend(ModelConfig(engine="transformers", asset=None, path=None))
    assert exc.value.field == "model.asset"
    with pytest.raises(ConfigError) as exc:
        build_backend(ModelConfig(engine="transformers", path="/nowhere", engine_args={"bogus": 1}))
    assert exc.value.field == "model.engine_args.bogus"


def test_importing_the_back_ends_loads_no_engine():
    code = (
        "import sys, memroute.llm, memroute.llm.factory, memroute.llm.vllm_backend, "
        "memroute.llm.transformers_backend, memroute.llm.openai_http; "
        "print(sorted(m for m in ('torch', 'vllm', 'transformers', 'httpx') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_guard_kernel_scan_gives_llvmlite_lib_a_real_dict():
    # vLLM's kernel scan reads vars(x).get(...) for every module attribute; llvmlite's lib answered
    # __dict__ with a C-function wrapper (no .get) before the guard.
    ffi = pytest.importorskip("llvmlite.binding.ffi")
    from memroute.llm.vllm_backend import guard_kernel_scan

    guard_kernel_scan()
    assert vars(ffi.lib) == {}
    guard_kernel_scan()  # idempotent
    assert vars(ffi.lib).get("kernel") is None
