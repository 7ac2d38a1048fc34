"""Tools: parsing hermes calls, rendering tools and tool turns into prompts (native and fallback
templates), and the mock's deterministic two-step tool loop."""

from __future__ import annotations

import json
import re

import pytest

from memroute.errors import AssetError, ConfigError
from memroute.llm.chat import (
    chat_prompt_ids,
    fallback_dicts,
    render_tool_call,
    template_inputs,
    template_supports_tools,
    tool_instruction,
)
from memroute.llm.messages import to_chat_dicts
from memroute.llm.mock_backend import MockBackend, SimpleTokenizer
from memroute.llm.options import GenerationOptions
from memroute.llm.tool_calls import parse_tool_calls
from memroute.types import Message, ToolCall

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"],
        },
    },
}
CALC = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Arithmetic",
        "parameters": {
            "type": "object",
            "properties": {
                "expr": {"type": "string"},
                "digits": {"type": "integer"},
                "scale": {"type": "number"},
                "exact": {"type": "boolean"},
                "terms": {"type": "array"},
                "note": {"type": ["string", "null"]},
            },
            "required": ["expr", "digits", "scale", "exact", "terms", "note"],
        },
    },
}
TOOLS = (WEATHER, CALC)
ID = re.compile(r"^call_[0-9a-f]{24}$")


# -- parse_tool_calls -----------------------------------------------------------------------


def test_one_hermes_block_with_whitespace_around():
    text = '\n <tool_call>\n  {"name": "get_weather", "arguments": {"city": "Paris"}}  \n</tool_call>\n'
    content, calls = parse_tool_calls(text, TOOLS)
    assert content == ""
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert ID.match(calls[0].id)


def test_several_blocks_and_the_content_around_them():
    text = (
        "Let me check.\n"
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>\n'
        '<tool_call>{"name": "calc", "arguments": {"expr": "1+1"}}</tool_call>'
        " Done."
    )
    content, calls = parse_tool_calls(text, TOOLS)
    assert [c.name for c in calls] == ["get_weather", "calc"]
    assert content.startswith("Let me check.") and content.endswith("Done.")
    assert "<tool_call>" not in content
    assert len({c.id for c in calls}) == 2 and all(ID.match(c.id) for c in calls)


def test_arguments_are_json_text_a_string_is_kept_as_given():
    text = '<tool_call>{"name": "calc", "arguments": "{\\"expr\\": \\"2*3\\"}"}</tool_call>'
    _, [call] = parse_tool_calls(text, TOOLS)
    assert call.arguments == '{"expr": "2*3"}'
    text = '<tool_call>{"name": "calc", "arguments": {"expr": "é"}}</tool_call>'
    _, [call] = parse_tool_calls(text, TOOLS)
    assert call.arguments == json.dumps({"expr": "é"}, ensure_ascii=False)
    _, [call] = parse_tool_calls('<tool_call>{"name": "calc"}</tool_call>', TOOLS)
    assert call.arguments == "{}"


def test_only_offered_names_count_and_malformed_json_stays_content():
    unknown = '<tool_call>{"name": "delete_all", "arguments": {}}</tool_call>'
    assert parse_tool_calls(unknown, TOOLS) == (unknown, [])
    broken = '<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>'
    assert parse_tool_calls(broken, TOOLS) == (broken, [])
    # a malformed block beside a good one: the good one is a call, the bad one stays text
    mixed = broken + '\n<tool_call>{"name": "calc", "arguments": {}}</tool_call>'
    content, calls = parse_tool_calls(mixed, TOOLS)
    assert [c.name for c in calls] == ["calc"] and content == broken
    # no tools offered: nothing is parsed
    good = '<tool_call>{"name": "calc", "arguments": {}}</tool_call>'
    assert parse_tool_calls(good, ()) == (good, [])


def test_a_bare_json_object_naming_an_offered_tool_is_a_call():
    content, [call] = parse_tool_calls(' {"name": "get_weather", "arguments": {"city": "Rome"}}\n',
                                       TOOLS)
    assert content == "" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Rome"}
    other = '{"name": "nope", "arguments": {}}'
    assert parse_tool_calls(other, TOOLS) == (other, [])
    prose = 'The JSON is {"name": "calc", "arguments": {}}'
    assert parse_tool_calls(prose, TOOLS) == (prose, [])


