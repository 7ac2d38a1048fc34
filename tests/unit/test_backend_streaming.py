"""Streaming: the hold-back rules, then every back end's ``stream`` (mock; transformers on a tiny
random model; vLLM and OpenAI HTTP over fakes) and the Serve tier / handle that carry it. In all
of them the deltas join to the final text and the final reply is the one ``generate`` gives."""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import threading
import time
from types import SimpleNamespace

import httpx
import pytest

from memroute.errors import BackendError, BackendUnavailable, ConfigError, InvalidRequest
from memroute.llm.chat import render_tool_call
from memroute.llm.mock_backend import MockBackend, SimpleTokenizer
from memroute.llm.openai_http import OpenAIHTTPBackend
from memroute.llm.options import GenerationOptions
from memroute.llm.streaming import StreamText, stream_safe_len
from memroute.types import Message, ModelReply
from memroute.llm.prefix_cache import PrefixCounter

from .test_generation_options import tiny_transformers

Q = [Message("system", "Be brief."), Message("user", "Count to five.")]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


def split(items) -> tuple[list[str], ModelReply]:
    """(deltas, final reply); checks the reply comes last and only once."""
    items = list(items)
    assert isinstance(items[-1], ModelReply)
    assert all(isinstance(i, str) and i for i in items[:-1])
    return items[:-1], items[-1]


def same_reply(a: ModelReply, b: ModelReply) -> None:
    """Equal replies, up to the latency and the (random) tool-call ids."""
    fields = ("text", "model_id", "logprobs", "alt_logprobs", "prompt_tokens",
              "completion_tokens", "finish_reason", "token_texts", "top_logprobs")
    assert {f: getattr(a, f) for f in fields} == {f: getattr(b, f) for f in fields}
    assert [(c.name, c.arguments) for c in a.tool_calls] == [(c.name, c.arguments)
                                                             for c in b.tool_calls]


# -- what may be sent -----------------------------------------------------------------------


def test_text_that_may_start_a_stop_string_is_held_back():
    assert stream_safe_len("1, 2, 3", ["3,"], False) == 6  # "3" may start "3,"
    assert stream_safe_len("1, 2, 3,", ["3,"], False) == 6  # the stop itself is never sent
    assert stream_safe_len("1, 2, 4", ["3,"], False) == 7
    assert stream_safe_len("abc", ["bcd", "cx"], False) == 1  # the longest possible start
    assert stream_safe_len("caf\ufffd", None, False) == 3  # half a UTF-8 character


def test_with_tools_text_that_may_be_a_call_is_held_back():
    assert stream_safe_len("Sure. <tool", None, True) == 5  # and the space before it
    assert stream_safe_len("Sure. <tool_call>{...", None, True) == 5
    assert stream_safe_len("Sure. <b>", None, True) == 9
    assert stream_safe_len('  {"name"', None, True) == 0  # may be a bare JSON call
    assert stream_safe_len("Sure.\n", None, True) == 5
    assert stream_safe_len("Sure.\n", None, False) == 6


def test_stream_text_deltas_join_to_the_final_text():
    text = StreamText(stop=["END"])
    deltas = [text.update(t) for t in ("He", "Hello E", "Hello Ex", "Hello ExEN", "Hello ExENd")]
    assert deltas == ["He", "llo ", "Ex", "", "ENd"]
    assert text.finish("Hello ExENd!") == "!"
    assert text.sent == "Hello ExENd!"


# -- mock -----------------------------------------------------------------------------------


def test_mock_deltas_join_to_the_reply_generate_gives():
    b = MockBackend("m", answer="One, two, three, four, five.", logprob=[-0.1, -0.2])
    for kwargs in ({}, {"max_tokens": 4}, {"stop": [", four"]},
                   {"options": GenerationOptions(logprobs=True, top_logprobs=2)}):
        deltas, reply = split(b.stream(Q, **kwargs))
        assert "".join(deltas) == reply.text
        same_reply(reply, b.generate(Q, **kwargs))
    deltas, _ = split(b.stream(Q))
    assert deltas[:3] == ["One", ",", " two"]  # piece by piece
    deltas, reply = split(b.stream(Q, stop=[", four"]))
    assert reply.text == "One, two, three" and "".join(deltas) == reply.text


