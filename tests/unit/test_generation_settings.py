"""A request's own generation settings and tools reach the tiers: max_tokens / stop at every tier,
temperature / top_p / seed where the answer is not a confidence probe (router.probe_decoding),
tool calls returned in OpenAI's shape and never stored as an answer, the tool loop's second
step stored as (question, final answer); and every bad value is a 400 naming its field."""

from __future__ import annotations

import pytest

from memroute.accounting.cost import Pricing
from memroute.api.responses import chat_completion
from memroute.api.schema import parse_chat_request
from memroute.config import RetrievalConfig, RouterConfig
from memroute.config.api import ApiLimits
from memroute.errors import ConfigError, InvalidRequest
from memroute.llm.options import GenerationOptions
from memroute.routing.router import RouteRequest, Router, Tier
from memroute.types import Message, ToolCall

from .fakes import FakeBackend, FakeRetriever, words

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string"}}, "required": ["city"]}}}
CALL = ToolCall("call_1", "get_weather", '{"city": "Paris"}')


class Recording(FakeBackend):
    """Records each generate_many call's settings; answers with a tool call when tools are on
    and the conversation does not end with a tool result."""

    def __init__(self, model_id: str, logprob: float = -0.1, **kw) -> None:
        super().__init__(model_id, logprob=logprob, **kw)
        self.calls: list[dict] = []
        self.counted_tools: list[tuple] = []

    def count_tokens(self, messages, *, tools=()):
        self.counted_tools.append(tuple(tools))
        return super().count_tokens(messages) + 10 * len(tools)

    def generate_many(self, batch, *, max_tokens=32, stop=None, temperature=0.0, options=None):
        self.calls.append({"n": len(batch), "max_tokens": max_tokens, "stop": stop,
                           "temperature": temperature, "options": options})
        out = []
        for messages in batch:
            reply = self.generate(messages, max_tokens=max_tokens)
            reply.prompt_tokens = self.count_tokens(messages, tools=options.tools if options and options.tools_on else ())
            if options is not None and options.tools_on and messages[-1].role != "tool":
                reply.text, reply.tool_calls, reply.finish_reason = "", [CALL], "tool_calls"
            out.append(reply)
        return out


def cascade(*backends, **cfg):
    tiers = [Tier(b.model_id, b, Pricing(0.5 * (i + 1))) for i, b in enumerate(backends)]
    return Router(tiers, RouterConfig(tau=0.5, max_tokens=8, **cfg), RetrievalConfig(top_k=3),
                  FakeRetriever())


def parse(**fields):
    body = {"model": "memroute", "messages": [{"role": "user", "content": "hi"}], **fields}
    return parse_chat_request(body, limits=ApiLimits())


# -- validation ------------------------------------------------------------------------------


def test_settings_are_parsed_into_the_request():
    g = parse(max_completion_tokens=5, temperature=0.7, top_p=0.9, stop="END", seed=7,
              presence_penalty=0.5, frequency_penalty=-0.5, logprobs=True, top_logprobs=3,
              tools=[WEATHER], tool_choice="auto", parallel_tool_calls=False,
              response_format={"type": "text"}).generation
    assert (g.max_tokens, g.temperature, g.top_p, g.stop, g.seed) == (5, 0.7, 0.9, ("END",), 7)
    opts = g.options()
    assert opts == GenerationOptions(top_p=0.9, seed=7, presence_penalty=0.5,
                                     frequency_penalty=-0.5, logprobs=True, top_logprobs=3,
                                     tools=(WEATHER,), tool_choice="auto")
    assert parse().generation.options() is None  # nothing set: the engines' defaults


