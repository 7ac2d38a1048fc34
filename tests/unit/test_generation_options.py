"""GenerationOptions through every back end without real models: the mock, transformers on a
tiny random model, vLLM's request building and output parsing (fake engine), the OpenAI request
body and reply (httpx mock transport), and the Serve tier / handle that carry them."""

from __future__ import annotations

import json
import math
import sys
import threading
from types import SimpleNamespace

import httpx
import pytest

from memroute.errors import AssetError
from memroute.llm.chat import render_tool_call
from memroute.llm.mock_backend import MockBackend, SimpleTokenizer
from memroute.llm.openai_http import OpenAIHTTPBackend
from memroute.llm.options import GenerationOptions
from memroute.types import Message, ModelReply, ToolCall
from memroute.llm.prefix_cache import PrefixCounter

Q = [Message("system", "Be brief."), Message("user", "Name three colours.")]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


def assert_client_logprobs(reply: ModelReply, k: int) -> None:
    """token_texts / top_logprobs cover exactly the kept tokens, best first, k per token."""
    n = reply.completion_tokens
    assert reply.token_texts is not None and reply.top_logprobs is not None
    assert len(reply.token_texts) == len(reply.top_logprobs) == len(reply.logprobs) == n
    for row in reply.top_logprobs:
        assert len(row) == k
        assert all(isinstance(t, str) and isinstance(lp, float) for t, lp in row)
        assert [lp for _, lp in row] == sorted((lp for _, lp in row), reverse=True)


# -- mock -----------------------------------------------------------------------------------


def test_mock_keeps_the_options_and_ignores_sampling():
    b = MockBackend("m", answer="Red, green and blue.")
    plain = b.generate(Q)
    assert b.last_options is None
    opts = GenerationOptions(top_p=0.5, seed=3, presence_penalty=1.0, frequency_penalty=-0.5)
    r = b.generate(Q, temperature=0.9, options=opts)
    assert b.last_options == opts
    assert (r.text, r.logprobs, r.alt_logprobs) == (plain.text, plain.logprobs, plain.alt_logprobs)
    assert r.token_texts is None and r.top_logprobs is None  # not asked for
    b.generate_many([Q, Q], options=GenerationOptions(seed=9))
    assert b.last_options.seed == 9


def test_mock_client_logprobs_follow_its_margin_and_the_trimming():
    b = MockBackend("m", answer="one two three four", logprob=[-0.1, -0.4], margin=1.5)
    for k in (0, 1, 3, 20):
        r = b.generate(Q, options=GenerationOptions(logprobs=True, top_logprobs=k))
        assert_client_logprobs(r, k)
        assert "".join(r.token_texts) == r.text == "one two three four"
        if k:
            assert [row[0] for row in r.top_logprobs] == list(zip(r.token_texts, r.logprobs))
        if k >= 2:
            assert [row[1][1] for row in r.top_logprobs] == pytest.approx(r.alt_logprobs)
    cut = b.generate(Q, stop=[" three"], options=GenerationOptions(logprobs=True, top_logprobs=2))
    assert cut.token_texts == ["one", " two"] and len(cut.top_logprobs) == 2
    short = b.generate(Q, max_tokens=3, options=GenerationOptions(logprobs=True, top_logprobs=2))
    assert short.token_texts == ["one", " two", " three"] and short.finish_reason == "length"


# -- transformers on a tiny random model ----------------------------------------------------


def tiny_transformers(folder_factory) -> object:
    """A TransformersBackend over a 1-layer random Llama with SmolLM2's tokenizer (skips
    without the asset). Fast: generation costs milliseconds."""
    torch = pytest.importorskip("torch")
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from memroute.assets.store import AssetStore
    from memroute.llm.transformers_backend import TransformersBackend

    try:
        smol = AssetStore().hf_folder("smollm2-135m")
    except AssetError as exc:
        pytest.skip(f"no smollm2-135m asset: {exc}")
    tok = AutoTokenizer.from_pretrained(str(smol))
    folder = folder_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=4096, eos_token_id=tok.eos_token_id,
                         bos_token_id=tok.bos_token_id)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # sharper logits than the init's near-uniform ones: clear winners
        model.lm_head.weight.mul_(40.0)
    model.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return TransformersBackend("tiny", folder, dtype="float32")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    backend = tiny_transformers(tmp_path_factory)
    yield backend
    backend.close()


