"""Reading the OpenAI chat-completions wire format: streamed chunks folded into one completion,
tool calls, error bodies and the prefix-cache count in ``usage``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memroute.llm.tool_calls import arguments_text, new_call_id
from memroute.types import ToolCall


class StreamAccumulator:
    """Chat-completion chunks folded back into one completion (the non-streamed shape)."""

    def __init__(self) -> None:
        self.content = ""
        self.entries: list[dict[str, Any]] = []
        self.finish: str | None = None
        self.stop_reason: Any = None
        self.has_stop_reason = False
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] | None = None

    def add(self, chunk: Mapping[str, Any]) -> None:
        if isinstance(chunk.get("usage"), Mapping):
            self.usage = dict(chunk["usage"])
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            self.content += delta.get("content") or ""
            for call in delta.get("tool_calls") or ():
                slot = self.calls.setdefault(
                    int(call.get("index", len(self.calls))),
                    {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                slot["id"] = call.get("id") or slot["id"]
                fn = call.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
            self.entries += (choice.get("logprobs") or {}).get("content") or []
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
            if "stop_reason" in choice:
                self.has_stop_reason = True
                self.stop_reason = choice["stop_reason"]

    def completion(self) -> dict[str, Any]:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": self.content,
                        "tool_calls": [self.calls[i] for i in sorted(self.calls)]},
            "finish_reason": self.finish,
            "logprobs": {"content": self.entries},
        }
        if self.has_stop_reason:
            choice["stop_reason"] = self.stop_reason
        data: dict[str, Any] = {"choices": [choice]}
        if self.usage is not None:
            data["usage"] = self.usage
        return data


def plain_json(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): plain_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_json(v) for v in value]
    return value


def parse_tool_call(call: Mapping[str, Any]) -> ToolCall:
    fn = call.get("function")
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
        raise TypeError(f"tool call without a function name: {call!r}")
    return ToolCall(id=call.get("id") or new_call_id(), name=fn["name"],
                    arguments=arguments_text(fn.get("arguments")))


def server_message(resp: Any) -> str:
    """The error text of an OpenAI-style (or FastAPI) error body, else the start of the body."""
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:500]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        for key in ("message", "detail", "error"):
            if body.get(key):
                return str(body[key])[:500]
    return str(body)[:500]


def reported_cached(usage: Mapping[str, Any], prompt_tokens: int) -> int:
    """The server's prefix-cache hits (``usage.prompt_tokens_details.cached_tokens``; vLLM
    sends it with ``--enable-prompt-tokens-details``); 0 when it reports none: a remote cache
    is not guessed at."""
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    if isinstance(cached, bool) or not isinstance(cached, int):
        return 0
    return max(0, min(cached, prompt_tokens))