BAD = [
    ({"top_p": 1.5}, "top_p"), ({"top_p": "1"}, "top_p"), ({"seed": 1.5}, "seed"),
    ({"seed": 2**64}, "seed"), ({"stop": ["a", "b", "c", "d", "e"]}, "stop"), ({"stop": [1]}, "stop"),
    ({"presence_penalty": 2.5}, "presence_penalty"), ({"frequency_penalty": -3}, "frequency_penalty"),
    ({"top_logprobs": 2}, "top_logprobs"), ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"logprobs": "yes"}, "logprobs"), ({"tools": {}}, "tools"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].function.name"),
    ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name"),
    ({"tool_choice": "auto"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice.function.name"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"parallel_tool_calls": 1}, "parallel_tool_calls"), ({"n": 2}, "n"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "x",
                                                        "content": "sun"}]}, "messages[1].tool_call_id"),
    ({"messages": [{"role": "user", "content": "hi"},
                   {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {}}]},
                   {"role": "tool", "tool_call_id": "c", "content": "sun"}]},
     "messages[1].tool_calls[0].function.name"),
    ({"messages": [{"role": "user", "content": "hi"},
                   {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                                         "function": {"name": "f", "arguments": 3}}]},
                   {"role": "tool", "tool_call_id": "c", "content": "x"}]},
     "messages[1].tool_calls[0].function.arguments"),
]


@pytest.mark.parametrize("fields,field", BAD)
def test_a_bad_setting_is_a_400_naming_its_field(fields, field):
    with pytest.raises(InvalidRequest) as e:
        parse(**fields)
    assert e.value.field == field and e.value.status == 400


def test_a_tool_loop_conversation_is_accepted_and_its_question_is_the_last_user_turn():
    req = parse(tools=[WEATHER], messages=[
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}])
    assert req.query == "Weather in Paris?"
    assert [m.role for m in req.messages] == ["system", "user", "assistant", "tool"]
    assert req.messages[2].tool_calls == (CALL,)


def test_an_unknown_probe_decoding_is_a_config_error():
    with pytest.raises(ConfigError) as e:
        cascade(FakeBackend("a"), probe_decoding="sometimes")
    assert e.value.field == "router.probe_decoding"


# -- routing ---------------------------------------------------------------------------------


def test_max_tokens_and_stop_reach_every_tier_and_the_probe_is_greedy():
    probe, large = Recording("small", logprob=-2.0), Recording("large")  # the probe escalates
    opts = GenerationOptions(top_p=0.8, seed=3, presence_penalty=0.4)
    res = cascade(probe, large).route_many([RouteRequest(
        "alice", "hi", max_tokens=5, stop=("END",), temperature=1.0, options=opts)])[0]
    assert res.decision.escalated
    [p], [l] = probe.calls, large.calls
    assert (p["max_tokens"], p["stop"], l["max_tokens"], l["stop"]) == (5, ["END"], 5, ["END"])
    # greedy probe: no temperature, no top_p / seed; the penalty stays (it changes greedy too)
    assert p["temperature"] == 0.0 and p["options"] == GenerationOptions(presence_penalty=0.4)
    assert l["temperature"] == 1.0 and l["options"] == opts  # the last tier: the client's
    assert res.decoding == {"temperature": 1.0, "top_p": 0.8, "seed": 3, "max_tokens": 5}


def test_probe_decoding_client_probes_with_the_clients_settings():
    probe, large = Recording("small"), Recording("large")
    opts = GenerationOptions(top_p=0.8, seed=3)
    res = cascade(probe, large, probe_decoding="client").route_many(
        [RouteRequest("alice", "hi", temperature=1.0, options=opts)])[0]
    assert not res.decision.escalated and not large.calls
    assert probe.calls[0]["temperature"] == 1.0 and probe.calls[0]["options"] == opts


def test_a_pinned_tier_answers_with_the_clients_settings():
    probe, large = Recording("small"), Recording("large")
    cascade(probe, large).route_many([RouteRequest("alice", "hi", tier=0, temperature=0.9)])
    assert probe.calls[0]["temperature"] == 0.9 and not large.calls


