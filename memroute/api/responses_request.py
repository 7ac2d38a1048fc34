"""OpenAI's Responses API (``POST /v1/responses``) as a translation over the Chat Completions flow.

Three pure pieces, no server state:

* :func:`responses_to_chat_body` turns a Responses request into the equivalent
  ``/v1/chat/completions`` body, which then goes through :func:`memroute.api.schema.parse_chat_request`
  and the usual cascade;
* :func:`response_object` renders the resulting ``chat.completion`` body as a Responses
  ``response`` object;
* :class:`ResponseEvents` renders the same answer as the Responses stream (``event:`` + ``data:``
  server-sent events: ``response.created`` ... ``response.completed``).

Translation (Responses name -> chat name):

* ``input``: a string is one user message; a list holds ``message`` items (``role`` user, system,
  developer -> system, assistant; ``content`` a string or ``input_text`` / ``output_text`` parts,
  joined by newlines as the chat side joins text parts; ``type: "message"`` optional),
  ``function_call`` items (consecutive ones become one assistant message with ``tool_calls``,
  merged into a directly preceding assistant text message) and ``function_call_output`` items
  (a ``tool`` message; its ``call_id`` must name an earlier ``function_call`` of the input);
* ``instructions`` -> a system message first; ``tools`` (flat function tools) -> chat tools;
  ``tool_choice`` -> the chat shape; ``max_output_tokens`` -> ``max_completion_tokens``;
* ``temperature``, ``top_p``, ``user``, ``parallel_tool_calls``, ``stream`` and memroute's own
  ``memroute`` object are passed through (``stream: true`` also asks the chat side for usage);
* accepted and ignored: ``metadata`` (echoed back), ``store``, ``include``, ``truncation``,
  ``reasoning``, ``service_tier``, ``text`` whose ``format`` is ``{"type": "text"}`` (and
  ``text.verbosity``), and fields memroute does not know (as the chat side ignores them).

Refused with a 400 (:class:`InvalidRequest`) whose ``field`` is the Responses path of the value
(``input[2].call_id``, ``input[1].content[0].type``, ``tools[0].type``, ``max_output_tokens``):

* ``previous_response_id``, ``conversation`` and ``prompt``: memroute keeps no server-side
  response, conversation or prompt state; send the whole input each time (remembering the
  user across requests is memroute's memory, keyed by ``user``);
* ``background: true`` (no stored responses to poll);
* tools other than ``function`` (``web_search``, ``file_search``, ``computer``, ``mcp``, ...)
  and a ``tool_choice`` naming such a tool, an unknown function, or ``required`` without tools;
* content parts other than text (``input_image``, ``input_file``, ``refusal``, ...), input items
  other than messages and function calls/outputs (``reasoning``, ``item_reference``, ...);
* ``text.format`` other than ``text`` (``json_schema``, ``json_object``);
* a malformed item or value (a wrong JSON type, a missing ``call_id``, a duplicate call id or tool
  name, a string with NUL or a lone surrogate), and an empty ``input``.

Limits that depend on the server (token budget, message count, served model names) are left to
the chat parser, which names chat paths (``messages[3].content``, ``max_completion_tokens``).
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Mapping
from typing import Any

from memroute.api.messages import check_text as _check_text
from memroute.api.messages import json_type as _json_type
from memroute.api.messages import text_content as _text_content
from memroute.api.responses_tools import chat_tool as _chat_tool
from memroute.api.responses_tools import parse_tool_choice as _tool_choice
from memroute.api.responses_tools import parse_tools as _tools
from memroute.api.responses_tools import required_string as _required_string
from memroute.errors import InvalidRequest

MESSAGE_ROLES = ("user", "system", "developer", "assistant")
TEXT_PARTS = ("input_text", "output_text")
TRUNCATIONS = ("auto", "disabled")
# Fields that need state memroute does not keep: refused whenever they carry a value.
STATEFUL = {
    "previous_response_id": "memroute keeps no server-side responses; send the whole "
                            "conversation in input (memory across requests is memroute's job)",
    "conversation": "memroute keeps no server-side conversations; send the whole conversation "
                    "in input (memory across requests is memroute's job)",
    "prompt": "memroute keeps no stored prompt templates; send instructions and input instead",
}
# OpenAI's function name rule.
# Lone UTF-16 surrogate halves and NUL: what the chat side refuses (memroute.api.schema).
_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")


def new_response_id() -> str:
    return f"resp_{uuid.uuid4().hex}"


# -- request ----------------------------------------------------------------------------------


def responses_to_chat_body(body: Any) -> dict[str, Any]:
    """The ``/v1/chat/completions`` body equivalent to the Responses request ``body`` (decoded
    JSON). Raises :class:`InvalidRequest` naming the Responses field for anything refused."""
    if not isinstance(body, dict):
        raise InvalidRequest(
            f"the request body must be a JSON object, got {_json_type(body)}", field="body"
        )
    for name, why in STATEFUL.items():
        if body.get(name) is not None:
            raise InvalidRequest(f"{name} is not supported: {why}", field=name)
    settings = echoed_settings(body)
    model = _model(body)
    messages: list[dict[str, Any]] = []
    if settings["instructions"] is not None:
        messages.append({"role": "system", "content": settings["instructions"]})
    messages += _input(body.get("input"))

    chat: dict[str, Any] = {"model": model, "messages": messages}
    if settings["tools"]:
        chat["tools"] = [_chat_tool(t) for t in settings["tools"]]
    choice = settings["tool_choice"]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = (
            {"type": "function", "function": {"name": choice["name"]}}
            if isinstance(choice, dict) else choice
        )
    if body.get("parallel_tool_calls") is not None:
        chat["parallel_tool_calls"] = settings["parallel_tool_calls"]
    for name in ("temperature", "top_p", "user"):
        if settings[name] is not None:
            chat[name] = settings[name]
    if settings["max_output_tokens"] is not None:
        chat["max_completion_tokens"] = settings["max_output_tokens"]
    stream = _opt_bool(body, "stream")
    if stream is not None:
        chat["stream"] = stream
        if stream:  # the closing response.completed carries usage
            chat["stream_options"] = {"include_usage": True}
    if "memroute" in body:
        chat["memroute"] = body["memroute"]
    return chat


def responses_field(chat_field: str | None) -> str | None:
    """The Responses name of a field the chat parser refused in a translated body, for the
    error's ``param``: ``max_completion_tokens`` -> ``max_output_tokens``; a ``messages`` path
    -> ``input`` (a chat message does not map back to one input item: instructions, merged
    function calls); any other field has the same name on both sides."""
    if chat_field is None:
        return None
    if chat_field == "max_completion_tokens":
        return "max_output_tokens"
    if chat_field == "messages" or chat_field.startswith(("messages[", "messages.")):
        return "input"
    return chat_field


def echoed_settings(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request's settings a ``response`` object echoes, validated and with OpenAI's
    defaults; also checks the accepted-and-ignored fields' shapes."""
    tools = _tools(body.get("tools"))
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise InvalidRequest(
                f"instructions must be a string, got {_json_type(instructions)}",
                field="instructions",
            )
        _check_text(instructions, "instructions")
    background = _opt_bool(body, "background")
    if background:
        raise InvalidRequest(
            "background responses are not supported: memroute keeps no stored responses to "
            "poll; send the request without background (stream it if it is long)",
            field="background",
        )
    _opt_bool(body, "store")
    _text_config(body.get("text"))
    _string_list(body, "include")
    _opt_object(body, "reasoning")
    _opt_string(body, "service_tier")
    truncation = _opt_string(body, "truncation")
    if truncation is not None and truncation not in TRUNCATIONS:
        raise InvalidRequest(
            f"truncation must be one of {', '.join(TRUNCATIONS)}, got {truncation[:40]!r}",
            field="truncation",
        )
    user = _opt_string(body, "user")
    parallel = _opt_bool(body, "parallel_tool_calls")
    return {
        "instructions": instructions,
        "tools": tools,
        "tool_choice": _tool_choice(body.get("tool_choice"), tools),
        "parallel_tool_calls": True if parallel is None else parallel,
        "temperature": _opt_number(body, "temperature", 0.0, 2.0),
        "top_p": _opt_number(body, "top_p", 0.0, 1.0),
        "max_output_tokens": _max_output_tokens(body),
        "metadata": _metadata(body.get("metadata")),
        "user": user,
    }


