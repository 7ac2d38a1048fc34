"""The prompt a back end sends: messages rendered with the model's own chat template (plus the
generation prompt), offered tools included, and its token count.

``prompt_tokens`` of every back end is the length of :func:`chat_prompt_ids` (the reply
conventions are in :mod:`memroute.llm.replies`), so injected tokens are counted exactly.

Tools (OpenAI ``tools`` / ``tool_choice``): a chat template that knows tools (its text mentions
``tools``, as Qwen2.5's does) gets them through ``apply_chat_template(..., tools=...)``. Any other
template gets a hermes-style instruction appended to the system message, assistant tool calls
rendered into their content as ``<tool_call>{json}</tool_call>`` and tool results as a user
message wrapped in ``<tool_response>...</tool_response>``, so templates without a ``tool`` role
still work. ``tool_choice`` ``"required"`` or a named function adds an instruction that a call is
required (an instruction, not constrained decoding); ``"none"`` renders no tools. Replies are
parsed with :func:`memroute.llm.tool_calls.parse_tool_calls`
(:func:`memroute.llm.replies.apply_tool_calls`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memroute.llm.messages import parsed_arguments, plain, to_chat_dicts
from memroute.llm.tool_calls import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from memroute.types import Message

if TYPE_CHECKING:
    from memroute.llm.options import GenerationOptions

TOOL_RESPONSE_OPEN = "<tool_response>"
TOOL_RESPONSE_CLOSE = "</tool_response>"


def template_supports_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders ``tools`` (its text mentions them)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, Mapping):  # named templates: "default", "tool_use", ...
        template = template.get("tool_use") or " ".join(str(v) for v in template.values())
    return isinstance(template, str) and re.search(r"\btools\b", template) is not None


def tools_rendered(tools: Sequence[Mapping[str, Any]], tool_choice: Any) -> bool:
    """Whether offered tools go into the prompt (``tool_choice: "none"`` withholds them)."""
    return bool(tools) and tool_choice != "none"


def _function(tool: Mapping[str, Any]) -> dict[str, Any]:
    fn = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
    return plain(fn)


def tool_instruction(tools: Sequence[Mapping[str, Any]]) -> str:
    """The hermes-style tool instruction for a template without tools (Qwen2.5's wording)."""
    lines = []
    for t in tools:
        fn = _function(t)
        lines.append(json.dumps(
            {"name": fn.get("name"), "description": fn.get("description", ""),
             "parameters": fn.get("parameters", {"type": "object", "properties": {}})},
            ensure_ascii=False,
        ))
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        + "\n".join(lines)
        + "\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def required_instruction(tool_choice: Any) -> str | None:
    """The instruction ``tool_choice`` adds: a call is required (of a named function)."""
    if tool_choice == "required":
        return "You must answer with at least one function call."
    if isinstance(tool_choice, Mapping):
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if name:
            return f"You must answer with a call to the function {name!r}."
    return None


def render_tool_call(name: str, arguments: str | Any) -> str:
    """One call as the hermes text a model writes: ``<tool_call>\\n{json}\\n</tool_call>``."""
    args = parsed_arguments(arguments) if isinstance(arguments, str) else plain(arguments)
    body = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"


def _with_system_note(dicts: list[dict[str, Any]], note: str) -> list[dict[str, Any]]:
    """``note`` appended to the first system message (one is added when there is none)."""
    if dicts and dicts[0]["role"] == "system":
        first = dict(dicts[0])
        first["content"] = f"{first['content']}\n\n{note}" if first["content"] else note
        return [first, *dicts[1:]]
    return [{"role": "system", "content": note}, *dicts]


def fallback_dicts(
    dicts: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] = (),
    tool_choice: Any = None,
) -> list[dict[str, str]]:
    """Chat dicts for a template without tools: system/user/assistant with text content only.

    ``tools`` (already filtered by ``tool_choice``) become the hermes instruction on the system
    message; assistant tool calls become hermes text in the content; consecutive ``tool``
    messages become one user message of ``<tool_response>`` blocks.
    """
    out: list[dict[str, str]] = []
    pending: list[str] = []

    def flush() -> None:
        if pending:
            out.append({"role": "user", "content": "\n".join(pending)})
            pending.clear()

    for d in dicts:
        if d["role"] == "tool":
            pending.append(f"{TOOL_RESPONSE_OPEN}\n{d['content']}\n{TOOL_RESPONSE_CLOSE}")
            continue
        flush()
        content = d["content"]
        if d.get("tool_calls"):
            parts = [content] if content else []
            parts += [render_tool_call(c["function"]["name"], c["function"]["arguments"])
                      for c in d["tool_calls"]]
            content = "\n".join(parts)
        out.append({"role": d["role"], "content": content})
    flush()
    if tools:
        note = tool_instruction(tools)
        required = required_instruction(tool_choice)
        out = _with_system_note(out, note + (f"\n\n{required}" if required else ""))
    return out


def template_inputs(
    tokenizer: Any,
    messages: Sequence[Message | Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] = (),
    tool_choice: Any = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """``(conversation, tools)`` to hand to ``tokenizer.apply_chat_template``.

    ``tools`` is None when the template gets none (no tools offered, ``tool_choice: "none"``, or
    a template without tools: then the conversation carries the fallback rendering).
    Without tools and tool messages the conversation is :func:`to_chat_dicts`' unchanged.
    """
    dicts = to_chat_dicts(messages)
    on = tools_rendered(tools, tool_choice)
    history = any(d["role"] == "tool" or d.get("tool_calls") for d in dicts)
    if not on and not history:
        return dicts, None
    if not template_supports_tools(tokenizer):
        return fallback_dicts(dicts, tools if on else (), tool_choice), None
    if not on:
        return dicts, None
    required = required_instruction(tool_choice)
    if required:
        dicts = _with_system_note(dicts, required)
    return dicts, [plain(t) for t in tools]


def chat_prompt_ids(
    tokenizer: Any,
    messages: Sequence[Message | Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] = (),
    tool_choice: Any = None,
) -> list[int]:
    """Token ids of ``messages`` rendered with the tokenizer's chat template + generation prompt,
    ``tools`` included (natively, or the fallback rendering: see the module docstring)."""
    conversation, template_tools = template_inputs(tokenizer, messages, tools, tool_choice)
    kwargs: dict[str, Any] = {"tools": template_tools} if template_tools else {}
    ids = tokenizer.apply_chat_template(
        conversation, add_generation_prompt=True, tokenize=True, **kwargs
    )
    # transformers 5 returns a BatchEncoding here; 4.x (and vLLM's wrappers on it) a plain list.
    if isinstance(ids, Mapping) or hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if ids and isinstance(ids[0], list):  # batched shape [[...]]
        ids = ids[0]
    return [int(t) for t in ids]


def options_tools(options: GenerationOptions | None) -> tuple[tuple[Mapping[str, Any], ...], Any]:
    """``(tools, tool_choice)`` of ``options`` for :func:`chat_prompt_ids` (``()`` without)."""
    if options is None:
        return (), None
    return tuple(options.tools), options.tool_choice


def text_token_count(tokenizer: Any, text: str) -> int:
    """Plain tokenizer count of ``text``: no chat template, no special tokens."""
    return len(tokenizer.encode(text, add_special_tokens=False))
