"""Chat messages -> plain ``{"role", "content", ...}`` dicts, checked before any model sees them.

One validator for every back end: a chat template (transformers, vLLM, the mock) and an OpenAI
request (``openai_http``) get the same roles, contents and tool calls, and a malformed message
is refused as :class:`~memroute.errors.InvalidRequest` naming it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from memroute.errors import InvalidRequest
from memroute.types import Message, ToolCall

ROLES = ("system", "user", "assistant", "tool")


def plain(value: Any) -> Any:
    """Mappings/sequences -> dicts/lists (JSON- and Jinja-friendly)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def parsed_arguments(arguments: str) -> Any:
    """A call's JSON arguments as an object when they parse (chat templates ``tojson`` them,
    as vLLM passes them), else the text as given."""
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def _tool_call_dict(call: Any, field: str, parse_arguments: bool) -> dict[str, Any]:
    if isinstance(call, ToolCall):
        call_id, name, args = call.id, call.name, call.arguments
    elif isinstance(call, Mapping):
        fn = call.get("function")
        if not isinstance(fn, Mapping):
            raise InvalidRequest(f"{field}.function must be an object with a name",
                                 field=f"{field}.function")
        call_id, name, args = call.get("id"), fn.get("name"), fn.get("arguments", "{}")
        if isinstance(args, Mapping):
            args = json.dumps(plain(args), ensure_ascii=False)
    else:
        raise InvalidRequest(f"{field} must be a tool call, got {type(call).__name__}",
                             field=field)
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"{field}.function.name must be a non-empty string",
                             field=f"{field}.function.name")
    if not isinstance(args, str):
        raise InvalidRequest(f"{field}.function.arguments must be a JSON string",
                             field=f"{field}.function.arguments")
    if call_id is not None and not isinstance(call_id, str):
        raise InvalidRequest(f"{field}.id must be a string", field=f"{field}.id")
    return {
        "id": call_id or "",
        "type": "function",
        "function": {"name": name,
                     "arguments": parsed_arguments(args) if parse_arguments else args},
    }


def to_chat_dicts(
    messages: Sequence[Message | Mapping[str, Any]], *, parse_arguments: bool = True
) -> list[dict[str, Any]]:
    """Messages -> ``[{"role", "content", ...}]`` for a chat template or an OpenAI request.

    Accepts :class:`Message` objects or mappings with ``role``/``content``; raises
    :class:`InvalidRequest` naming the bad message so nothing malformed reaches a model.
    Plain messages become ``{"role", "content"}``; an assistant turn with ``tool_calls`` gets
    them in OpenAI's shape (``arguments`` parsed into an object when it is valid JSON, for chat
    templates; ``parse_arguments=False`` keeps the JSON text, for an OpenAI request); a ``tool``
    message carries its ``tool_call_id`` when it has one.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidRequest("messages must be a list of messages", field="messages")
    if not messages:
        raise InvalidRequest("messages must not be empty", field="messages")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if isinstance(m, Message):
            role, content = m.role, m.content
            calls: Any = m.tool_calls
            call_id: Any = m.tool_call_id
        elif isinstance(m, Mapping):
            role, content = m.get("role"), m.get("content")
            calls, call_id = m.get("tool_calls") or (), m.get("tool_call_id")
            if content is None and calls:
                content = ""  # OpenAI: an assistant turn that only calls tools has no content
        else:
            raise InvalidRequest(
                f"messages[{i}] must be a Message or a mapping, got {type(m).__name__}",
                field=f"messages[{i}]",
            )
        if role not in ROLES:
            raise InvalidRequest(
                f"messages[{i}].role {role!r} is invalid: use one of {', '.join(ROLES)}",
                field=f"messages[{i}].role",
            )
        if not isinstance(content, str):
            raise InvalidRequest(
                f"messages[{i}].content must be a string, got {type(content).__name__}",
                field=f"messages[{i}].content",
            )
        d: dict[str, Any] = {"role": role, "content": content}
        if calls:
            if role != "assistant":
                raise InvalidRequest(f"messages[{i}].tool_calls: only assistant messages call "
                                     "tools", field=f"messages[{i}].tool_calls")
            if isinstance(calls, (str, bytes, Mapping)) or not isinstance(calls, Sequence):
                raise InvalidRequest(f"messages[{i}].tool_calls must be a list",
                                     field=f"messages[{i}].tool_calls")
            d["tool_calls"] = [
                _tool_call_dict(c, f"messages[{i}].tool_calls[{j}]", parse_arguments)
                for j, c in enumerate(calls)
            ]
        if role == "tool":
            if call_id is not None and not isinstance(call_id, str):
                raise InvalidRequest(f"messages[{i}].tool_call_id must be a string",
                                     field=f"messages[{i}].tool_call_id")
            if call_id:
                d["tool_call_id"] = call_id
        out.append(d)
    return out