def test_requests_with_different_settings_share_a_batch_as_one_call_per_setting():
    probe = Recording("small")
    reqs = [RouteRequest("alice", "a", max_tokens=3), RouteRequest("bob", "b", max_tokens=3),
            RouteRequest("carol", "c", max_tokens=4)]
    results = cascade(probe).route_many(reqs)
    assert sorted((c["n"], c["max_tokens"]) for c in probe.calls) == [(1, 4), (2, 3)]
    assert [r.answer for r in results] == ["blue"] * 3
    assert cascade(probe).route("dave", "d").calls[0].output_tokens == 1  # default max_tokens


def test_a_tool_call_is_returned_counted_with_its_tools_and_not_remembered():
    probe = Recording("small")
    router = cascade(probe)
    opts = GenerationOptions(tools=(WEATHER,))
    res = router.route_many([RouteRequest("alice", "Weather in Paris?", options=opts)])[0]
    assert res.tool_calls == [CALL] and res.answer == ""
    assert router.retriever.pairs == []  # not an answer yet
    # the offered tools are prompt tokens of the turn (base), not injected memory
    assert (WEATHER,) in probe.counted_tools and res.calls[0].injected_tokens == 0
    body = chat_completion(res, parse(tools=[WEATHER]), created=0, completion_id="c",
                           finish="tool_calls")
    message = body["choices"][0]["message"]
    assert message == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}


def test_the_tool_loops_second_step_is_answered_after_the_results_and_stored_as_question_answer():
    probe = Recording("small", answer="Sunny in Paris.")
    router = cascade(probe)
    tail = (Message("assistant", "", tool_calls=(CALL,)), Message("tool", "sunny", tool_call_id="call_1"))
    res = router.route_many([RouteRequest("alice", "Weather in Paris?", tail=tail,
                                          options=GenerationOptions(tools=(WEATHER,)))])[0]
    assert res.answer == "Sunny in Paris." and not res.tool_calls
    prompt = probe.prompts[-1]
    assert [m.role for m in prompt] == ["system", "user", "assistant", "tool"]
    [pair] = router.retriever.pairs
    assert (pair.user_text, pair.assistant_text) == ("Weather in Paris?", "Sunny in Paris.")
    # the tool call and its result belong to this turn: base tokens, not history or memory
    call = res.calls[0]
    assert call.history_tokens == 0 and call.injected_tokens == 0


def test_confidence_over_a_tool_calls_tokens_escalates_a_doubtful_call():
    probe, large = Recording("small", logprob=-3.0), Recording("large", logprob=-0.01)
    res = cascade(probe, large).route_many(
        [RouteRequest("alice", "Weather?", options=GenerationOptions(tools=(WEATHER,)))])[0]
    assert res.decision.answered_tier == 1 and res.tool_calls == [CALL]
    assert res.decision.confidences[0] < 0.5 <= res.decision.confidences[1]


def test_logprobs_reach_the_client_in_openais_shape():
    probe = Recording("small")
    res = cascade(probe).route("alice", "hi")
    res.reply.token_texts, res.reply.top_logprobs = ["blue"], [[("blue", -0.1), ("red", -1.1)]]
    body = chat_completion(res, parse(logprobs=True, top_logprobs=2), created=0, completion_id="c")
    [tok] = body["choices"][0]["logprobs"]["content"]
    assert tok["token"] == "blue" and tok["logprob"] == -0.1 and tok["bytes"] == list(b"blue")
    assert [t["token"] for t in tok["top_logprobs"]] == ["blue", "red"]
    plain = chat_completion(cascade(probe).route("bob", "hi"), parse(), created=0, completion_id="c")
    assert plain["choices"][0]["logprobs"] is None


def test_finish_reason_follows_the_answering_reply():
    probe = Recording("small")
    res = cascade(probe).route("alice", "hi")
    res.reply.finish_reason = "length"
    assert chat_completion(res, parse(), created=0, completion_id="c",
                           finish="length")["choices"][0]["finish_reason"] == "length"
    assert words("a b") == 2