def test_mock_tool_call_is_not_streamed_as_text():
    b = MockBackend("m")
    opts = GenerationOptions(tools=(WEATHER,))
    deltas, reply = split(b.stream([Message("user", "Oslo")], max_tokens=64, options=opts))
    assert deltas == [] and reply.text == "" and reply.finish_reason == "tool_calls"
    same_reply(reply, b.generate([Message("user", "Oslo")], max_tokens=64, options=opts))
    # cut by max_tokens: not a call, so the held-back text comes out at the end
    deltas, reply = split(b.stream([Message("user", "Oslo")], max_tokens=4, options=opts))
    assert "".join(deltas) == reply.text == "<tool_call>\n{" and reply.tool_calls == []


def test_mock_token_latency_spreads_the_deltas():
    b = MockBackend("m", answer="a b c d e f g h", token_latency_s=0.05)
    t0 = time.perf_counter()
    stamps = [(time.perf_counter() - t0, item) for item in b.stream(Q)]
    first, last = stamps[0][0], stamps[-2][0]
    assert first < 0.04 and last - first >= 7 * 0.05 * 0.9
    assert stamps[-1][1].latency_s >= 7 * 0.05 * 0.9
    # generate costs the same simulated time
    assert b.generate(Q).latency_s >= 8 * 0.05 * 0.9


def test_mock_stream_errors_come_at_the_first_step(tmp_path):
    with pytest.raises(ConfigError) as e:
        MockBackend("m", token_latency_s=-0.1)
    assert e.value.field == "model.engine_args.token_latency_s"
    b = MockBackend("m", down_when_exists=tmp_path / "down")
    with pytest.raises(InvalidRequest):
        next(b.stream(Q, max_tokens=0))
    (tmp_path / "down").touch()
    with pytest.raises(BackendUnavailable):
        next(b.stream(Q))


# -- transformers (tiny random model) -------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    backend = tiny_transformers(tmp_path_factory)
    yield backend
    backend.close()


def test_transformers_stream_is_the_generate_call(tiny):
    opts = GenerationOptions(logprobs=True, top_logprobs=2)
    deltas, reply = split(tiny.stream(Q, max_tokens=10, options=opts))
    assert len(deltas) > 1 and "".join(deltas) == reply.text
    ref = tiny.generate(Q, max_tokens=10, options=opts)
    assert (reply.text, reply.completion_tokens, reply.token_texts) == (
        ref.text, ref.completion_tokens, ref.token_texts)
    assert reply.logprobs == pytest.approx(ref.logprobs, abs=1e-5)
    # a stop string inside the output: never sent, and the reply is cut like generate's
    stop = [ref.token_texts[3] + ref.token_texts[4]]
    deltas, cut = split(tiny.stream(Q, max_tokens=10, stop=stop))
    assert "".join(deltas) == cut.text == tiny.generate(Q, max_tokens=10, stop=stop).text
    assert stop[0] not in "".join(deltas)


def test_transformers_stream_closed_early_stops_the_generation(tiny):
    it = tiny.stream(Q, max_tokens=2000)
    first = next(it)
    assert isinstance(first, str)
    t0 = time.perf_counter()
    it.close()  # cancels the worker at its next step and waits for it
    assert time.perf_counter() - t0 < 5
    assert not [t for t in threading.enumerate() if t.name == "stream-tiny"]


# -- vLLM over a fake engine ----------------------------------------------------------------


