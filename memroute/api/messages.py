"""Validation of a chat body's ``messages`` (OpenAI's shapes) into :class:`~memroute.types.Message`.

Roles: ``system`` (and ``developer``, OpenAI's newer name for it), ``user``, ``assistant`` (text,
or ``tool_calls`` with null content) and ``tool`` (``tool_call_id`` answering an earlier call).
A conversation ends with the user's turn, or with tool results after the assistant's calls (the
second step of a tool loop). Every problem is an :class:`InvalidRequest` naming the JSON path.
"""

from __future__ import annotations

import json
import re
from typing import Any

from memroute.errors import InvalidRequest
from memroute.types import Message, ToolCall

ROLES = ("system", "developer", "user", "assistant", "tool")
# Lone UTF-16 surrogate halves (JSON allows "\ud800"; UTF-8 cannot encode them: the tokenizers
# raise) and NUL (the embedder's tokenizer silently drops it; C-string paths may cut at it).
_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")
MAX_TOOL_CALL_ID = 256


def parse_messages(raw: Any, *, max_messages: int) -> list[Message]:
    from memroute.errors import PayloadTooLarge

    if raw is None:
        raise InvalidRequest("messages is required", field="messages")
    if not isinstance(raw, list):
        raise InvalidRequest(
            f"messages must be an array of messages, got {json_type(raw)}", field="messages"
        )
    if not raw:
        raise InvalidRequest("messages must contain at least one message", field="messages")
    if len(raw) > max_messages:
        raise PayloadTooLarge(
            f"messages has {len(raw)} messages; the limit is {max_messages}", field="messages"
        )
    out = [_message(m, f"messages[{i}]") for i, m in enumerate(raw)]
    _check_conversation(out)
    return out


def _check_conversation(out: list[Message]) -> None:
    """The last turn is the user's (with text), or tool results answering the assistant's calls."""
    last = len(out) - 1
    if out[last].role == "tool":
        if not any(m.role == "user" for m in out):
            raise InvalidRequest("a conversation with tool results needs a user message",
                                 field="messages")
    elif out[last].role != "user":
        raise InvalidRequest(
            f"the last message must be from the user (or a tool result), got role "
            f"{out[last].role!r}", field=f"messages[{last}].role",
        )
    elif not out[last].content.strip():
        raise InvalidRequest("the last user message has no text", field=f"messages[{last}].content")
    # Each tool message answers a call of an earlier assistant message (as OpenAI requires).
    called: set[str] = set()
    for i, m in enumerate(out):
        called.update(c.id for c in m.tool_calls)
        if m.role == "tool" and m.tool_call_id not in called:
            raise InvalidRequest(
                f"messages[{i}] answers tool call {m.tool_call_id!r}, which no earlier assistant "
                "message made", field=f"messages[{i}].tool_call_id",
            )


def _message(raw: Any, path: str) -> Message:
    if not isinstance(raw, dict):
        raise InvalidRequest(f"{path} must be an object, got {json_type(raw)}", field=path)
    role = raw.get("role")
    if role is None:
        raise InvalidRequest(f"{path}.role is required", field=f"{path}.role")
    if role not in ROLES:
        shown = repr(role[:40]) if isinstance(role, str) else json_type(role)
        raise InvalidRequest(
            f"{path}.role must be one of {', '.join(ROLES)}, got {shown}", field=f"{path}.role"
        )
    if role == "developer":
        role = "system"
    if role == "assistant" and raw.get("tool_calls") is not None:
        calls = _tool_calls(raw["tool_calls"], f"{path}.tool_calls")
        content = raw.get("content")
        text = "" if content is None else _content(content, f"{path}.content")
        return Message("assistant", text, tool_calls=calls)
    content = _content(raw.get("content"), f"{path}.content")
    if role == "tool":
        return Message("tool", content, tool_call_id=_call_id(raw.get("tool_call_id"),
                                                              f"{path}.tool_call_id"))
    return Message(role, content)


