"""The Responses API (/v1/responses) as a translation over chat completions: request
translation and refusals, the response object and the stream, checked against the openai SDK."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import httpx
import openai
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.responses import (
    EasyInputMessageParam,
    FunctionToolParam,
    Response,
    ResponseFunctionToolCallParam,
    ResponseInputParam,
    ResponseStreamEvent,
)
from openai.types.responses.response_input_item_param import FunctionCallOutput

from memroute.api.responses_output import ResponseEvents, response_object
from memroute.api.responses_request import (
    new_response_id,
    responses_field,
    responses_to_chat_body,
)
from memroute.errors import InvalidRequest

EVENTS = pydantic.TypeAdapter(ResponseStreamEvent)
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOL = {"type": "function", "name": "get_weather", "description": "Weather in a city",
        "parameters": WEATHER, "strict": True}


def chat(body: dict[str, Any]) -> dict[str, Any]:
    return responses_to_chat_body(body)


def refused(body: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        responses_to_chat_body(body)
    assert info.value.status == 400
    return info.value


def completion(content: str | None = "Rex is your dog.", *, tool_calls: list | None = None,
               finish: str | None = None, model: str = "qwen-0.5b",
               usage: dict | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    if finish is None:
        finish = "tool_calls" if tool_calls else "stop"
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": usage or {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
        "memroute": {"tier": 0, "escalated": False, "memories_used": {"count": 1, "ids": ["7"]}},
    }


def call(call_id: str = "call_1", name: str = "get_weather",
         arguments: str = '{"city": "Paris"}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# -- request translation ----------------------------------------------------------------------


def test_string_input_is_one_user_message():
    assert chat({"model": "memroute", "input": "What is my dog's name?"}) == {
        "model": "memroute",
        "messages": [{"role": "user", "content": "What is my dog's name?"}],
    }


def test_instructions_become_the_first_system_message():
    body = chat({"model": "m", "instructions": "Be brief.",
                 "input": [{"role": "system", "content": "Second."},
                           {"role": "user", "content": "hi"}]})
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Second."},
        {"role": "user", "content": "hi"},
    ]


def test_message_items_roles_parts_and_optional_type():
    body = chat({"model": "m", "input": [
        {"role": "developer", "content": "Dev rules."},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "line one"},
                     {"type": "input_text", "text": "line two"}]},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "An answer.", "annotations": []}]},
        {"role": "user", "content": [{"type": "input_text", "text": "thanks"}]},
    ]})
    assert body["messages"] == [
        {"role": "system", "content": "Dev rules."},
        {"role": "user", "content": "line one\nline two"},
        {"role": "assistant", "content": "An answer."},
        {"role": "user", "content": "thanks"},
    ]


def test_function_calls_merge_into_one_assistant_message_and_outputs_become_tool_messages():
    body = chat({"model": "m", "input": [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather",
         "arguments": '{"city": "Paris"}', "id": "fc_1", "status": "completed"},
        {"type": "function_call", "call_id": "c2", "name": "get_weather",
         "arguments": '{"city": "Rome"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "18C"},
        {"type": "function_call_output", "call_id": "c2",
         "output": [{"type": "input_text", "text": "21C"}]},
    ], "tools": [TOOL]})
    assert body["messages"] == [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": None, "tool_calls": [
            call("c1"), call("c2", arguments='{"city": "Rome"}')]},
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
        {"role": "tool", "tool_call_id": "c2", "content": "21C"},
    ]


def test_function_call_after_assistant_text_joins_that_message():
    body = chat({"model": "m", "input": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Let me check."},
        {"type": "function_call", "call_id": "c1", "name": "get_weather",
         "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "18C"},
        {"type": "function_call", "call_id": "c2", "name": "get_weather",
         "arguments": '{"city": "Rome"}'},
        {"type": "function_call_output", "call_id": "c2", "output": "21C"},
    ]})
    assert body["messages"][1:] == [
        {"role": "assistant", "content": "Let me check.", "tool_calls": [call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("c2", arguments='{"city": "Rome"}')]},
        {"role": "tool", "tool_call_id": "c2", "content": "21C"},
    ]


def test_function_tools_become_chat_tools():
    body = chat({"model": "m", "input": "hi", "tools": [
        TOOL, {"type": "function", "name": "now", "parameters": None, "strict": None}]})
    assert body["tools"] == [
        {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                          "parameters": WEATHER, "strict": True}},
        {"type": "function", "function": {"name": "now"}},
    ]


@pytest.mark.parametrize(("given", "expected"), [
    ("auto", "auto"),
    ("none", "none"),
    ("required", "required"),
    ({"type": "function", "name": "get_weather"},
     {"type": "function", "function": {"name": "get_weather"}}),
])
def test_tool_choice_shapes(given, expected):
    body = chat({"model": "m", "input": "hi", "tools": [TOOL], "tool_choice": given})
    assert body["tool_choice"] == expected


def test_settings_are_passed_through_or_renamed():
    controls = {"tier": 1, "store": False}
    body = chat({"model": "m", "input": "hi", "tools": [TOOL], "max_output_tokens": 64,
                 "temperature": 0.2, "top_p": 0.9, "user": "alice", "parallel_tool_calls": False,
                 "stream": True, "memroute": controls})
    assert body["max_completion_tokens"] == 64
    assert "max_output_tokens" not in body
    assert (body["temperature"], body["top_p"], body["user"]) == (0.2, 0.9, "alice")
    assert body["parallel_tool_calls"] is False
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["memroute"] is controls
    assert chat({"model": "m", "input": "hi", "stream": False})["stream"] is False
    assert "stream_options" not in chat({"model": "m", "input": "hi", "stream": False})


def test_memroute_object_is_passed_as_is_even_if_odd():
    # Its fields are checked by the chat side (memroute.api.controls), with the same paths.
    assert chat({"model": "m", "input": "hi", "memroute": "x"})["memroute"] == "x"


def test_ignored_fields_are_accepted_and_dropped():
    body = chat({
        "model": "m", "input": "hi", "metadata": {"run": "7"}, "store": True,
        "include": ["message.output_text.logprobs"], "truncation": "auto",
        "reasoning": {"effort": "low"}, "service_tier": "auto",
        "text": {"format": {"type": "text"}, "verbosity": "low"}, "safety_identifier": "h",
        "background": False, "some_future_field": {"x": 1},
    })
    assert body == {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_nulls_are_absent_values():
    nulls = ["instructions", "tools", "tool_choice", "parallel_tool_calls", "temperature",
             "top_p", "max_output_tokens", "stream", "user", "metadata", "store", "include",
             "truncation", "reasoning", "service_tier", "text", "background",
             "previous_response_id", "conversation", "prompt"]
    body = chat({"model": "m", "input": "hi", **dict.fromkeys(nulls)})
    assert body == {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert chat({"model": "m", "input": "hi", "text": {"format": None}})["messages"]


# -- refusals ---------------------------------------------------------------------------------

USER = {"role": "user", "content": "hi"}
FC = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"}


def body_with(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": [USER], **fields}


REFUSALS = [
    # server-side state
    (body_with(previous_response_id="resp_1"), "previous_response_id"),
    (body_with(conversation="conv_1"), "conversation"),
    (body_with(conversation={"id": "conv_1"}), "conversation"),
    (body_with(prompt={"id": "pmpt_1"}), "prompt"),
    (body_with(background=True), "background"),
    # tools
    (body_with(tools=[{"type": "web_search"}]), "tools[0].type"),
    (body_with(tools=[TOOL, {"type": "file_search", "vector_store_ids": ["v"]}]), "tools[1].type"),
    (body_with(tools=[{"type": "computer_use_preview", "display_width": 1}]), "tools[0].type"),
    (body_with(tools=[{"type": "mcp", "server_label": "x"}]), "tools[0].type"),
    (body_with(tools=[{"name": "f"}]), "tools[0].type"),
    (body_with(tools={"type": "function"}), "tools"),
    (body_with(tools=["get_weather"]), "tools[0]"),
    (body_with(tools=[{"type": "function"}]), "tools[0].name"),
    (body_with(tools=[{"type": "function", "name": "has space"}]), "tools[0].name"),
    (body_with(tools=[{"type": "function", "name": "x" * 65}]), "tools[0].name"),
    (body_with(tools=[TOOL, TOOL]), "tools[1].name"),
    (body_with(tools=[{**TOOL, "parameters": []}]), "tools[0].parameters"),
    (body_with(tools=[{**TOOL, "parameters": {"x": float("nan")}}]), "tools[0].parameters"),
    (body_with(tools=[{**TOOL, "strict": "yes"}]), "tools[0].strict"),
    (body_with(tools=[{**TOOL, "description": 3}]), "tools[0].description"),
    (body_with(tool_choice={"type": "web_search_preview"}), "tool_choice.type"),
    (body_with(tool_choice={"type": "allowed_tools", "mode": "auto", "tools": []}),
     "tool_choice.type"),
    (body_with(tools=[TOOL], tool_choice={"type": "function", "name": "other"}),
     "tool_choice.name"),
    (body_with(tools=[TOOL], tool_choice={"type": "function"}), "tool_choice.name"),
    (body_with(tool_choice="required"), "tool_choice"),
    (body_with(tool_choice="always"), "tool_choice"),
    (body_with(tool_choice=1), "tool_choice"),
    # content
    (body_with(input=[{"role": "user", "content": [
        {"type": "input_text", "text": "look"},
        {"type": "input_image", "image_url": "https://x/y.png"}]}]), "input[0].content[1].type"),
    (body_with(input=[USER, {"role": "user", "content": [
        {"type": "input_file", "file_id": "file_1"}]}]), "input[1].content[0].type"),
    (body_with(input=[{"role": "user", "content": [{"type": "input_audio"}]}]),
     "input[0].content[0].type"),
    (body_with(input=[{"role": "assistant", "content": [
        {"type": "refusal", "refusal": "no"}]}]), "input[0].content[0].type"),
    (body_with(input=[{"role": "user", "content": [{"text": "x"}]}]), "input[0].content[0].type"),
    (body_with(input=[{"role": "user", "content": [{"type": "input_text"}]}]),
     "input[0].content[0].text"),
    (body_with(input=[{"role": "user", "content": ["x"]}]), "input[0].content[0]"),
    (body_with(input=[{"role": "user", "content": None}]), "input[0].content"),
    (body_with(input=[{"role": "user"}]), "input[0].content"),
    (body_with(input=[{"role": "user", "content": 5}]), "input[0].content"),
    (body_with(input=[{"role": "user", "content": "a\x00b"}]), "input[0].content"),
    (body_with(input=[{"role": "user", "content": "a\ud800b"}]), "input[0].content"),
    (body_with(input=[{"role": "user", "content": [
        {"type": "input_text", "text": "\ud800"}]}]), "input[0].content[0].text"),
    # text format
    (body_with(text={"format": {"type": "json_schema", "name": "x", "schema": {}}}),
     "text.format.type"),
    (body_with(text={"format": {"type": "json_object"}}), "text.format.type"),
    (body_with(text={"format": "text"}), "text.format"),
    (body_with(text="text"), "text"),
    # items
    (body_with(input=[USER, FC, {"type": "function_call_output", "output": "18C"}]),
     "input[2].call_id"),
    (body_with(input=[USER, {"type": "function_call", "name": "f", "arguments": "{}"}]),
     "input[1].call_id"),
    (body_with(input=[USER, {**FC, "call_id": ""}]), "input[1].call_id"),
    (body_with(input=[USER, {**FC, "call_id": 7}]), "input[1].call_id"),
    (body_with(input=[USER, {**FC, "name": None}]), "input[1].name"),
    (body_with(input=[USER, {"type": "function_call", "call_id": "c1", "name": "f"}]),
     "input[1].arguments"),
    (body_with(input=[USER, {**FC, "arguments": {"city": "Paris"}}]), "input[1].arguments"),
    (body_with(input=[USER, FC, FC]), "input[2].call_id"),
    (body_with(input=[USER, {"type": "function_call_output", "call_id": "c9", "output": "x"}]),
     "input[1].call_id"),
    (body_with(input=[USER, FC, {"type": "function_call_output", "call_id": "c1"}]),
     "input[2].output"),
    (body_with(input=[USER, FC, {"type": "function_call_output", "call_id": "c1",
                                 "output": [{"type": "input_image", "image_url": "u"}]}]),
     "input[2].output[0].type"),
    (body_with(input=[USER, {"type": "reasoning", "id": "rs_1", "summary": []}]),
     "input[1].type"),
    (body_with(input=[{"type": "item_reference", "id": "msg_1"}]), "input[0].type"),
    (body_with(input=[{"type": "web_search_call", "id": "ws_1"}]), "input[0].type"),
    (body_with(input=[{"type": 3}]), "input[0].type"),
    (body_with(input=[{"content": "hi"}]), "input[0].role"),
    (body_with(input=[{"role": "tool", "content": "hi"}]), "input[0].role"),
    (body_with(input=[{"role": ["user"], "content": "hi"}]), "input[0].role"),
    (body_with(input=[USER, "hi"]), "input[1]"),
    (body_with(input=[]), "input"),
    (body_with(input=""), "input"),
    (body_with(input="  \n"), "input"),
    (body_with(input=None), "input"),
    (body_with(input=7), "input"),
    (body_with(input={"role": "user", "content": "hi"}), "input"),
    (body_with(input="a\x00"), "input"),
    # settings
    ({"input": "hi"}, "model"),
    (body_with(model=3), "model"),
    (body_with(model=" "), "model"),
    (body_with(max_output_tokens=0), "max_output_tokens"),
    (body_with(max_output_tokens="64"), "max_output_tokens"),
    (body_with(max_output_tokens=True), "max_output_tokens"),
    (body_with(max_output_tokens=6.5), "max_output_tokens"),
    (body_with(temperature=3), "temperature"),
    (body_with(temperature="hot"), "temperature"),
    (body_with(temperature=float("nan")), "temperature"),
    (body_with(temperature=float("inf")), "temperature"),
    (body_with(temperature=10**400), "temperature"),
    (body_with(temperature=False), "temperature"),
    (body_with(top_p=1.5), "top_p"),
    (body_with(top_p=[1]), "top_p"),
    (body_with(stream="yes"), "stream"),
    (body_with(parallel_tool_calls=1), "parallel_tool_calls"),
    (body_with(background="no"), "background"),
    (body_with(store="no"), "store"),
    (body_with(user=5), "user"),
    (body_with(user="a\x00"), "user"),
    (body_with(instructions=["be nice"]), "instructions"),
    (body_with(instructions="\ud800"), "instructions"),
    (body_with(metadata=["a"]), "metadata"),
    (body_with(metadata={"a": 1}), "metadata.a"),
    (body_with(include="reasoning.encrypted_content"), "include"),
    (body_with(include=[1]), "include[0]"),
    (body_with(truncation="sometimes"), "truncation"),
    (body_with(truncation=True), "truncation"),
    (body_with(reasoning="high"), "reasoning"),
    (body_with(service_tier=1), "service_tier"),
    ([{"model": "m"}], "body"),
    (None, "body"),
    ("{}", "body"),
]


@pytest.mark.parametrize(("body", "field"), REFUSALS,
                         ids=[f"{i}:{f}" for i, (_, f) in enumerate(REFUSALS)])
def test_refused_with_a_400_naming_the_field(body, field):
    err = refused(body)
    assert err.field == field
    assert err.message


def test_stateful_refusals_say_why():
    assert "whole" in refused(body_with(previous_response_id="resp_1")).message
    assert "function" in refused(body_with(tools=[{"type": "web_search"}])).message


ODD = [None, True, False, 0, -1, 2**70, 10**400, 1.5, float("nan"), float("-inf"), "", " ",
       "x", "\x00", "\ud83d", "auto", "function", [], [None], [{}], {}, {"type": None},
       {"type": "function"}, {"type": "message"}, [[[]]], {"a": {"b": [1, {"c": "d"}]}}]

RICH = {
    "model": "m",
    "instructions": "Be brief.",
    "input": [
        {"role": "developer", "content": "rules"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "a",
                                           "annotations": []}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1",
         "output": [{"type": "input_text", "text": "18C"}]},
        {"role": "user", "content": "and now?"},
    ],
    "tools": [TOOL],
    "tool_choice": {"type": "function", "name": "get_weather"},
    "parallel_tool_calls": True,
    "temperature": 0.5,
    "top_p": 0.5,
    "max_output_tokens": 10,
    "stream": False,
    "user": "alice",
    "metadata": {"k": "v"},
    "store": False,
    "include": [],
    "truncation": "disabled",
    "reasoning": {},
    "service_tier": "auto",
    "text": {"format": {"type": "text"}},
    "memroute": {"tier": 0},
}


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _set(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return doc


def _check_accepted(body: dict[str, Any], translated: dict[str, Any]) -> None:
    assert isinstance(translated["messages"], list) and translated["messages"]
    # `memroute` is passed as is (the chat side checks it); the rest is strict JSON
    json.dumps({k: v for k, v in translated.items() if k != "memroute"}, allow_nan=False)
    # whatever was accepted also renders as a valid response object
    r = response_object(completion(), response_id="resp_f", created_at=1, request=body)
    json.dumps(r, allow_nan=False)
    assert Response.model_validate(r).output_text == "Rex is your dog."


def test_fuzz_odd_json_values_are_400s_or_accepted_never_other_errors():
    rng = random.Random(1234)
    paths = _paths(RICH)
    seen_refused = seen_accepted = 0
    for _ in range(3000):
        body = copy.deepcopy(RICH)
        for _ in range(rng.choice((1, 1, 2))):
            path = rng.choice(paths)
            try:
                body = _set(body, path, copy.deepcopy(rng.choice(ODD)))
            except (KeyError, IndexError, TypeError):
                continue  # the path's parent was replaced by the first mutation
        try:
            translated = responses_to_chat_body(body)
        except InvalidRequest as err:
            assert err.status == 400 and isinstance(err.field, str) and err.field
            seen_refused += 1
            continue
        _check_accepted(body, translated)
        seen_accepted += 1
    assert seen_refused > 500 and seen_accepted > 100


def test_fuzz_top_level_fields_with_odd_values():
    for name in [*RICH, "previous_response_id", "conversation", "prompt", "background"]:
        for value in ODD:
            body = {**copy.deepcopy(RICH), name: copy.deepcopy(value)}
            try:
                translated = responses_to_chat_body(body)
            except InvalidRequest as err:
                # the refusal names that field (or tool_choice, when the tools it names went)
                allowed = {name, "tool_choice"} if name == "tools" else {name}
                assert err.field.split(".")[0].split("[")[0] in allowed, (name, value, err.field)
                continue
            _check_accepted(body, translated)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["type", "role", "content", "text", "call_id", "name", "arguments",
                         "output", "format", "parameters", "x"]), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(["input", "tools", "tool_choice", "text", "metadata",
                              "instructions", "include", "reasoning"]),
       value=JSON)
def test_fuzz_random_json_trees(field, value):
    body = {"model": "m", "input": "hi", field: value}
    try:
        translated = responses_to_chat_body(body)
    except InvalidRequest as err:
        assert err.status == 400 and err.field.split(".")[0].split("[")[0] == field
        return
    _check_accepted(body, translated)


@pytest.mark.parametrize(("chat_field", "expected"), [
    ("max_completion_tokens", "max_output_tokens"),
    ("messages", "input"),
    ("messages[3].content", "input"),
    ("temperature", "temperature"),
    ("memroute.tau", "memroute.tau"),
    (None, None),
])
def test_chat_side_fields_named_as_responses_fields(chat_field, expected):
    assert responses_field(chat_field) == expected


# -- the response object ----------------------------------------------------------------------

REQUEST = {"model": "memroute", "input": "What is my dog's name?", "instructions": "Be brief.",
           "tools": [TOOL], "tool_choice": "auto", "temperature": 0.3, "max_output_tokens": 50,
           "metadata": {"trace": "t1"}, "user": "alice"}


def validated(r: dict[str, Any]) -> Response:
    json.dumps(r, allow_nan=False)
    return Response.model_validate(r)


def test_text_answer():
    r = response_object(completion(), response_id="resp_abc", created_at=1700000001,
                        request=REQUEST)
    resp = validated(r)
    assert resp.output_text == "Rex is your dog."
    assert (r["id"], r["object"], r["created_at"], r["status"]) == (
        "resp_abc", "response", 1700000001, "completed")
    assert r["model"] == "qwen-0.5b"
    assert r["incomplete_details"] is None and r["error"] is None
    assert r["output"] == [{
        "id": "msg_abc", "type": "message", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": "Rex is your dog.", "annotations": [],
                     "logprobs": []}],
    }]
    assert r["usage"] == {"input_tokens": 12,
                          "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                          "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                          "total_tokens": 17}
    assert r["memroute"]["memories_used"]["ids"] == ["7"]


def test_settings_are_echoed():
    r = response_object(completion(), response_id="resp_abc", created_at=1, request=REQUEST)
    assert r["instructions"] == "Be brief."
    assert r["tools"] == [TOOL]
    assert (r["tool_choice"], r["parallel_tool_calls"]) == ("auto", True)
    assert (r["temperature"], r["top_p"], r["max_output_tokens"]) == (0.3, None, 50)
    assert r["metadata"] == {"trace": "t1"} and r["user"] == "alice"
    assert r["text"] == {"format": {"type": "text"}}
    assert r["store"] is False and r["background"] is False
    resp = validated(r)
    assert resp.tools[0].name == "get_weather" and resp.tools[0].strict is True
    bare = response_object(completion(), response_id="resp_b", created_at=1,
                           request={"model": "m", "input": "hi",
                                    "tool_choice": {"type": "function", "name": "get_weather"},
                                    "tools": [{"type": "function", "name": "get_weather"}],
                                    "parallel_tool_calls": False})
    assert bare["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert bare["parallel_tool_calls"] is False and bare["metadata"] == {}
    assert bare["instructions"] is None
    validated(bare)
    validated(response_object(completion(), response_id="resp_n", created_at=1, request=None))


def test_tool_call_answer():
    calls = [call("call_a"), call("call_b", arguments='{"city": "Rome"}')]
    r = response_object(completion(None, tool_calls=calls), response_id="resp_t",
                        created_at=1, request=REQUEST)
    resp = validated(r)
    assert resp.output_text == ""
    assert r["status"] == "completed"
    assert r["output"] == [
        {"id": "fc_t_0", "type": "function_call", "status": "completed",
         "arguments": '{"city": "Paris"}', "call_id": "call_a", "name": "get_weather"},
        {"id": "fc_t_1", "type": "function_call", "status": "completed",
         "arguments": '{"city": "Rome"}', "call_id": "call_b", "name": "get_weather"},
    ]
    assert [o.type for o in resp.output] == ["function_call", "function_call"]


def test_text_and_tool_call_answer():
    r = response_object(completion("Checking.", tool_calls=[call()]), response_id="resp_t",
                        created_at=1, request=REQUEST)
    resp = validated(r)
    assert resp.output_text == "Checking."
    assert [o.type for o in resp.output] == ["message", "function_call"]
    assert resp.output[1].call_id == "call_1"


def test_length_truncated_answer_is_incomplete():
    r = response_object(completion("Rex is", finish="length"), response_id="resp_l",
                        created_at=1, request=REQUEST)
    resp = validated(r)
    assert resp.output_text == "Rex is"
    assert r["status"] == "incomplete"
    assert r["incomplete_details"] == {"reason": "max_output_tokens"}
    assert resp.incomplete_details.reason == "max_output_tokens"
    assert r["output"][0]["status"] == "incomplete"


def test_empty_answer_is_an_empty_message():
    r = response_object(completion(""), response_id="resp_e", created_at=1, request=REQUEST)
    assert validated(r).output_text == ""
    assert [o["type"] for o in r["output"]] == ["message"]


def test_usage_details_and_missing_usage():
    u = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12,
         "prompt_tokens_details": {"cached_tokens": 4},
         "completion_tokens_details": {"reasoning_tokens": 1}}
    r = response_object(completion(usage=u), response_id="resp_u", created_at=1, request=None)
    assert r["usage"]["input_tokens_details"]["cached_tokens"] == 4
    assert r["usage"]["output_tokens_details"]["reasoning_tokens"] == 1
    c = completion()
    del c["usage"], c["memroute"]
    r = response_object(c, response_id="resp_u", created_at=1, request=None)
    assert r["usage"] is None and "memroute" not in r
    validated(r)


def test_completed_at_and_ids():
    r = response_object(completion(), response_id="resp_x", created_at=5, request=None,
                        completed_at=6)
    assert validated(r).completed_at == 6
    rid = new_response_id()
    assert rid.startswith("resp_") and rid != new_response_id()


# -- streaming --------------------------------------------------------------------------------


def parse_frames(frames: list[str]) -> list[Any]:
    events = []
    for frame in frames:
        assert frame.endswith("\n\n")
        head, data = frame[:-2].split("\n")
        assert head.startswith("event: ") and data.startswith("data: ")
        payload = json.loads(data[len("data: "):])
        assert payload["type"] == head[len("event: "):]
        events.append(EVENTS.validate_python(payload))
    return events


def check_stream(frames: list[str], *, final_type: str = "response.completed") -> list[Any]:
    events = parse_frames(frames)
    seqs = [e.sequence_number for e in events]
    assert seqs == list(range(len(events)))
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[-1].type == final_type
    final = events[-1].response
    assert events[0].response.id == final.id and events[0].response.status == "in_progress"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text
    added = {e.output_index: e.item for e in events if e.type == "response.output_item.added"}
    done = {e.output_index: e.item for e in events if e.type == "response.output_item.done"}
    assert sorted(added) == sorted(done) == list(range(len(final.output)))
    for index, item in done.items():
        assert added[index].id == item.id == final.output[index].id
        assert item == final.output[index]
    for e in events:
        if e.type in ("response.output_text.delta", "response.output_text.done",
                      "response.content_part.added", "response.content_part.done"):
            assert e.item_id == final.output[e.output_index].id and e.content_index == 0
        if e.type.startswith("response.function_call_arguments."):
            assert e.item_id == final.output[e.output_index].id
    text_done = [e for e in events if e.type == "response.output_text.done"]
    if text_done:
        assert text_done[0].text == final.output_text
    return events


def stream(answer: dict[str, Any], pieces: list[str], *, request: dict | None = None,
           rid: str = "resp_s") -> list[str]:
    events = ResponseEvents(response_id=rid, created_at=10, model="memroute",
                            request=request or REQUEST)
    frames = events.opening()
    for piece in pieces:
        frames += events.text_delta(piece)
    return frames + events.closing(answer)


def test_stream_text():
    frames = stream(completion(), ["Rex", " is", " your", " dog."])
    events = check_stream(frames)
    assert [e.type for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", *["response.output_text.delta"] * 4,
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed",
    ]
    assert events[-1].response.output_text == "Rex is your dog."
    assert events[-1].response.usage.total_tokens == 17
    assert events[2].item.status == "in_progress" and events[2].item.content == []


def test_stream_without_deltas_sends_the_whole_text_at_closing():
    events = check_stream(stream(completion(), []))
    assert [e.delta for e in events if e.type == "response.output_text.delta"] == [
        "Rex is your dog."]


def test_stream_rest_of_text_and_empty_deltas():
    events = check_stream(stream(completion(), ["", "Rex is", ""]))
    assert [e.delta for e in events if e.type == "response.output_text.delta"] == [
        "Rex is", " your dog."]


def test_stream_tool_calls():
    calls = [call("call_a"), call("call_b", arguments='{"city": "Rome"}')]
    events = check_stream(stream(completion(None, tool_calls=calls), []))
    assert [e.type for e in events] == [
        "response.created", "response.in_progress",
        *["response.output_item.added", "response.function_call_arguments.delta",
          "response.function_call_arguments.done", "response.output_item.done"] * 2,
        "response.completed",
    ]
    assert events[2].item.arguments == "" and events[2].item.status == "in_progress"
    args = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
    assert args == ['{"city": "Paris"}', '{"city": "Rome"}']
    assert [o.call_id for o in events[-1].response.output] == ["call_a", "call_b"]


def test_stream_text_then_tool_call():
    events = check_stream(stream(completion("Checking.", tool_calls=[call()]), ["Check"]))
    assert [o.type for o in events[-1].response.output] == ["message", "function_call"]
    fc = [e for e in events if e.type == "response.output_item.added"][1]
    assert fc.output_index == 1


def test_stream_length_is_incomplete():
    events = check_stream(stream(completion("Rex", finish="length"), ["Rex"]),
                          final_type="response.incomplete")
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"


def test_stream_empty_answer():
    events = check_stream(stream(completion(""), []))
    assert events[-1].response.output_text == ""
    assert [e.type for e in events if e.type.startswith("response.output_item")] == [
        "response.output_item.added", "response.output_item.done"]


def test_stream_opening_is_implicit_and_misuse_raises():
    ev = ResponseEvents(response_id="resp_i", created_at=1, model="m", request=None)
    check_stream(ev.text_delta("Rex is your dog.") + ev.closing(completion()))
    with pytest.raises(RuntimeError):
        ev.closing(completion())
    with pytest.raises(RuntimeError):
        ev.text_delta("more")
    ev = ResponseEvents(response_id="resp_i", created_at=1, model="m", request=None)
    ev.opening()
    with pytest.raises(RuntimeError):
        ev.opening()
    ev.text_delta("Something else")
    with pytest.raises(ValueError):
        ev.closing(completion())
    ev = ResponseEvents(response_id="resp_i", created_at=1, model="m", request=None)
    ev.text_delta("Checking")
    with pytest.raises(ValueError):
        ev.closing(completion(None, tool_calls=[call()]))


def test_stream_non_ascii_text_round_trips():
    text = "Rex — ton chien 🐕\nligne 2"
    events = check_stream(stream(completion(text), ["Rex — ", "ton chien 🐕", "\nligne 2"]))
    assert events[-1].response.output_text == text


# -- the openai SDK against these functions ---------------------------------------------------


def sdk_client(answer: dict[str, Any], seen: list[dict[str, Any]]) -> openai.OpenAI:
    """An SDK client whose /v1/responses is this module over a fixed chat completion."""

    def handle(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/responses"
        body = json.loads(request.content)
        seen.append({"body": body, "chat": responses_to_chat_body(body)})
        if body.get("stream"):
            ev = ResponseEvents(response_id="resp_sdk", created_at=1, model=body["model"],
                                request=body)
            frames = ev.opening()
            for piece in ["Rex", " is", " your", " dog."]:
                frames += ev.text_delta(piece)
            frames += ev.closing(answer)
            return httpx.Response(200, text="".join(frames),
                                  headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=response_object(answer, response_id="resp_sdk",
                                                        created_at=1, request=body))

    transport = httpx.MockTransport(handle)
    return openai.OpenAI(api_key="sk-test", base_url="http://memroute.test/v1",
                         http_client=httpx.Client(transport=transport), max_retries=0)


def sdk_params() -> tuple[ResponseInputParam, list[FunctionToolParam]]:
    tool: FunctionToolParam = {"type": "function", "name": "get_weather",
                               "description": "Weather in a city", "parameters": WEATHER,
                               "strict": True}
    user: EasyInputMessageParam = {"role": "user", "content": "Weather in Paris?"}
    fc: ResponseFunctionToolCallParam = {"type": "function_call", "call_id": "call_1",
                                         "name": "get_weather",
                                         "arguments": '{"city": "Paris"}'}
    out: FunctionCallOutput = {"type": "function_call_output", "call_id": "call_1",
                               "output": "18C and sunny"}
    follow: EasyInputMessageParam = {"type": "message", "role": "user",
                                     "content": [{"type": "input_text", "text": "Thanks!"}]}
    return [user, fc, out, follow], [tool]


EXPECTED_MESSAGES = [
    {"role": "system", "content": "You answer about the weather."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [call("call_1")]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18C and sunny"},
    {"role": "user", "content": "Thanks!"},
]
EXPECTED_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city", "parameters": WEATHER,
    "strict": True}}]


def test_round_trip_sdk_param_shapes_by_hand():
    items, tools = sdk_params()
    body = {"model": "memroute", "input": items, "tools": tools,
            "instructions": "You answer about the weather."}
    translated = responses_to_chat_body(json.loads(json.dumps(body)))
    assert translated == {"model": "memroute", "messages": EXPECTED_MESSAGES,
                          "tools": EXPECTED_TOOLS}


def test_round_trip_through_the_sdk_create():
    seen: list[dict[str, Any]] = []
    client = sdk_client(completion("It is 18C and sunny."), seen)
    items, tools = sdk_params()
    resp = client.responses.create(model="memroute", input=items, tools=tools,
                                   instructions="You answer about the weather.",
                                   max_output_tokens=80, extra_body={"memroute": {"tier": 0}})
    assert resp.output_text == "It is 18C and sunny."
    assert resp.id == "resp_sdk" and resp.status == "completed"
    assert resp.model_extra["memroute"]["tier"] == 0
    translated = seen[0]["chat"]
    assert translated["messages"] == EXPECTED_MESSAGES
    assert translated["tools"] == EXPECTED_TOOLS
    assert translated["max_completion_tokens"] == 80
    assert translated["memroute"] == {"tier": 0}


def test_sdk_create_with_a_tool_call_answer():
    client = sdk_client(completion(None, tool_calls=[call("call_9")]), [])
    items, tools = sdk_params()
    resp = client.responses.create(model="memroute", input=items, tools=tools)
    assert resp.output_text == ""
    assert resp.output[0].type == "function_call"
    assert (resp.output[0].call_id, resp.output[0].name) == ("call_9", "get_weather")


def test_sdk_stream_helper_accumulates_the_events():
    seen: list[dict[str, Any]] = []
    client = sdk_client(completion("Rex is your dog.", tool_calls=[call()]), seen)
    with client.responses.stream(model="memroute", input="Dog?",
                                 tools=sdk_params()[1]) as s:
        types = [e.type for e in s]
        final = s.get_final_response()
    assert seen[0]["chat"]["stream"] is True
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert final.output_text == "Rex is your dog."
    assert final.output[1].parsed_arguments == {"city": "Paris"}


def test_sdk_raw_stream_events():
    client = sdk_client(completion(), [])
    events = list(client.responses.create(model="memroute", input="Dog?", stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == events[-1].response.output_text == "Rex is your dog."