def test_penalty_processor_has_openais_semantics():
    torch = pytest.importorskip("torch")
    from memroute.llm.transformers_hooks import PenaltyProcessor

    # prompt [5, 5] (width 2) then generated [1, 1, 3]: the prompt's tokens are not counted
    ids = torch.tensor([[5, 5, 1, 1, 3], [0, 5, 2, 4, 4]])
    scores = torch.zeros(2, 6)
    out = PenaltyProcessor(2, presence=0.5, frequency=0.25)(ids, scores)
    assert out[0].tolist() == pytest.approx([0, -1.0, 0, -0.75, 0, 0])
    assert out[1].tolist() == pytest.approx([0, 0, -0.75, 0, -1.0, 0])
    assert PenaltyProcessor(5, 1.0, 1.0)(ids, scores).tolist() == scores.tolist()  # no output yet


def test_transformers_seed_reproduces_sampling_per_prompt(tiny):
    import torch

    seeded = GenerationOptions(seed=11)
    a = tiny.generate(Q, max_tokens=8, temperature=1.5, options=seeded)
    state = torch.random.get_rng_state()
    b = tiny.generate(Q, max_tokens=8, temperature=1.5, options=seeded)
    assert torch.equal(state, torch.random.get_rng_state())  # the process's generator untouched
    assert (a.text, a.logprobs) == (b.text, b.logprobs)
    other = [tiny.generate(Q, max_tokens=8, temperature=1.5, options=GenerationOptions(seed=s))
             for s in (1, 2, 3)]
    assert any(o.text != a.text for o in other)
    # in a batch each seeded prompt samples as it would alone
    many = tiny.generate_many([Q, [Message("user", "hi")], Q], max_tokens=8, temperature=1.5,
                              options=seeded)
    assert many[0].text == many[2].text == a.text


def test_transformers_top_p_narrows_sampling_to_the_top_token(tiny):
    greedy = tiny.generate(Q, max_tokens=6)
    # a nucleus this small keeps only the most likely token: sampling becomes greedy
    narrow = [tiny.generate(Q, max_tokens=6, temperature=1.0,
                            options=GenerationOptions(top_p=1e-6, seed=s)).text for s in (1, 2)]
    assert narrow == [greedy.text, greedy.text]


def test_transformers_penalties_change_greedy_output(tiny):
    import torch

    embed = tiny.model.get_input_embeddings().weight
    saved = embed.detach().clone()
    try:
        with torch.no_grad():  # every input looks the same: greedy repeats one token
            embed.copy_(saved[:1].expand_as(saved))
        tokens = GenerationOptions(logprobs=True)
        plain = tiny.generate(Q, max_tokens=12, options=tokens)
        assert len(set(plain.token_texts)) == 1 and plain.completion_tokens == 12
        presence = tiny.generate(Q, max_tokens=12, options=GenerationOptions(
            presence_penalty=2.0, logprobs=True))
        frequency = tiny.generate(Q, max_tokens=12, options=GenerationOptions(
            frequency_penalty=2.0, logprobs=True))
    finally:
        with torch.no_grad():
            embed.copy_(saved)
    for penalised in (presence, frequency):
        assert penalised.text != plain.text
        assert len(set(penalised.token_texts)) > 1
        # log-probs stay the raw distribution's: a later token is not the raw top-1
        assert any(lp < alt for lp, alt in zip(penalised.logprobs, penalised.alt_logprobs))
        assert penalised.prompt_tokens == plain.prompt_tokens