def _model(body: Mapping[str, Any]) -> str:
    model = body.get("model")
    if model is None:
        raise InvalidRequest("model is required", field="model")
    if not isinstance(model, str):
        raise InvalidRequest(f"model must be a string, got {_json_type(model)}", field="model")
    _check_text(model, "model")
    if not model.strip():
        raise InvalidRequest("model must not be empty", field="model")
    return model


def _input(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        raise InvalidRequest("input is required", field="input")
    if isinstance(raw, str):
        _check_text(raw, "input")
        if not raw.strip():
            raise InvalidRequest("input must not be empty", field="input")
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list):
        raise InvalidRequest(
            f"input must be a string or an array of input items, got {_json_type(raw)}",
            field="input",
        )
    if not raw:
        raise InvalidRequest("input must contain at least one item", field="input")
    messages: list[dict[str, Any]] = []
    calls: set[str] = set()  # call ids of the function_call items so far
    for i, item in enumerate(raw):
        path = f"input[{i}]"
        if not isinstance(item, dict):
            raise InvalidRequest(f"{path} must be an object, got {_json_type(item)}", field=path)
        kind = item.get("type")
        if kind is None or kind == "message":
            messages.append(_message(item, path))
        elif kind == "function_call":
            call = _function_call(item, path)
            if call["id"] in calls:
                raise InvalidRequest(
                    f"{path}.call_id {call['id'][:80]!r} repeats an earlier function_call's",
                    field=f"{path}.call_id",
                )
            calls.add(call["id"])
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(_function_call_output(item, path, calls))
        else:
            shown = repr(kind[:40]) if isinstance(kind, str) else _json_type(kind)
            raise InvalidRequest(
                f"{path}.type must be message, function_call or function_call_output, got "
                f"{shown} (memroute translates to chat completions: no reasoning items, item "
                "references or built-in tool calls)",
                field=f"{path}.type",
            )
    return messages


