"""Function tools of a Responses request (flat ``{"type": "function", "name", ...}``) and its
``tool_choice``, validated and translated to the Chat Completions shapes; every problem is a 400
naming the Responses path (``tools[0].type``)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from memroute.api.messages import check_text as _check_text
from memroute.api.messages import json_type as _json_type
from memroute.errors import InvalidRequest

TOOL_CHOICES = ("auto", "none", "required")
_FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def parse_tools(raw: Any) -> list[dict[str, Any]]:
    """The function tools in the Responses shape, normalized (every key present)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidRequest(f"tools must be an array, got {_json_type(raw)}", field="tools")
    tools: list[dict[str, Any]] = []
    for i, tool in enumerate(raw):
        path = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise InvalidRequest(f"{path} must be an object, got {_json_type(tool)}", field=path)
        kind = tool.get("type")
        if kind != "function":
            shown = repr(kind[:40]) if isinstance(kind, str) else _json_type(kind)
            raise InvalidRequest(
                f"{path}.type must be 'function': memroute serves function tools only, no "
                f"built-in tools (web_search, file_search, computer, mcp, ...); got {shown}",
                field=f"{path}.type",
            )
        name = required_string(tool, "name", path)
        if not _FUNCTION_NAME.match(name):
            raise InvalidRequest(
                f"{path}.name must be 1 to 64 letters, digits, '_' or '-', got {name[:80]!r}",
                field=f"{path}.name",
            )
        if any(t["name"] == name for t in tools):
            raise InvalidRequest(
                f"{path}.name {name!r} repeats an earlier tool's name", field=f"{path}.name"
            )
        description = tool.get("description")
        if description is not None:
            if not isinstance(description, str):
                raise InvalidRequest(
                    f"{path}.description must be a string, got {_json_type(description)}",
                    field=f"{path}.description",
                )
            _check_text(description, f"{path}.description")
        parameters = tool.get("parameters")
        if parameters is not None:
            if not isinstance(parameters, dict):
                raise InvalidRequest(
                    f"{path}.parameters must be a JSON Schema object, got "
                    f"{_json_type(parameters)}",
                    field=f"{path}.parameters",
                )
            check_json(parameters, f"{path}.parameters")
        strict = tool.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise InvalidRequest(
                f"{path}.strict must be a boolean, got {_json_type(strict)}",
                field=f"{path}.strict",
            )
        tools.append({"type": "function", "name": name, "description": description,
                      "parameters": parameters, "strict": strict})
    return tools


def chat_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    function = {"name": tool["name"]}
    function.update({k: tool[k] for k in ("description", "parameters", "strict")
                     if tool[k] is not None})
    return {"type": "function", "function": function}


def parse_tool_choice(raw: Any, tools: list[dict[str, Any]]) -> str | dict[str, Any]:
    """The Responses ``tool_choice`` (default ``auto``), checked against ``tools``."""
    if raw is None:
        return "auto"
    if isinstance(raw, str):
        if raw not in TOOL_CHOICES:
            raise InvalidRequest(
                f"tool_choice must be one of {', '.join(TOOL_CHOICES)} or "
                f'{{"type": "function", "name": ...}}, got {raw[:40]!r}',
                field="tool_choice",
            )
        if raw == "required" and not tools:
            raise InvalidRequest("tool_choice 'required' needs tools", field="tool_choice")
        return raw
    if not isinstance(raw, dict):
        raise InvalidRequest(
            f"tool_choice must be a string or an object, got {_json_type(raw)}",
            field="tool_choice",
        )
    kind = raw.get("type")
    if kind != "function":
        shown = repr(kind[:40]) if isinstance(kind, str) else _json_type(kind)
        raise InvalidRequest(
            f"tool_choice.type must be 'function' (memroute serves function tools only), got "
            f"{shown}",
            field="tool_choice.type",
        )
    name = required_string(raw, "name", "tool_choice")
    if not any(t["name"] == name for t in tools):
        raise InvalidRequest(
            f"tool_choice.name {name[:80]!r} is not one of the request's tools",
            field="tool_choice.name",
        )
    return {"type": "function", "name": name}


def required_string(item: Mapping[str, Any], name: str, path: str) -> str:
    value = item.get(name)
    field = f"{path}.{name}"
    if value is None:
        raise InvalidRequest(f"{field} is required", field=field)
    if not isinstance(value, str):
        raise InvalidRequest(f"{field} must be a string, got {_json_type(value)}", field=field)
    _check_text(value, field)
    if not value:
        raise InvalidRequest(f"{field} must not be empty", field=field)
    return value


def check_json(value: Any, path: str) -> None:
    """Refuse what cannot be echoed as strict JSON (NaN, Infinity, lone surrogates)."""
    try:
        # ensure_ascii=False keeps lone surrogates visible (a NUL is escaped, and harmless).
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        raise InvalidRequest(f"{path} must be plain JSON (no NaN or Infinity)",
                             field=path) from None
    _check_text(text, path)