def test_transformers_client_logprobs(tiny):
    r = tiny.generate(Q, max_tokens=6, options=GenerationOptions(logprobs=True, top_logprobs=4))
    assert_client_logprobs(r, 4)
    for text, lp, row, alt in zip(r.token_texts, r.logprobs, r.top_logprobs, r.alt_logprobs):
        assert row[0] == (text, pytest.approx(lp, abs=1e-6))  # greedy: the chosen is the best
        assert row[1][1] == pytest.approx(alt, abs=1e-6)
    assert r.token_texts == [tiny.tokenizer.decode([t]) for t in
                             tiny.tokenizer.encode(r.text, add_special_tokens=False)]
    zero = tiny.generate(Q, max_tokens=3, options=GenerationOptions(logprobs=True))
    assert zero.top_logprobs == [[], [], []] and len(zero.token_texts) == 3
    assert tiny.generate(Q, max_tokens=3).token_texts is None


def test_transformers_tools_are_rendered_counted_and_parsed(tiny, monkeypatch):
    opts = GenerationOptions(tools=(WEATHER,))
    r = tiny.generate(Q, max_tokens=4, options=opts)
    assert r.prompt_tokens == tiny.count_tokens(Q, tools=(WEATHER,)) > tiny.count_tokens(Q)
    # the output goes through the parser: fake the model's text with a hermes call
    call = render_tool_call("get_weather", '{"city": "Oslo"}')
    ids = tiny.tokenizer.encode(call, add_special_tokens=False)
    original = tiny.model.generate

    def scripted(input_ids, **kwargs):
        import torch

        out = original(input_ids=input_ids, **{**kwargs, "generation_config": kwargs[
            "generation_config"].__class__(**{**kwargs["generation_config"].to_dict(),
                                             "max_new_tokens": len(ids)})})
        out.sequences[:, input_ids.shape[1]:] = torch.tensor(ids)
        return out

    monkeypatch.setattr(tiny.model, "generate", scripted)
    r = tiny.generate(Q, max_tokens=len(ids), options=opts)
    assert r.finish_reason == "tool_calls" and r.text == ""
    assert [(c.name, json.loads(c.arguments)) for c in r.tool_calls] == [("get_weather",
                                                                          {"city": "Oslo"})]
    assert r.completion_tokens == len(ids) == len(r.logprobs)  # the call's tokens are scored


# -- vLLM: request building and output parsing (no engine) ----------------------------------


class _FakeSamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


@pytest.fixture
def fake_vllm(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(SamplingParams=_FakeSamplingParams))
    monkeypatch.setitem(sys.modules, "vllm.inputs", SimpleNamespace(TokensPrompt=dict))


class _Lp(SimpleNamespace):
    pass


class _CharTokenizer:
    """Token id i decodes to VOCAB[i]; id 0 is the special EOS. No tool-aware template."""

    VOCAB = ("<eos>", "1", ",", " ", "2", "3", "<tool_call>", "{", "}", "x")

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.VOCAB[i] for i in ids if not (skip_special_tokens and i == 0))


def _bare_vllm():
    from memroute.llm.vllm_backend import VLLMBackend

    backend = object.__new__(VLLMBackend)
    backend.model_id = "v"
    backend._llm = SimpleNamespace()
    backend._tokenizer = _CharTokenizer()
    backend.prefix_cache, backend.prefix_caching = PrefixCounter(), False  # no engine cache
    return backend


def test_vllm_sampling_params_carry_the_options(fake_vllm):
    backend = _bare_vllm()
    params, stop = backend._params(8, ["\n", ""], 0.7, None)
    assert stop == ["\n"]
    assert (params.logprobs, params.top_p, params.seed, params.presence_penalty,
            params.frequency_penalty) == (2, 1.0, None, 0.0, 0.0)
    opts = GenerationOptions(top_p=0.9, seed=5, presence_penalty=0.5, frequency_penalty=0.25,
                             logprobs=True, top_logprobs=7)
    params, _ = backend._params(8, None, 0.7, opts)
    assert (params.temperature, params.max_tokens, params.stop) == (0.7, 8, None)
    assert (params.logprobs, params.top_p, params.seed, params.presence_penalty,
            params.frequency_penalty) == (7, 0.9, 5, 0.5, 0.25)
    assert backend._params(8, None, 0.0, GenerationOptions(logprobs=True, top_logprobs=1))[
        0].logprobs == 2