def _message(item: Mapping[str, Any], path: str) -> dict[str, Any]:
    role = item.get("role")
    if role is None:
        raise InvalidRequest(
            f"{path}.role is required (or a type: function_call, function_call_output)",
            field=f"{path}.role",
        )
    if role not in MESSAGE_ROLES:
        shown = repr(role[:40]) if isinstance(role, str) else _json_type(role)
        raise InvalidRequest(
            f"{path}.role must be one of {', '.join(MESSAGE_ROLES)}, got {shown}",
            field=f"{path}.role",
        )
    content = _text_content(item.get("content"), f"{path}.content", TEXT_PARTS)
    return {"role": "system" if role == "developer" else role, "content": content}


def _function_call(item: Mapping[str, Any], path: str) -> dict[str, Any]:
    call_id = _required_string(item, "call_id", path)
    name = _required_string(item, "name", path)
    arguments = item.get("arguments")
    if not isinstance(arguments, str):
        raise InvalidRequest(
            f"{path}.arguments must be a string of JSON text"
            + (" and is required" if arguments is None else f", got {_json_type(arguments)}"),
            field=f"{path}.arguments",
        )
    _check_text(arguments, f"{path}.arguments")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _function_call_output(item: Mapping[str, Any], path: str, calls: set[str]) -> dict[str, Any]:
    call_id = _required_string(item, "call_id", path)
    if call_id not in calls:
        raise InvalidRequest(
            f"{path}.call_id {call_id[:80]!r} answers no function_call earlier in input (memroute "
            "keeps no previous responses: send the function_call item before its output)",
            field=f"{path}.call_id",
        )
    output = _text_content(item.get("output"), f"{path}.output", ("input_text", "output_text"))
    return {"role": "tool", "tool_call_id": call_id, "content": output}


def _text_config(raw: Any) -> None:
    if raw is None:
        return
    if not isinstance(raw, dict):
        raise InvalidRequest(f"text must be an object, got {_json_type(raw)}", field="text")
    fmt = raw.get("format")
    if fmt is None:
        return
    if not isinstance(fmt, dict):
        raise InvalidRequest(
            f"text.format must be an object, got {_json_type(fmt)}", field="text.format"
        )
    kind = fmt.get("type")
    if kind != "text":
        shown = repr(kind[:40]) if isinstance(kind, str) else _json_type(kind)
        raise InvalidRequest(
            f"text.format.type must be 'text': structured outputs (json_schema, json_object) are "
            f"not supported, got {shown}",
            field="text.format.type",
        )


def _metadata(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InvalidRequest(
            f"metadata must be an object of strings, got {_json_type(raw)}", field="metadata"
        )
    for key, value in raw.items():
        _check_text(key, "metadata")  # a bad key is not a printable path
        path = f"metadata.{key}"
        if not isinstance(value, str):
            raise InvalidRequest(
                f"{path} must be a string, got {_json_type(value)}", field=path
            )
        _check_text(value, path)
    return dict(raw)


def _max_output_tokens(body: Mapping[str, Any]) -> int | None:
    value = body.get("max_output_tokens")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(
            f"max_output_tokens must be an integer, got {_json_type(value)}",
            field="max_output_tokens",
        )
    if value < 1:
        raise InvalidRequest(
            f"max_output_tokens must be at least 1, got {value}", field="max_output_tokens"
        )
    return value


def _opt_number(body: Mapping[str, Any], name: str, lo: float, hi: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequest(f"{name} must be a number, got {_json_type(value)}", field=name)
    # An int is compared exactly (math.isfinite(10**400) would raise OverflowError).
    if (isinstance(value, float) and not math.isfinite(value)) or not lo <= value <= hi:
        shown = value if isinstance(value, float) or abs(value) < 10**12 else "a huge integer"
        raise InvalidRequest(f"{name} must be between {lo:g} and {hi:g}, got {shown}",
                             field=name)
    return float(value)


def _opt_bool(body: Mapping[str, Any], name: str) -> bool | None:
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise InvalidRequest(f"{name} must be a boolean, got {_json_type(value)}", field=name)
    return value


def _opt_string(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequest(f"{name} must be a string, got {_json_type(value)}", field=name)
    return _check_text(value, name)


def _opt_object(body: Mapping[str, Any], name: str) -> None:
    value = body.get(name)
    if value is not None and not isinstance(value, dict):
        raise InvalidRequest(f"{name} must be an object, got {_json_type(value)}", field=name)


def _string_list(body: Mapping[str, Any], name: str) -> None:
    value = body.get(name)
    if value is None:
        return
    if not isinstance(value, list):
        raise InvalidRequest(f"{name} must be an array, got {_json_type(value)}", field=name)
    for j, entry in enumerate(value):
        if not isinstance(entry, str):
            raise InvalidRequest(
                f"{name}[{j}] must be a string, got {_json_type(entry)}", field=f"{name}[{j}]"
            )


