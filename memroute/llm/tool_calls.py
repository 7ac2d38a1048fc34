"""Tool calls in a model's output text: hermes ``<tool_call>{json}</tool_call>`` blocks.

The format Qwen2.5's chat template asks for (and the one :mod:`memroute.llm.chat` asks of models
whose template has no tools): one or several blocks, each a JSON object
``{"name": <function>, "arguments": {...}}``. A small model sometimes leaves out the tags and
answers with the bare object; that counts too when it is the whole output.

Only names of offered tools make a call: anything else (an unknown name, malformed JSON) stays in
the text, so a client sees what the model wrote instead of losing it.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from memroute.types import ToolCall

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
# A closed block, or an unclosed one running to the end of the text (a model that hit EOS
# before writing the closing tag).
_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>((?:(?!<tool_call>).)*)\Z", re.DOTALL)


def new_call_id() -> str:
    """``call_`` + 24 hex characters, the shape OpenAI's ids have."""
    return "call_" + uuid.uuid4().hex[:24]


def tool_names(tools: Sequence[Mapping[str, Any]]) -> list[str]:
    """Function names of OpenAI tool dicts (``{"type": "function", "function": {"name"}}``);
    a flat ``{"name": ...}`` is accepted too."""
    names = []
    for t in tools or ():
        if not isinstance(t, Mapping):
            continue
        fn = t.get("function") if isinstance(t.get("function"), Mapping) else t
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if isinstance(name, str) and name:
            names.append(name)
    return names


def arguments_text(arguments: Any) -> str:
    """A call's arguments as JSON text: a string is kept as given, anything else is dumped."""
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


def _call_of(obj: Any, offered: set[str]) -> ToolCall | None:
    if not isinstance(obj, Mapping):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or name not in offered:
        return None
    args = obj["arguments"] if "arguments" in obj else obj.get("parameters")
    return ToolCall(id=new_call_id(), name=name, arguments=arguments_text(args))


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def parse_tool_calls(
    text: str, tools: Sequence[Mapping[str, Any]]
) -> tuple[str, list[ToolCall]]:
    """``(content, calls)`` of a model's output, given the tools it was offered.

    ``content`` is the text without the blocks that made calls (stripped; often empty).
    Without any offered tool nothing is parsed: ``(text, [])``.
    """
    offered = set(tool_names(tools))
    if not offered or not text:
        return text, []
    calls: list[ToolCall] = []
    kept: list[str] = []
    pos = 0
    for m in _BLOCK.finditer(text):
        body = m.group(1) if m.group(1) is not None else m.group(2)
        call = _call_of(_loads(body.strip()), offered)
        if call is None:
            continue  # not a call: the block stays in the content
        kept.append(text[pos : m.start()])
        pos = m.end()
        calls.append(call)
    if calls:
        kept.append(text[pos:])
        return "".join(kept).strip(), calls
    bare = text.strip()
    if bare.startswith("{") and bare.endswith("}"):
        call = _call_of(_loads(bare), offered)
        if call is not None:
            return "", [call]
    return text, []


def may_start_tool_call(text: str) -> int | None:
    """Where in ``text`` (generated so far) a tool call may be starting, or None.

    For streaming with tools on: text from that index on is held back until the output is
    complete (a ``<tool_call>`` tag, the beginning of one at the end of the text, or an output
    that starts as a bare JSON object).
    """
    i = text.find(TOOL_CALL_OPEN)
    if i >= 0:
        return i
    for k in range(min(len(TOOL_CALL_OPEN) - 1, len(text)), 0, -1):
        if text.endswith(TOOL_CALL_OPEN[:k]):
            return len(text) - k
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return 0
    return None