def _output(ids, text, finish, stop_reason, alts=3):
    lp = []
    for k, t in enumerate(ids):
        entry = {t: _Lp(logprob=-0.1 * (k + 1), decoded_token=_CharTokenizer.VOCAB[t])}
        for j in range(alts):
            entry[20 + j] = _Lp(logprob=-5.0 - j, decoded_token=f"alt{j}")
        lp.append(entry)
    out = SimpleNamespace(token_ids=ids, logprobs=lp, text=text, finish_reason=finish,
                          stop_reason=stop_reason)
    return SimpleNamespace(outputs=[out], prompt_token_ids=[7] * 13)


def test_vllm_client_logprobs_cover_the_kept_tokens():
    backend = _bare_vllm()
    opts = GenerationOptions(logprobs=True, top_logprobs=2)
    r = backend._reply(_output([1, 2, 3, 4, 2], "1, ", "stop", "2,"), ["2,"], 0.1, opts)
    assert r.text == "1, " and r.token_texts == ["1", ",", " "]
    assert_client_logprobs(r, 2)
    assert r.top_logprobs[0] == [("1", pytest.approx(-0.1)), ("alt0", -5.0)]
    eos = backend._reply(_output([1, 0], "1", "stop", None), [], 0.1,
                         GenerationOptions(logprobs=True, top_logprobs=3))
    assert eos.token_texts == ["1"] and eos.top_logprobs[0][1:] == [("alt0", -5.0),
                                                                    ("alt1", -6.0)]


def test_vllm_tool_calls_are_parsed_from_the_text():
    backend = _bare_vllm()
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "x"}}</tool_call>'
    ids = [6, 7, 9, 8, 0]  # the token ids only matter for the counts
    opts = GenerationOptions(tools=(WEATHER,))
    r = backend._reply(_output(ids, text, "stop", None), [], 0.1, opts)
    assert r.finish_reason == "tool_calls" and r.text == ""
    assert r.tool_calls[0].name == "get_weather" and r.completion_tokens == 4
    plain = backend._reply(_output(ids, text, "stop", None), [], 0.1, None)
    assert plain.tool_calls == [] and plain.text == text


# -- OpenAI HTTP ----------------------------------------------------------------------------


def _entry(tok, lp, alts=()):
    return {"token": tok, "logprob": lp,
            "top_logprobs": [{"token": tok, "logprob": lp}] + [{"token": t, "logprob": v}
                                                                for t, v in alts]}


def _http(handler, tokenizer=None):
    seen = []

    def record(request):
        seen.append(request)
        return handler(request)

    backend = OpenAIHTTPBackend("small", "http://127.0.0.1:9/v1", served_model="srv")
    backend._client = httpx.Client(transport=httpx.MockTransport(record))
    backend._tokenizer = tokenizer
    return backend, seen


def test_http_body_carries_the_options_and_reads_top_logprobs():
    entries = [_entry("Red", -0.2, [("Blue", -1.0), ("Green", -2.0)]),
               _entry(".", -0.1, [("!", -3.0), (",", -4.0)]),
               _entry("<|im_end|>", -0.01, [("\n", -5.0)])]
    body = {"choices": [{"message": {"content": "Red."}, "finish_reason": "stop",
                         "stop_reason": None, "logprobs": {"content": entries}}],
            "usage": {"prompt_tokens": 9}}
    backend, seen = _http(lambda r: httpx.Response(200, json=body))
    opts = GenerationOptions(top_p=0.8, seed=4, presence_penalty=0.3, frequency_penalty=0.2,
                             logprobs=True, top_logprobs=3)
    r = backend.generate(Q, options=opts)
    sent = json.loads(seen[0].content)
    assert (sent["top_p"], sent["seed"], sent["presence_penalty"], sent["frequency_penalty"],
            sent["top_logprobs"], sent["logprobs"]) == (0.8, 4, 0.3, 0.2, 3, True)
    assert "tools" not in sent and "tool_choice" not in sent
    assert r.token_texts == ["Red", "."]
    assert r.top_logprobs == [[("Red", -0.2), ("Blue", -1.0), ("Green", -2.0)],
                              [(".", -0.1), ("!", -3.0), (",", -4.0)]]
    # without options the body is the one it always was
    backend.generate(Q)
    plain = json.loads(seen[1].content)
    assert not {"top_p", "seed", "presence_penalty", "frequency_penalty"} & set(plain)
    assert plain["top_logprobs"] == 2


