"""OpenAI-shaped response bodies, memroute's routing report (body + headers), SSE and errors.

Memory ids are INT64 (up to 2**63): they are sent as strings, since JSON numbers above 2**53
lose precision in JavaScript clients.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from memroute.api.schema import ChatRequest
from memroute.errors import ConfigError, MemrouteError, NotFound, NoTierAnswered, RateLimited
from memroute.types import RouteResult

HEADER_PREFIX = "x-memroute-"


def usage(result: RouteResult) -> dict[str, Any]:
    """Tokens billed for the request: every call of the cascade, not only the answering one;
    ``prompt_tokens_details.cached_tokens``: those of them the engines' prefix caches served."""
    prompt = sum(c.input_tokens for c in result.calls)
    completion = sum(c.output_tokens for c in result.calls)
    total = prompt + completion
    cached = sum(c.cached_tokens for c in result.calls)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total,
            "prompt_tokens_details": {"cached_tokens": cached}}


def memroute_report(result: RouteResult) -> dict[str, Any]:
    """Which tier answered, what each tier tried cost, and the memories injected."""
    d = result.decision
    return {
        "tier": d.answered_tier,
        "model": d.answered_model,
        "escalated": d.escalated,
        "memory_degraded": d.memory_degraded,
        "tiers_skipped": list(d.tiers_skipped),
        "confidences": [round(c, 6) for c in d.confidences],
        "memories_used": {
            "count": len(d.memories),
            "ids": [str(h.memory.id) for h in d.memories],
        },
        "tokens": {
            "base": sum(c.base_prompt_tokens for c in result.calls),
            "injected": sum(c.injected_tokens for c in result.calls),
            "history": sum(c.history_tokens for c in result.calls),
            "output": sum(c.output_tokens for c in result.calls),
            "cached": sum(c.cached_tokens for c in result.calls),
        },
        "eff_cost": round(result.eff_cost, 6),
        "decoding": dict(result.decoding),
        "latency_ms": [round(c.latency_s * 1000.0, 3) for c in result.calls],
        "calls": [
            {
                "tier": c.tier,
                "model": c.model_id,
                "confidence": round(c.confidence, 6),
                "accepted": c.accepted,
                "grounded": c.grounded,  # null: not checked (memroute.routing.grounding)
                "tokens": {
                    "base": c.base_prompt_tokens,
                    "injected": c.injected_tokens,
                    "history": c.history_tokens,
                    "output": c.output_tokens,
                    "cached": c.cached_tokens,
                },
                "eff_cost": round(c.eff_cost, 6),
                "latency_ms": round(c.latency_s * 1000.0, 3),
            }
            for c in result.calls
        ],
    }


def finish_reason(result: RouteResult, max_tokens: int | None) -> str:
    """``tool_calls`` when the answer calls tools; ``length`` when the answering call used its
    whole token budget (the engine says so; or, without its reply, by count), else ``stop``."""
    if result.tool_calls:
        return "tool_calls"
    if result.reply is not None:
        return "length" if result.reply.finish_reason == "length" else "stop"
    answering = [c for c in result.calls if c.accepted]
    if max_tokens is not None and answering and answering[-1].output_tokens >= max_tokens:
        return "length"
    return "stop"


def tool_calls_json(result: RouteResult) -> list[dict[str, Any]]:
    """The answer's tool calls in OpenAI's ``message.tool_calls`` shape."""
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in result.tool_calls]


def assistant_message(result: RouteResult) -> dict[str, Any]:
    """``choices[0].message``: text, or ``tool_calls`` (content null when there is no text)."""
    calls = tool_calls_json(result)
    if not calls:
        return {"role": "assistant", "content": result.answer}
    return {"role": "assistant", "content": result.answer or None, "tool_calls": calls}


def _bytes(text: str) -> list[int]:
    return list(text.encode("utf-8", "surrogatepass"))


def logprobs_json(result: RouteResult) -> dict[str, Any] | None:
    """``choices[0].logprobs`` from the answering tier's reply, when the client asked for them
    (``logprobs: true``): per token its text, log-prob and the top alternatives."""
    reply = result.reply
    if reply is None or reply.token_texts is None:
        return None
    tops = reply.top_logprobs or [[] for _ in reply.token_texts]
    content = [
        {"token": tok, "logprob": lp, "bytes": _bytes(tok),
         "top_logprobs": [{"token": t, "logprob": v, "bytes": _bytes(t)} for t, v in alts]}
        for tok, lp, alts in zip(reply.token_texts, reply.logprobs, tops)
    ]
    return {"content": content, "refusal": None}