class _Engine:
    """Steps out cumulative outputs of one request, like LLMEngine with CUMULATIVE outputs."""

    def __init__(self, outputs):
        self.outputs, self.added, self.aborted = list(outputs), [], []

    def add_request(self, request_id, prompt, params):
        self.added.append((request_id, prompt, params))
        for o in self.outputs:
            o.request_id = request_id

    def has_unfinished_requests(self):
        return bool(self.outputs)

    def step(self):
        other = SimpleNamespace(request_id="someone-else", finished=False)
        return [other, self.outputs.pop(0)]

    def abort_request(self, ids):
        self.aborted += ids


def _vllm_stream_backend(monkeypatch, answer: str, finish: str = "length"):
    from memroute.llm.vllm_backend import VLLMBackend

    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(
        SamplingParams=lambda **kw: SimpleNamespace(**kw)))
    monkeypatch.setitem(sys.modules, "vllm.inputs", SimpleNamespace(TokensPrompt=dict))
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", SimpleNamespace(
        RequestOutputKind=SimpleNamespace(CUMULATIVE="cumulative")))
    tok = SimpleTokenizer()
    ids = tok.encode(answer)
    outputs = []
    for i in range(len(ids)):
        lp = [{t: SimpleNamespace(logprob=-0.1, decoded_token=tok.decode([t])),
               1: SimpleNamespace(logprob=-3.0, decoded_token="?")} for t in ids[: i + 1]]
        done = i == len(ids) - 1
        out = SimpleNamespace(token_ids=ids[: i + 1], logprobs=lp, text=tok.decode(ids[: i + 1]),
                              finish_reason=finish if done else None, stop_reason=None)
        outputs.append(SimpleNamespace(outputs=[out], prompt_token_ids=[5] * 9, finished=done))
    engine = _Engine(outputs)
    backend = object.__new__(VLLMBackend)
    backend.model_id = "v"
    backend._tokenizer = tok
    backend.prefix_cache, backend.prefix_caching = PrefixCounter(), False  # no engine cache
    backend._llm = SimpleNamespace(llm_engine=engine, request_counter=itertools.count(),
                                   _preprocess_cmpl_one=lambda p: ("rendered", p))
    return backend, engine


def test_vllm_stream_steps_the_engine(monkeypatch):
    backend, engine = _vllm_stream_backend(monkeypatch, "one two three")
    deltas, reply = split(backend.stream(Q, max_tokens=3,
                                         options=GenerationOptions(logprobs=True, seed=3)))
    assert deltas == ["one", " two", " three"] and reply.text == "one two three"
    assert reply.completion_tokens == 3 and reply.finish_reason == "length"
    assert reply.prompt_tokens == 9 and reply.alt_logprobs == [-3.0] * 3
    assert reply.token_texts == ["one", " two", " three"]
    [(request_id, prompt, params)] = engine.added
    assert request_id.startswith("stream-") and prompt[0] == "rendered"
    assert prompt[1]["prompt_token_ids"] == SimpleTokenizer().apply_chat_template(
        [{"role": m.role, "content": m.content} for m in Q], add_generation_prompt=True)
    assert params.output_kind == "cumulative" and params.seed == 3 and params.max_tokens == 3


def test_vllm_stream_closed_early_aborts_the_request(monkeypatch):
    backend, engine = _vllm_stream_backend(monkeypatch, "one two three")
    it = backend.stream(Q)
    assert next(it) == "one"
    it.close()
    assert engine.aborted == [engine.added[0][0]]


def test_vllm_stream_holds_back_a_tool_call(monkeypatch):
    call = render_tool_call("get_weather", '{"city": "Oslo"}')
    backend, _ = _vllm_stream_backend(monkeypatch, call, finish="stop")
    deltas, reply = split(backend.stream(Q, options=GenerationOptions(tools=(WEATHER,))))
    assert deltas == [] and reply.tool_calls[0].name == "get_weather"
    assert reply.finish_reason == "tool_calls"


