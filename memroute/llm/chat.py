"""Helpers the back ends share, so the engines agree on what a :class:`ModelReply` holds.

Conventions (identical for transformers, vLLM, OpenAI HTTP and the mock):

* ``prompt_tokens`` is the length of the prompt rendered with the model's own chat template with
  the generation prompt (``apply_chat_template(..., add_generation_prompt=True, tokenize=True)``),
  offered tools included (:func:`chat_prompt_ids`).
* ``logprobs`` / ``alt_logprobs`` cover exactly the tokens that make up the returned text: the
  end-of-sequence token and the tokens of a matched stop string are excluded (vLLM reports both,
  transformers generates both), and ``completion_tokens == len(logprobs)``. A reply that called
  tools keeps the log-probs of every generated token (the call's tokens included) although its
  ``text`` is only the content around the calls.
* ``alt_logprobs[i]`` is the log-prob of the best token other than the chosen one at position
  ``i`` (from the engine's top-2), for a top-2 margin confidence. With greedy decoding it is
  ``<= logprobs[i]`` (equal on an exact tie).
* Log-probs are those of the model's raw distribution (before temperature and penalties), as
  vLLM reports them.
* ``token_texts`` / ``top_logprobs`` (only when ``options.logprobs``) cover the same tokens as
  ``logprobs``: each token's decoded text, and the ``options.top_logprobs`` most likely tokens at
  that position as ``(text, logprob)``, best first.
* ``latency_s`` is the wall time of the engine call that produced the reply: for an in-process
  batch (``generate_many`` on transformers / vLLM) every reply carries the whole batch's time.

Tools (OpenAI ``tools`` / ``tool_choice``): a chat template that knows tools (its text mentions
``tools``, as Qwen2.5's does) gets them through ``apply_chat_template(..., tools=...)``. Any other
template gets a hermes-style instruction appended to the system message, assistant tool calls
rendered into their content as ``<tool_call>{json}</tool_call>`` and tool results as a user
message wrapped in ``<tool_response>...</tool_response>``, so templates without a ``tool`` role
still work. ``tool_choice`` ``"required"`` or a named function adds an instruction that a call is
required (an instruction, not constrained decoding); ``"none"`` renders no tools. Replies are
parsed with :func:`memroute.llm.tool_calls.parse_tool_calls` (:func:`apply_tool_calls`).

Streaming: :class:`StreamText` decides which part of the text generated so far can go to the
client (text that may be the start of a stop string or of a tool call is held back).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memroute.errors import InvalidRequest
from memroute.llm.tool_calls import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, may_start_tool_call
from memroute.types import Message, ToolCall

if TYPE_CHECKING:
    from memroute.llm.options import GenerationOptions
    from memroute.types import ModelReply

ROLES = ("system", "user", "assistant", "tool")
TOOL_RESPONSE_OPEN = "<tool_response>"
TOOL_RESPONSE_CLOSE = "</tool_response>"


# -- messages -------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """Mappings/sequences -> dicts/lists (JSON- and Jinja-friendly)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _parsed_arguments(arguments: str) -> Any:
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
            args = json.dumps(_plain(args), ensure_ascii=False)
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
                     "arguments": _parsed_arguments(args) if parse_arguments else args},
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


# -- tools in the prompt --------------------------------------------------------------------


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
    return _plain(fn)


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
    args = _parsed_arguments(arguments) if isinstance(arguments, str) else _plain(arguments)
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
    return dicts, [_plain(t) for t in tools]


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


# -- replies --------------------------------------------------------------------------------


def alt_logprob(candidates: Iterable[tuple[object, float]], chosen: object) -> float:
    """Best log-prob among ``candidates`` other than ``chosen`` (one occurrence of it is skipped).

    ``candidates`` are ``(token, logprob)`` pairs from an engine's top-k (token ids, or token
    strings for an OpenAI server). ``-inf`` when the engine reported no other token.
    """
    best = -math.inf
    skipped = False
    for token, lp in candidates:
        if not skipped and token == chosen:
            skipped = True
            continue
        if lp > best:
            best = float(lp)
    return best


def top_n(candidates: Iterable[tuple[str, float]], n: int) -> list[tuple[str, float]]:
    """The ``n`` best ``(text, logprob)`` candidates, best first (stable on ties)."""
    if n <= 0:
        return []
    ranked = sorted(((str(t), float(lp)) for t, lp in candidates), key=lambda c: -c[1])
    return ranked[:n]