def chat_completion(
    result: RouteResult,
    request: ChatRequest,
    *,
    created: int,
    completion_id: str,
    finish: str = "stop",
) -> dict[str, Any]:
    """The ``chat.completion`` body; ``model`` echoes the requested name, ``memroute.model``
    is the model that actually answered."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": request.model,
        "choices": [
            {
                "index": 0,
                "message": assistant_message(result),
                "logprobs": logprobs_json(result),
                "finish_reason": finish,
            }
        ],
        "usage": usage(result),
        "memroute": {**memroute_report(result), "controls": request.controls.echo()},
    }


def memroute_headers(result: RouteResult) -> dict[str, str]:
    """The routing report as ``x-memroute-*`` headers, for clients that drop unknown fields.
    Lists are comma-separated in tier order."""
    r = memroute_report(result)
    values = {
        "tier": str(r["tier"]),
        "model": r["model"],
        "escalated": "true" if r["escalated"] else "false",
        "memory-degraded": "true" if r["memory_degraded"] else "false",
        "tiers-skipped": ",".join(str(t) for t in r["tiers_skipped"]),
        "confidence": ",".join(f"{c:.4f}" for c in r["confidences"]),
        "eff-cost": f"{r['eff_cost']:.6g}",
        "tokens-base": str(r["tokens"]["base"]),
        "tokens-injected": str(r["tokens"]["injected"]),
        "tokens-history": str(r["tokens"]["history"]),
        "tokens-output": str(r["tokens"]["output"]),
        "tokens-cached": str(r["tokens"]["cached"]),
        "memories": str(r["memories_used"]["count"]),
        "memory-ids": ",".join(r["memories_used"]["ids"]),
        "latency-ms": ",".join(f"{ms:.1f}" for ms in r["latency_ms"]),
    }
    return {HEADER_PREFIX + k: _header_safe(v) for k, v in values.items()}


def split_for_stream(text: str) -> list[str]:
    """Word-sized pieces (each with its leading whitespace) whose concatenation is ``text``."""
    return re.findall(r"\s*\S+|\s+$", text)


class ChatChunks:
    """Server-sent events in OpenAI's ``chat.completion.chunk`` shape, built as the answer comes:
    ``opening()`` (the role chunk), ``delta(text)`` per piece of text, then ``closing(result)``:
    the tool calls (if any), the token log-probs (if asked), a final chunk with
    ``finish_reason`` and the ``memroute`` report, a usage-only chunk (``choices: []``) if the
    client asked for it, and ``[DONE]``."""

    def __init__(self, request: ChatRequest, *, created: int, completion_id: str) -> None:
        self.request = request
        self.head = {"id": completion_id, "object": "chat.completion.chunk", "created": created,
                     "model": request.model}

    def _chunk(self, delta: dict[str, Any], reason: str | None, **extra: Any) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        return sse({**self.head, "choices": [choice], **extra})

    def opening(self) -> list[str]:
        return [self._chunk({"role": "assistant", "content": ""}, None)]

    def delta(self, text: str) -> list[str]:
        return [self._chunk({"content": text}, None)] if text else []

    def closing(self, result: RouteResult, finish: str) -> list[str]:
        events = []
        calls = tool_calls_json(result)
        if calls:  # each call whole in one delta, as OpenAI's first chunk of a call carries its id
            events.append(self._chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]},
                                      None))
        lp = logprobs_json(result)
        if lp is not None:  # the tokens' log-probs after the text
            events.append(sse({**self.head, "choices": [{"index": 0, "delta": {}, "logprobs": lp,
                                                         "finish_reason": None}]}))
        events.append(self._chunk({}, finish, memroute={**memroute_report(result),
                                                        "controls": self.request.controls.echo()}))
        if self.request.include_usage:
            events.append(sse({**self.head, "choices": [], "usage": usage(result)}))
        return events + ["data: [DONE]\n\n"]


def stream_chunks(
    result: RouteResult,
    request: ChatRequest,
    *,
    created: int,
    completion_id: str,
    finish: str = "stop",
) -> list[str]:
    """A complete answer as its whole stream: the opening, one chunk per word, the closing."""
    chunks = ChatChunks(request, created=created, completion_id=completion_id)
    events = chunks.opening()
    for piece in split_for_stream(result.answer):
        events += chunks.delta(piece)
    return events + chunks.closing(result, finish)


def sse(payload: dict[str, Any]) -> str:
    # json.dumps escapes newlines, so one event is always one `data:` line.
    return f"data: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"


def models_list(
    names: list[str], *, created: int = 0, owned_by: str = "memroute"
) -> dict[str, Any]:
    """``GET /v1/models``."""
    return {
        "object": "list",
        "data": [
            {"id": n, "object": "model", "created": created, "owned_by": owned_by} for n in names
        ],
    }


# 5xx bodies never carry the exception's text: it may name hosts, paths or upstream replies.
_SERVER_MESSAGES = {
    502: ("a model back end failed; the request may be retried", "backend_error"),
    503: ("the service is unavailable; the request may be retried", "unavailable"),
}


def error_object(status: int, message: str, *, param: str | None = None,
                 code: str | None = None, kind: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape for any status (used directly for errors outside the chat flow).
    A 429's type is ``requests`` or ``tokens`` (which limit), as OpenAI's are."""
    if kind is None:
        kind = ("server_error" if status >= 500 else
                "authentication_error" if status == 401 else
                "requests" if status == 429 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_body(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """``(status, {"error": {message, type, param, code}})`` in OpenAI's error shape.

    Any :class:`MemrouteError` keeps its status (400, 401, 404, 413, a 422 subclass, ...), its
    message and, in ``param``, the bad field. A configuration error met while serving is the
    server's fault (500). Server errors (5xx, and any other exception as 500) get a fixed message.
    """
    kind = None
    if isinstance(exc, ConfigError):
        status, message, param, code = 500, "", None, "config_error"
    elif isinstance(exc, MemrouteError):
        status, message, param, code = exc.status, exc.message, exc.field, exc.code
        if isinstance(exc, NotFound) and exc.field == "model":
            code = "model_not_found"
        if isinstance(exc, RateLimited):  # type "requests" / "tokens", code rate_limit_exceeded
            kind = exc.limit_type
    else:
        status, message, param, code = 500, "", None, "internal_error"
    if isinstance(exc, NoTierAnswered):
        message, param = exc.public_message, None  # which tiers, not what they said
    elif status >= 500:
        message, code = _SERVER_MESSAGES.get(status, ("internal server error", code))
        param = None
    return status, error_object(status, message, param=param, code=code, kind=kind)


def new_completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def _header_safe(value: str) -> str:
    """Header values are latin-1 and single-line: anything else becomes '?'."""
    return "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in value)