# -- OpenAI HTTP over a mock transport ------------------------------------------------------


def _sse(chunks) -> bytes:
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def _chunk(content=None, entries=(), finish=None, **extra):
    delta = {} if content is None else {"content": content}
    choice = {"index": 0, "delta": delta, "finish_reason": finish,
              "logprobs": {"content": list(entries)} if entries else None, **extra}
    return {"choices": [choice]}


def _entry(tok, lp):
    return {"token": tok, "logprob": lp, "top_logprobs": [{"token": tok, "logprob": lp},
                                                          {"token": "z", "logprob": lp - 2}]}


def _http(handler):
    seen = []

    def record(request):
        seen.append(request)
        return handler(request)

    backend = OpenAIHTTPBackend("small", "http://127.0.0.1:9/v1", served_model="srv")
    backend._client = httpx.Client(transport=httpx.MockTransport(record))
    return backend, seen


def test_http_stream_reads_server_sent_events():
    chunks = [_chunk("Tom", [_entry("Tom", -0.2)]), _chunk(".", [_entry(".", -0.1)]),
              _chunk("", [_entry("<|im_end|>", -0.05)], finish="stop", stop_reason=None),
              {"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 3}}]
    backend, seen = _http(lambda r: httpx.Response(200, content=_sse(chunks),
                                                   headers={"content-type": "text/event-stream"}))
    deltas, reply = split(backend.stream(Q, options=GenerationOptions(logprobs=True,
                                                                      top_logprobs=2)))
    assert deltas == ["Tom", "."] and reply.text == "Tom."
    assert reply.logprobs == [-0.2, -0.1] and reply.alt_logprobs == [-2.2, -2.1]
    assert reply.prompt_tokens == 11 and reply.finish_reason == "stop"
    assert reply.top_logprobs == [[("Tom", -0.2), ("z", -2.2)], [(".", -0.1), ("z", -2.1)]]
    sent = json.loads(seen[0].content)
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["logprobs"] is True


def test_http_stream_assembles_the_servers_tool_calls():
    chunks = [
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": ""}}]},
            "logprobs": {"content": [_entry("<tool_call>", -0.3)]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": '{"city": '}}]},
            "logprobs": {"content": [_entry("{", -0.2)]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": '"Oslo"}'}}]},
            "logprobs": {"content": [_entry("}", -0.1), _entry("<|im_end|>", -0.01)]},
            "finish_reason": "tool_calls", "stop_reason": None}]},
        {"choices": [], "usage": {"prompt_tokens": 30}},
    ]
    backend, seen = _http(lambda r: httpx.Response(200, content=_sse(chunks)))
    deltas, reply = split(backend.stream(Q, options=GenerationOptions(tools=(WEATHER,))))
    assert deltas == [] and reply.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("call_1", "get_weather", '{"city": "Oslo"}')]
    assert reply.logprobs == [-0.3, -0.2, -0.1]
    assert json.loads(seen[0].content)["tools"] == [WEATHER]


def test_http_stream_errors():
    backend, _ = _http(lambda r: httpx.Response(400, json={"error": {"message": "bad model"}}))
    with pytest.raises(BackendError, match="400: bad model"):
        list(backend.stream(Q))
    backend, _ = _http(lambda r: httpx.Response(200, content=b'data: {"error": "boom"}\n\n'))
    with pytest.raises(BackendError, match="boom"):
        list(backend.stream(Q))

    def refuse(request):
        raise httpx.ConnectError("refused", request=request)

    backend, _ = _http(refuse)
    with pytest.raises(BackendError, match="cannot reach"):
        list(backend.stream(Q))


# -- the Serve tier and its handle ----------------------------------------------------------


def _tier(backend):
    pytest.importorskip("ray")
    from serve.tier import TierDeployment

    tier = object.__new__(TierDeployment.func_or_class)
    tier.backend = backend
    tier._engine_lock = threading.Lock()
    return tier