def test_an_unclosed_last_block_is_a_call_when_its_json_is_complete():
    content, [call] = parse_tool_calls('<tool_call>\n{"name": "calc", "arguments": {"expr": "1"}}',
                                       TOOLS)
    assert content == "" and call.name == "calc"
    cut = '<tool_call>\n{"name": "calc", "argum'
    assert parse_tool_calls(cut, TOOLS) == (cut, [])


def test_render_tool_call_round_trips_through_the_parser():
    text = render_tool_call("get_weather", '{"city": "Lima"}')
    assert text == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lima"}}\n</tool_call>'
    _, [call] = parse_tool_calls(text, TOOLS)
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Lima"})


# -- messages with tool turns -----------------------------------------------------------------


CALL = ToolCall("call_" + "a" * 24, "get_weather", '{"city": "Paris"}')
LOOP = [
    Message("system", "Be brief."),
    Message("user", "Weather in Paris?"),
    Message("assistant", "", tool_calls=(CALL,)),
    Message("tool", '{"sky": "sunny"}', tool_call_id=CALL.id),
]


def test_to_chat_dicts_renders_tool_calls_and_tool_messages():
    out = to_chat_dicts(LOOP)
    assert out[2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": CALL.id, "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
    }
    assert out[3] == {"role": "tool", "content": '{"sky": "sunny"}', "tool_call_id": CALL.id}
    # for an OpenAI request the arguments stay JSON text
    raw = to_chat_dicts(LOOP, parse_arguments=False)
    assert raw[2]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'
    # invalid JSON arguments are kept as text even for a template
    bad = Message("assistant", "", tool_calls=(ToolCall("c", "f", "{oops"),))
    assert to_chat_dicts([bad])[0]["tool_calls"][0]["function"]["arguments"] == "{oops"
    # OpenAI-shaped mappings work too (content None for a call-only turn)
    mapping = {"role": "assistant", "content": None,
               "tool_calls": [{"id": "c1", "type": "function",
                               "function": {"name": "f", "arguments": {"x": 1}}}]}
    assert to_chat_dicts([mapping])[0]["tool_calls"][0]["function"]["arguments"] == {"x": 1}


class NativeTokenizer:
    """A template that knows tools: records what it is given; one id per character."""

    chat_template = "{% if tools %}{{ tools }}{% endif %}{% for m in messages %}...{% endfor %}"

    def __init__(self) -> None:
        self.calls: list[tuple[list, dict]] = []

    def apply_chat_template(self, conversation, add_generation_prompt, tokenize, **kwargs):
        assert add_generation_prompt and tokenize
        self.calls.append((conversation, kwargs))
        return list(range(len(json.dumps([conversation, kwargs]))))


class PlainTokenizer(NativeTokenizer):
    """A template without tools (SmolLM2's kind); it must never get ``tools=``."""

    chat_template = "{% for m in messages %}{{ m['role'] }}{{ m['content'] }}{% endfor %}"

    def apply_chat_template(self, conversation, add_generation_prompt, tokenize):
        for m in conversation:
            assert set(m) == {"role", "content"} and m["role"] != "tool"
        return super().apply_chat_template(conversation, add_generation_prompt, tokenize)


def test_template_support_is_detected_from_the_template_text():
    assert template_supports_tools(NativeTokenizer())
    assert not template_supports_tools(PlainTokenizer())
    assert not template_supports_tools(SimpleTokenizer())
    assert template_supports_tools(type("T", (), {"chat_template": {"default": "x",
                                                                    "tool_use": "{{ tools }}"}})())