def apply_tool_calls(reply: ModelReply, options: GenerationOptions | None) -> ModelReply:
    """Parse ``reply.text`` for calls of the offered tools (when tools are on): ``tool_calls``
    set, ``finish_reason = "tool_calls"``, ``text`` the remaining content. Log-probs stay."""
    if options is None or not options.tools_on:
        return reply
    from memroute.llm.tool_calls import parse_tool_calls

    content, calls = parse_tool_calls(reply.text, options.tools)
    if calls:
        reply.text, reply.tool_calls, reply.finish_reason = content, calls, "tool_calls"
    return reply


def find_stop(text: str, stop: Sequence[str] | None) -> int | None:
    """Index of the earliest stop-string occurrence in ``text`` (None when there is none)."""
    positions = [text.find(s) for s in (stop or ()) if s]
    positions = [p for p in positions if p >= 0]
    return min(positions) if positions else None


def token_starts(pieces: Sequence[str]) -> list[int]:
    """Character offset where each token's text starts, from the per-token decoded pieces."""
    starts, pos = [], 0
    for p in pieces:
        starts.append(pos)
        pos += len(p)
    return starts


def tokens_before(starts: Sequence[int], end: int) -> int:
    """Number of tokens whose text starts before character ``end``.

    These are the tokens that contribute to ``text[:end]``; a token that straddles the cut is
    kept, a token lying entirely inside a stop string (or after it) is dropped.
    """
    return sum(1 for s in starts if s < end)


def cut_at_stop(
    text: str, starts: Sequence[int], stop: Sequence[str] | None
) -> tuple[str, int, bool]:
    """Truncate ``text`` at the earliest stop string.

    Returns ``(text, tokens_to_keep, stopped)``; ``tokens_to_keep`` is ``len(starts)`` when no
    stop string occurs.
    """
    pos = find_stop(text, stop)
    if pos is None:
        return text, len(starts), False
    return text[:pos], tokens_before(starts, pos), True


# -- streaming ------------------------------------------------------------------------------


def stream_safe_len(text: str, stop: Sequence[str] | None, tools_on: bool) -> int:
    """How many characters of ``text`` (the output so far) may go to a client now.

    Held back: everything from a stop string on, a suffix that may be the start of a stop
    string, a trailing incomplete character (U+FFFD from a partial UTF-8 token) and, with tools
    on, everything from where a tool call may start plus trailing whitespace (it may precede a
    call that the final content will not include).
    """
    stops = [s for s in (stop or ()) if s]
    pos = find_stop(text, stops)
    end = len(text) if pos is None else pos
    if pos is None:
        for s in stops:
            for k in range(min(len(s) - 1, len(text)), 0, -1):
                if text.endswith(s[:k]):
                    end = min(end, len(text) - k)
                    break
    end = min(end, len(text[:end].rstrip("\ufffd")))
    if tools_on:
        start = may_start_tool_call(text[:end])
        if start is not None:
            end = min(end, start)
        end = len(text[:end].rstrip())
    return end


class StreamText:
    """The text deltas of one stream: :meth:`update` with the whole output so far returns what
    may be sent now; :meth:`finish` with the final reply's text returns the rest, so the deltas
    always join to the final text."""

    def __init__(self, stop: Sequence[str] | None = None, tools_on: bool = False) -> None:
        self.stop = [s for s in (stop or ()) if s]
        self.tools_on = tools_on
        self.sent = ""

    def update(self, text: str) -> str:
        n = stream_safe_len(text, self.stop, self.tools_on)
        if n <= len(self.sent) or not text.startswith(self.sent):
            return ""
        delta, self.sent = text[len(self.sent) : n], text[:n]
        return delta

    def stopped(self, text: str) -> bool:
        """Whether ``text`` already contains a stop string (the stream can end)."""
        return find_stop(text, self.stop) is not None

    def finish(self, final_text: str) -> str:
        if not final_text.startswith(self.sent):
            return ""  # cannot happen with the engines' prefix-stable decoding
        delta, self.sent = final_text[len(self.sent) :], final_text
        return delta

    def ending(self, reply: ModelReply) -> Iterator[str | ModelReply]:
        """A stream's last items: the text not sent yet (if any), then the reply itself."""
        tail = self.finish(reply.text)
        if tail:
            yield tail
        yield reply