async def _collect(agen, limit=None):
    out = []
    async for item in agen:
        out.append(item)
        if limit is not None and len(out) >= limit:
            break
    return out


def test_tier_generate_stream_bridges_the_iterator_under_the_engine_lock():
    from serve.tier import GenerateCall

    mock = MockBackend("m", answer="a b c", token_latency_s=0.01)
    tier = _tier(mock)
    held = []
    original = mock.stream

    def watched(*args, **kwargs):
        for item in original(*args, **kwargs):
            held.append(tier._engine_lock.locked())
            yield item

    mock.stream = watched
    call = GenerateCall(prompts=(tuple(Q),), max_tokens=8, options=GenerationOptions(seed=1))
    items = asyncio.run(_collect(tier.generate_stream(call)))
    deltas, reply = split(items)
    assert deltas == ["a", " b", " c"] and all(held)
    assert mock.last_options == GenerationOptions(seed=1)
    same_reply(reply, mock.generate(Q, max_tokens=8))
    assert not tier._engine_lock.locked()


def test_tier_generate_stream_errors_and_early_close():
    from serve.tier import GenerateCall

    tier = _tier(MockBackend("m", answer="a b c d e f", token_latency_s=0.02))
    with pytest.raises(InvalidRequest):
        asyncio.run(_collect(tier.generate_stream(GenerateCall(prompts=(tuple(Q),),
                                                               max_tokens=0))))
    with pytest.raises(InvalidRequest):
        asyncio.run(_collect(tier.generate_stream(GenerateCall(prompts=(tuple(Q), tuple(Q))))))

    async def first_two():
        agen = tier.generate_stream(GenerateCall(prompts=(tuple(Q),)))
        items = await _collect(agen, limit=2)
        await agen.aclose()  # the worker stops and releases the lock
        return items

    assert asyncio.run(first_two()) == ["a", " b"]
    assert not tier._engine_lock.locked()


class _StreamHandle:
    """``handle.options(stream=True).generate_stream.remote(call)`` -> an iterator."""

    def __init__(self, items=None, exc=None):
        self.items, self.exc, self.calls, self.cancelled = items, exc, [], 0
        self.generate_stream = self

    def options(self, **kwargs):
        assert kwargs == {"stream": True}
        return self

    def remote(self, call):
        self.calls.append(call)
        handle = self

        class Responses:
            def __iter__(self):
                if handle.exc is not None:
                    raise handle.exc
                yield from handle.items

            def cancel(self):
                handle.cancelled += 1

        return Responses()


def test_handle_backend_streams_and_translates_errors():
    pytest.importorskip("ray")
    from ray import exceptions as ray_errors

    from serve.handle_backend import HandleBackend

    mock = MockBackend("m", answer="x y")
    items = list(mock.stream(Q))
    handle = _StreamHandle(items)
    opts = GenerationOptions(top_p=0.5)
    got = list(HandleBackend(handle, "m").stream(Q, max_tokens=5, stop=["z"], options=opts))
    assert got == items
    [call] = handle.calls
    assert (call.prompts, call.max_tokens, call.stop, call.options) == ((tuple(Q),), 5, ("z",),
                                                                        opts)
    assert handle.cancelled == 0
    it = HandleBackend(handle, "m").stream(Q)
    next(it)
    it.close()
    assert handle.cancelled == 1  # stopped early: the stream is cancelled

    cause = InvalidRequest("bad", field="messages")
    wrapped = ray_errors.RayTaskError("generate_stream", "Traceback ...", cause)
    with pytest.raises(InvalidRequest) as e:
        list(HandleBackend(_StreamHandle(exc=wrapped), "m").stream(Q))
    assert e.value is cause
    with pytest.raises(BackendUnavailable):
        list(HandleBackend(_StreamHandle(exc=ray_errors.ActorDiedError()), "m").stream(Q))