def test_native_template_gets_tools_and_the_required_instruction():
    tok = NativeTokenizer()
    chat_prompt_ids(tok, LOOP[:2], TOOLS)
    conv, kwargs = tok.calls[-1]
    assert kwargs == {"tools": [WEATHER, CALC]}
    assert conv == to_chat_dicts(LOOP[:2])
    chat_prompt_ids(tok, LOOP[:2], TOOLS, "required")
    conv, _ = tok.calls[-1]
    assert conv[0]["content"].startswith("Be brief.") and "must" in conv[0]["content"]
    chat_prompt_ids(tok, LOOP[1:2], TOOLS, {"type": "function", "function": {"name": "calc"}})
    conv, _ = tok.calls[-1]
    assert conv[0]["role"] == "system" and "'calc'" in conv[0]["content"]
    # "none": no tools rendered; the tool history is the template's to render
    chat_prompt_ids(tok, LOOP, TOOLS, "none")
    conv, kwargs = tok.calls[-1]
    assert kwargs == {} and conv == to_chat_dicts(LOOP)
    # without tools and tool turns the call is exactly the plain one
    chat_prompt_ids(tok, LOOP[:2])
    assert tok.calls[-1] == (to_chat_dicts(LOOP[:2]), {})


def test_fallback_template_gets_an_instruction_and_text_only_turns():
    tok = PlainTokenizer()
    ids = chat_prompt_ids(tok, LOOP, TOOLS)
    conv, kwargs = tok.calls[-1]
    assert kwargs == {} and len(ids) > 0
    system = conv[0]["content"]
    assert system.startswith("Be brief.\n\n# Tools")
    for tool in TOOLS:  # name, description and the JSON-schema parameters of each function
        fn = tool["function"]
        assert json.dumps({"name": fn["name"], "description": fn["description"],
                           "parameters": fn["parameters"]}) in system
    assert "<tool_call>" in system and '"arguments": <args-json-object>' in system
    assert conv[2] == {"role": "assistant", "content": render_tool_call("get_weather",
                                                                         CALL.arguments)}
    assert conv[3] == {"role": "user",
                       "content": '<tool_response>\n{"sky": "sunny"}\n</tool_response>'}
    assert "must" not in system
    chat_prompt_ids(tok, LOOP[:2], TOOLS, "required")
    assert tok.calls[-1][0][0]["content"].endswith("You must answer with at least one function call.")
    # "none": no instruction, but the tool turns still become text a plain template can take
    chat_prompt_ids(tok, LOOP, TOOLS, "none")
    conv, _ = tok.calls[-1]
    assert conv[0] == {"role": "system", "content": "Be brief."}
    assert conv[3]["role"] == "user" and "<tool_response>" in conv[3]["content"]


def test_fallback_merges_consecutive_tool_results_and_keeps_assistant_content():
    dicts = to_chat_dicts([
        Message("user", "two cities"),
        Message("assistant", "Checking.", tool_calls=(CALL, ToolCall("c2", "get_weather",
                                                                      '{"city": "Rome"}'))),
        Message("tool", "sunny", tool_call_id=CALL.id),
        Message("tool", "rain", tool_call_id="c2"),
    ])
    out = fallback_dicts(dicts, [WEATHER])
    assert out[0]["role"] == "system" and out[0]["content"] == tool_instruction([WEATHER])
    assert out[2]["content"].startswith("Checking.\n<tool_call>")
    assert out[2]["content"].count("<tool_call>") == 2
    assert out[3] == {"role": "user", "content": "<tool_response>\nsunny\n</tool_response>\n"
                                                 "<tool_response>\nrain\n</tool_response>"}
    assert len(out) == 4


def test_simple_tokenizer_takes_tools_directly_like_chat_prompt_ids():
    tok = SimpleTokenizer()
    conv, tools = template_inputs(tok, LOOP, TOOLS)
    assert tools is None  # fallback rendering
    direct = tok.apply_chat_template(to_chat_dicts(LOOP), add_generation_prompt=True,
                                     tokenize=False, tools=list(TOOLS))
    assert direct == SimpleTokenizer.render(conv)
    assert tok.apply_chat_template(to_chat_dicts(LOOP), add_generation_prompt=True,
                                   tools=list(TOOLS)) == chat_prompt_ids(tok, LOOP, TOOLS)