def _tool_calls(raw: Any, path: str) -> tuple[ToolCall, ...]:
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest(f"{path} must be a non-empty array of tool calls", field=path)
    calls = []
    for j, call in enumerate(raw):
        p = f"{path}[{j}]"
        if not isinstance(call, dict):
            raise InvalidRequest(f"{p} must be an object, got {json_type(call)}", field=p)
        if call.get("type", "function") != "function":
            raise InvalidRequest(f"{p}.type must be 'function'", field=f"{p}.type")
        fn = call.get("function")
        if not isinstance(fn, dict):
            raise InvalidRequest(f"{p}.function must be an object", field=f"{p}.function")
        name, args = fn.get("name"), fn.get("arguments", "")
        if not isinstance(name, str) or not name:
            raise InvalidRequest(f"{p}.function.name must be a non-empty string",
                                 field=f"{p}.function.name")
        if isinstance(args, dict):  # some clients send the parsed object
            args = json.dumps(args, ensure_ascii=False)
        if not isinstance(args, str):
            raise InvalidRequest(f"{p}.function.arguments must be a string of JSON",
                                 field=f"{p}.function.arguments")
        calls.append(ToolCall(_call_id(call.get("id"), f"{p}.id"), check_text(name, f"{p}.function.name"),
                              check_text(args, f"{p}.function.arguments")))
    return tuple(calls)


def _call_id(raw: Any, path: str) -> str:
    if not isinstance(raw, str) or not raw:
        raise InvalidRequest(f"{path} must be a non-empty string", field=path)
    if len(raw) > MAX_TOOL_CALL_ID:
        raise InvalidRequest(f"{path} is over {MAX_TOOL_CALL_ID} characters", field=path)
    return check_text(raw, path)


def _content(raw: Any, path: str) -> str:
    return text_content(raw, path, ("text",))


def text_content(raw: Any, path: str, kinds: tuple[str, ...]) -> str:
    """A string, or an array of text parts (``{"type": <one of kinds>, "text": ...}``) joined by
    newlines (chat: ``text``; the Responses API: ``input_text`` / ``output_text``)."""
    if isinstance(raw, str):
        return check_text(raw, path)
    if raw is None:
        raise InvalidRequest(f"{path} is required", field=path)
    if not isinstance(raw, list):
        raise InvalidRequest(
            f"{path} must be a string or an array of text parts, got {json_type(raw)}", field=path
        )
    texts = []
    for j, part in enumerate(raw):
        p = f"{path}[{j}]"
        if not isinstance(part, dict):
            raise InvalidRequest(f"{p} must be an object, got {json_type(part)}", field=p)
        kind = part.get("type")
        if kind not in kinds:
            shown = repr(kind[:40]) if isinstance(kind, str) else json_type(kind)
            allowed = " or ".join(repr(k) for k in kinds)
            raise InvalidRequest(
                f"{p}.type must be {allowed} (only text content is supported), got {shown}",
                field=f"{p}.type",
            )
        text = part.get("text")
        if not isinstance(text, str):
            raise InvalidRequest(
                f"{p}.text must be a string, got {json_type(text)}", field=f"{p}.text"
            )
        texts.append(check_text(text, f"{p}.text"))
    return "\n".join(texts)


def check_text(text: str, path: str) -> str:
    """``text`` if the models and the store can take it, else :class:`InvalidRequest` naming
    ``path``, the code point and its position.

    Refused, not repaired: replacing a lone surrogate with U+FFFD (or dropping a NUL) would
    answer, and remember for good, a text the client did not send, and hide a broken client
    encoder; a 400 naming the field is visible and the client can fix and resend.
    """
    bad = _BAD_TEXT.search(text)
    if bad is None:
        return text
    cp = ord(bad.group())
    at = bad.start()
    if cp == 0:
        raise InvalidRequest(
            f"{path} contains a NUL character (U+0000) at position {at}; remove it", field=path
        )
    raise InvalidRequest(
        f"{path} is not valid Unicode: a lone surrogate U+{cp:04X} at position {at} (half of a "
        "UTF-16 pair) cannot be encoded as UTF-8; send the whole character or remove it",
        field=path,
    )


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type, for messages a client understands."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