def test_http_sends_tools_and_reads_the_servers_tool_calls():
    entries = [_entry("<tool_call>", -0.3), _entry("{...}", -0.2), _entry("</tool_call>", -0.1),
               _entry("<|im_end|>", -0.05)]
    body = {"choices": [{"message": {"content": None, "tool_calls": [
        {"id": "call_x", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        "finish_reason": "tool_calls", "stop_reason": None, "logprobs": {"content": entries}}],
        "usage": {"prompt_tokens": 30}}
    backend, seen = _http(lambda r: httpx.Response(200, json=body))
    history = [*Q, Message("assistant", "", tool_calls=(ToolCall("call_0", "get_weather",
                                                                 '{"city": "Rome"}'),)),
               Message("tool", "rain", tool_call_id="call_0")]
    r = backend.generate(history, options=GenerationOptions(tools=(WEATHER,),
                                                            tool_choice="required"))
    sent = json.loads(seen[0].content)
    assert sent["tools"] == [WEATHER] and sent["tool_choice"] == "required"
    assert sent["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"city": "Rome"}'
    assert sent["messages"][3] == {"role": "tool", "content": "rain", "tool_call_id": "call_0"}
    assert r.finish_reason == "tool_calls" and r.text == ""
    assert r.tool_calls == [ToolCall("call_x", "get_weather", '{"city": "Paris"}')]
    assert r.logprobs == [-0.3, -0.2, -0.1]  # every token of the call, not vLLM's EOS
    # tool_choice "none": no tools go to the server at all
    backend.generate(Q, options=GenerationOptions(tools=(WEATHER,), tool_choice="none"))
    assert "tools" not in json.loads(seen[1].content)


def test_http_parses_hermes_text_when_the_server_does_not():
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    entries = [_entry(text, -0.4), _entry("</s>", -0.1)]
    body = {"choices": [{"message": {"content": text}, "finish_reason": "stop",
                         "logprobs": {"content": entries}}], "usage": {"prompt_tokens": 3}}
    backend, _ = _http(lambda r: httpx.Response(200, json=body))
    r = backend.generate(Q, options=GenerationOptions(tools=(WEATHER,)))
    assert r.finish_reason == "tool_calls" and r.tool_calls[0].name == "get_weather"
    assert r.logprobs == [-0.4]


def test_http_renders_the_fallback_for_a_local_template_without_tools():
    tok = SimpleTokenizer()
    text = render_tool_call("get_weather", '{"city": "Oslo"}')
    pieces = tok.decode(tok.encode(text))
    assert pieces == text
    body = {"choices": [{"message": {"content": text}, "finish_reason": "length",
                         "logprobs": {"content": [_entry(text, -0.4)]}}]}  # no usage
    backend, seen = _http(lambda r: httpx.Response(200, json=body), tokenizer=tok)
    opts = GenerationOptions(tools=(WEATHER,), tool_choice="required")
    r = backend.generate(Q, options=opts)
    sent = json.loads(seen[0].content)
    assert "tools" not in sent and "tool_choice" not in sent
    assert "# Tools" in sent["messages"][0]["content"] and "must" in sent["messages"][0]["content"]
    assert all(set(m) == {"role", "content"} for m in sent["messages"])
    assert r.tool_calls[0].name == "get_weather"
    # the locally counted prompt is the one the server got
    assert r.prompt_tokens == backend.count_tokens(Q, tools=(WEATHER,), tool_choice="required")
    assert r.prompt_tokens == len(tok.encode(SimpleTokenizer.render(sent["messages"])))


def test_http_counts_tools_through_tokenize():
    backend, seen = _http(lambda r: httpx.Response(200, json={"count": 40}))
    assert backend.count_tokens(Q, tools=(WEATHER,)) == 40
    assert json.loads(seen[0].content)["tools"] == [WEATHER]
    backend.count_tokens(Q, tools=(WEATHER,), tool_choice="none")
    assert "tools" not in json.loads(seen[1].content)


# -- the Serve tier and its handle ----------------------------------------------------------


def _tier(backend):
    pytest.importorskip("ray")
    from serve.tier import TierDeployment

    tier = object.__new__(TierDeployment.func_or_class)
    tier.backend = backend
    tier._engine_lock = threading.Lock()
    return tier


class _Recorder(MockBackend):
    def __init__(self):
        super().__init__("rec")
        self.batches = []

    def generate_many(self, batch, **kwargs):
        self.batches.append((len(batch), kwargs.get("options")))
        return super().generate_many(batch, **kwargs)


def test_tier_batches_calls_by_options():
    pytest.importorskip("ray")
    from serve.tier import GenerateCall

    rec = _Recorder()
    tier = _tier(rec)
    a = GenerationOptions(seed=1)
    calls = [GenerateCall(prompts=(tuple(Q),), options=a),
             GenerateCall(prompts=(tuple(Q),)),
             GenerateCall(prompts=(tuple(Q), tuple(Q)), options=GenerationOptions(seed=1)),
             GenerateCall(prompts=(tuple(Q),), options=GenerationOptions(seed=2))]
    out = tier._run(calls)
    assert [len(r) for r in out] == [1, 1, 2, 1]
    assert sorted(rec.batches, key=str) == sorted([(3, a), (1, None), (1, GenerationOptions(seed=2))],
                                                  key=str)
    assert calls[0].group_key() == calls[2].group_key() != calls[3].group_key()
    assert tier.count_tokens(Q, [WEATHER]) == rec.count_tokens(Q, tools=[WEATHER])
    assert tier.count_tokens(Q) == rec.count_tokens(Q)


class _Handle:
    """``handle.<method>.remote(*args).result(...)``, answered by a local tier object."""

    def __init__(self, tier):
        self.tier, self.calls = tier, []

    def __getattr__(self, name):
        handle = self

        class Method:
            def remote(self, *args):
                handle.calls.append((name, args))
                value = (handle.tier._run([args[0]])[0] if name == "generate"
                         else getattr(handle.tier, name)(*args))
                return SimpleNamespace(result=lambda timeout_s=None: value)

        return Method()


def test_handle_backend_passes_options_and_counts_tools():
    pytest.importorskip("ray")
    from serve.handle_backend import HandleBackend

    mock = MockBackend("m")
    handle = _Handle(_tier(mock))
    remote = HandleBackend(handle, "m")
    opts = GenerationOptions(tools=(WEATHER,), logprobs=True, top_logprobs=1)
    r = remote.generate(Q, max_tokens=64, options=opts)
    call = handle.calls[-1][1][0]
    assert call.options == opts and r.tool_calls[0].name == "get_weather"
    assert r.top_logprobs is not None and mock.last_options == opts
    assert remote.count_tokens(Q, tools=(WEATHER,)) == r.prompt_tokens
    assert handle.calls[-1][0] == "count_tokens" and len(handle.calls[-1][1]) == 2
    assert remote.count_tokens(Q) == mock.count_tokens(Q)
    assert handle.calls[-1][1] == (list(Q),)  # the call without tools is unchanged
    local = HandleBackend(handle, "m", tokenizer=SimpleTokenizer())
    n = len(handle.calls)
    assert local.count_tokens(Q, tools=(WEATHER,)) == r.prompt_tokens and len(handle.calls) == n
    assert math.isfinite(r.logprobs[0])