@pytest.mark.parametrize("asset, native", [("smollm2-135m", False), ("qwen2.5-0.5b", True)])
def test_real_chat_templates(assets, asset, native):
    from transformers import AutoTokenizer

    try:
        folder = assets.hf_folder(asset)
    except AssetError as exc:
        pytest.skip(f"no {asset} asset: {exc}")
    tok = AutoTokenizer.from_pretrained(str(folder))
    assert template_supports_tools(tok) is native
    with_tools = chat_prompt_ids(tok, LOOP[:2], [WEATHER])
    assert len(with_tools) > len(chat_prompt_ids(tok, LOOP[:2])) + 20
    text = tok.decode(chat_prompt_ids(tok, LOOP, [WEATHER]))
    assert '"name": "get_weather"' in text and "Current weather of a city" in text
    # the assistant's call is rendered with its arguments as an object
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in text
    assert '<tool_response>\n{"sky": "sunny"}\n</tool_response>' in text


# -- the mock's tool loop -------------------------------------------------------------------


def test_mock_two_step_tool_loop():
    b = MockBackend("m", tool_answer="In {query} it is {tool_result}.", logprob=[-0.1, -0.3])
    opts = GenerationOptions(tools=TOOLS)
    first = [Message("system", "Be brief."), Message("user", "Paris")]
    call = b.generate(first, max_tokens=64, options=opts)
    assert call.finish_reason == "tool_calls" and call.text == ""
    [tc] = call.tool_calls
    assert tc.name == "get_weather" and json.loads(tc.arguments) == {"city": "Paris"}
    # the call's tokens are generated like an answer: counted, log-probs cycled over them
    hermes = render_tool_call(tc.name, tc.arguments)
    assert call.completion_tokens == len(call.logprobs) == b.count_text_tokens(hermes)
    assert call.logprobs[:4] == [-0.1, -0.3, -0.1, -0.3]
    assert call.prompt_tokens == b.count_tokens(first, tools=TOOLS)
    assert call.prompt_tokens > b.count_tokens(first)

    second = [*first, Message("assistant", "", tool_calls=(tc,)),
              Message("tool", "sunny", tool_call_id=tc.id)]
    answer = b.generate(second, max_tokens=64, options=opts)
    assert answer.text == "In Paris it is sunny." and answer.tool_calls == []
    assert answer.finish_reason == "stop"
    assert answer.prompt_tokens == b.count_tokens(second, tools=TOOLS)
    # the default tool answer echoes the tool's result
    assert MockBackend("m").generate(second, options=opts).text == "sunny"


def test_mock_forced_tool_and_argument_types():
    b = MockBackend("m")
    q = [Message("user", "what is 2+2")]
    forced = GenerationOptions(tools=TOOLS, tool_choice={"type": "function",
                                                         "function": {"name": "calc"}})
    r = b.generate(q, max_tokens=128, options=forced)
    assert [c.name for c in r.tool_calls] == ["calc"]
    assert json.loads(r.tool_calls[0].arguments) == {
        "expr": "what is 2+2", "digits": 1, "scale": 1, "exact": True, "terms": [],
        "note": "what is 2+2",
    }
    assert r.prompt_tokens == b.count_tokens(q, tools=TOOLS, tool_choice=forced.tool_choice)
    assert r.prompt_tokens > b.count_tokens(q, tools=TOOLS)  # the instruction is in the prompt
    required = GenerationOptions(tools=TOOLS, tool_choice="required")
    assert b.generate(q, max_tokens=64, options=required).tool_calls[0].name == "get_weather"
    # tool_choice "none": a plain answer over the plain prompt
    none = b.generate(q, options=GenerationOptions(tools=TOOLS, tool_choice="none"))
    assert none.text == "I do not know." and none.tool_calls == []
    assert none.prompt_tokens == b.count_tokens(q)


def test_mock_tool_call_cut_by_max_tokens_is_not_a_call():
    b = MockBackend("m")
    r = b.generate([Message("user", "Paris")], max_tokens=5,
                   options=GenerationOptions(tools=(WEATHER,)))
    assert r.finish_reason == "length" and r.tool_calls == []
    assert r.text.startswith("<tool_call>") and r.completion_tokens == 5


def test_mock_tool_answer_template_is_checked():
    with pytest.raises(ConfigError) as e:
        MockBackend("m", tool_answer="{result}")
    assert e.value.field == "model.engine_args.tool_answer"
    assert "{tool_result}" in str(e.value)
