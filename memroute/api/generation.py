"""Validation of a chat body's generation settings and tools (OpenAI's Chat Completions fields).

``max_tokens`` / ``max_completion_tokens``, ``temperature``, ``top_p``, ``stop``, ``seed``,
``presence_penalty`` / ``frequency_penalty``, ``logprobs`` / ``top_logprobs``, ``tools`` /
``tool_choice`` / ``parallel_tool_calls`` and ``response_format`` (text only) are checked here
with OpenAI's bounds, a 400 naming the field otherwise. What the Router does with them
(the confidence probe decodes greedily unless ``router.probe_decoding: client``) is in
:mod:`memroute.routing.router`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from memroute.api.messages import check_text, json_type
from memroute.config.api import ApiLimits
from memroute.errors import InvalidRequest
from memroute.llm.options import MAX_TOP_LOGPROBS, GenerationOptions

MAX_STOP = 4  # OpenAI's limit on stop sequences
MAX_TOOLS = 128  # OpenAI's limit on tools
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
INT64 = 2**63


@dataclass(frozen=True)
class Generation:
    """The request's own settings; None: the router's (or the engine's) default."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logprobs: bool = False
    top_logprobs: int = 0
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str | dict[str, Any] | None = None

    def options(self) -> GenerationOptions | None:
        """What the back ends take beyond max_tokens / stop / temperature; None: nothing set."""
        opts = GenerationOptions(
            top_p=1.0 if self.top_p is None else self.top_p, seed=self.seed,
            presence_penalty=self.presence_penalty or 0.0,
            frequency_penalty=self.frequency_penalty or 0.0,
            logprobs=self.logprobs, top_logprobs=self.top_logprobs,
            tools=self.tools, tool_choice=self.tool_choice,
        )
        return None if opts == GenerationOptions() else opts


def parse_generation(body: dict, limits: ApiLimits) -> Generation:
    tools = _tools(body.get("tools"))
    logprobs = _bool(body, "logprobs")
    top = _top_logprobs(body.get("top_logprobs"), logprobs)
    _response_format(body.get("response_format"))
    _bool(body, "parallel_tool_calls")  # accepted: a tier may return several calls either way
    return Generation(
        max_tokens=_max_tokens(body, limits),
        temperature=_number(body, "temperature", 0.0, 2.0),
        top_p=_number(body, "top_p", 0.0, 1.0),
        stop=_stop(body.get("stop")),
        seed=_seed(body.get("seed")),
        presence_penalty=_number(body, "presence_penalty", -2.0, 2.0),
        frequency_penalty=_number(body, "frequency_penalty", -2.0, 2.0),
        logprobs=logprobs,
        top_logprobs=top,
        tools=tools,
        tool_choice=_tool_choice(body.get("tool_choice"), tools),
    )


def _max_tokens(body: dict, limits: ApiLimits) -> int | None:
    # `max_completion_tokens` is OpenAI's newer name for the same limit.
    given = {k: body[k] for k in ("max_tokens", "max_completion_tokens") if body.get(k) is not None}
    if len(given) == 2 and given["max_tokens"] != given["max_completion_tokens"]:
        raise InvalidRequest(
            "max_tokens and max_completion_tokens disagree; send one of them",
            field="max_completion_tokens",
        )
    if not given:
        return None
    name, value = next(iter(given.items()))
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"{name} must be an integer, got {json_type(value)}", field=name)
    if value < 1:
        raise InvalidRequest(f"{name} must be at least 1, got {value}", field=name)
    if value > limits.max_tokens:
        raise InvalidRequest(
            f"{name} must be at most {limits.max_tokens} on this server, got {value}", field=name
        )
    return value


def _number(body: dict, name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequest(f"{name} must be a number, got {json_type(value)}", field=name)
    # An int is compared exactly: math.isfinite(10**400) raises OverflowError (a 500 before).
    if (isinstance(value, float) and not math.isfinite(value)) or not low <= value <= high:
        raise InvalidRequest(f"{name} must be between {low:g} and {high:g}, got {value}", field=name)
    return float(value)


def _bool(body: dict, name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidRequest(f"{name} must be a boolean, got {json_type(value)}", field=name)
    return value


def _top_logprobs(value: Any, logprobs: bool) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOP_LOGPROBS:
        raise InvalidRequest(f"top_logprobs must be an integer from 0 to {MAX_TOP_LOGPROBS}",
                             field="top_logprobs")
    if value and not logprobs:
        raise InvalidRequest("top_logprobs needs logprobs: true", field="top_logprobs")
    return value


def _stop(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise InvalidRequest("stop must be a string or an array of strings", field="stop")
    if len(items) > MAX_STOP:
        raise InvalidRequest(f"stop takes at most {MAX_STOP} sequences, got {len(items)}", field="stop")
    stops = tuple(check_text(s, f"stop[{i}]") for i, s in enumerate(items) if s)
    return stops or None


def _seed(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not -INT64 <= value < INT64:
        raise InvalidRequest("seed must be a 64-bit integer", field="seed")
    return value


def _response_format(value: Any) -> None:
    if value is None:
        return
    kind = value.get("type") if isinstance(value, dict) else None
    if kind != "text":
        raise InvalidRequest(
            "response_format: only {\"type\": \"text\"} is supported; JSON modes are not "
            "(a tier's answer would not be checked against the schema)",
            field="response_format",
        )


def _tools(raw: Any) -> tuple[dict[str, Any], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidRequest(f"tools must be an array, got {json_type(raw)}", field="tools")
    if len(raw) > MAX_TOOLS:
        raise InvalidRequest(f"tools takes at most {MAX_TOOLS} functions", field="tools")
    out, names = [], set()
    for i, tool in enumerate(raw):
        p = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise InvalidRequest(f"{p}.type must be 'function' (the only tool type served)",
                                 field=f"{p}.type")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise InvalidRequest(f"{p}.function must be an object", field=f"{p}.function")
        name = fn.get("name")
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise InvalidRequest(
                f"{p}.function.name must be 1-64 letters, digits, _ or -", field=f"{p}.function.name")
        if name in names:
            raise InvalidRequest(f"{p}.function.name {name!r} is given twice",
                                 field=f"{p}.function.name")
        names.add(name)
        desc = fn.get("description")
        if desc is not None and not isinstance(desc, str):
            raise InvalidRequest(f"{p}.function.description must be a string",
                                 field=f"{p}.function.description")
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise InvalidRequest(f"{p}.function.parameters must be a JSON Schema object",
                                 field=f"{p}.function.parameters")
        clean = {"name": name, **({"description": desc} if desc else {}),
                 "parameters": params if params is not None else {"type": "object", "properties": {}}}
        out.append({"type": "function", "function": clean})
    return tuple(out)


def _tool_choice(value: Any, tools: tuple[dict[str, Any], ...]) -> str | dict[str, Any] | None:
    if value is None:
        return None
    if not tools:
        raise InvalidRequest("tool_choice is only allowed when tools are given", field="tool_choice")
    if value in ("none", "auto", "required"):
        return value
    fn = value.get("function") if isinstance(value, dict) and value.get("type") == "function" else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise InvalidRequest(
            "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": "
            "{\"name\": ...}}", field="tool_choice")
    if name not in {t["function"]["name"] for t in tools}:
        raise InvalidRequest(f"tool_choice names {name[:64]!r}, which is not in tools",
                             field="tool_choice.function.name")
    return {"type": "function", "function": {"name": name}}
