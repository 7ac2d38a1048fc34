"""The output side of the Responses API (``POST /v1/responses``): a ``chat.completion`` body
rendered as a Responses ``response`` object (:func:`response_object`) or as its stream of events
(:class:`ResponseEvents`). The request side is :mod:`memroute.api.responses_request`.

A text answer is one ``message`` item (``msg_<response id>``), each tool call a
``function_call`` item (``fc_<response id>_<k>``, its ``call_id`` the chat tool call id); an
answer cut by the token budget (``finish_reason: "length"``) is ``status: "incomplete"`` with
``incomplete_details.reason = "max_output_tokens"``. The request's settings are echoed as OpenAI
does; ``store`` is always echoed ``false`` (nothing is stored), ignored settings as their defaults.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from memroute.api.responses_request import echoed_settings as _settings


def response_object(
    completion: Mapping[str, Any],
    *,
    response_id: str,
    created_at: float,
    request: Mapping[str, Any] | None,
    completed_at: float | None = None,
) -> dict[str, Any]:
    """The Responses ``response`` object for a ``chat.completion`` body answering ``request``
    (the Responses body, whose settings are echoed); ``model`` is the completion's."""
    answer = _answer(completion)
    return _response(
        response_id=response_id,
        created_at=created_at,
        model=answer.model,
        settings=_settings(request or {}),
        status="incomplete" if answer.incomplete else "completed",
        incomplete=answer.incomplete,
        output=_output_items(answer, response_id),
        usage=answer.usage,
        memroute=answer.memroute,
        completed_at=completed_at,
    )


class ResponseEvents:
    """The Responses stream for one answer, as SSE frames (``event: <type>\\ndata: <json>``).

    ``opening()`` (response.created, response.in_progress), any number of ``text_delta(text)``
    as the answer's text arrives, then ``closing(completion)`` with the final ``chat.completion``
    body: it ends the text item, emits each tool call as a ``function_call`` item and ends with
    response.completed (or response.incomplete) carrying :func:`response_object`. Text the deltas
    did not deliver yet is sent by ``closing`` as a last delta, so the deltas always join to the
    final ``output_text``; ``opening`` is emitted first by whichever call comes first.
    """

    def __init__(
        self,
        *,
        response_id: str,
        created_at: float,
        model: str,
        request: Mapping[str, Any] | None,
    ) -> None:
        self.response_id = response_id
        self.created_at = created_at
        self.model = model
        self._request = request or {}
        self._settings = _settings(self._request)
        self._message_id = _message_id(response_id)
        self._sequence = 0
        self._opened = False
        self._message_open = False
        self._closed = False
        self._streamed: list[str] = []

    def opening(self) -> list[str]:
        self._check_open()
        if self._opened:
            raise RuntimeError("opening() was already sent")
        self._opened = True
        response = _response(
            response_id=self.response_id, created_at=self.created_at, model=self.model,
            settings=self._settings, status="in_progress", incomplete=None, output=[],
            usage=None, memroute=None, completed_at=None,
        )
        return [self._frame("response.created", response=response),
                self._frame("response.in_progress", response=response)]

    def text_delta(self, text: str) -> list[str]:
        self._check_open()
        frames = [] if self._opened else self.opening()
        if not text:
            return frames
        if not self._message_open:
            frames += self._open_message()
        frames.append(self._frame(
            "response.output_text.delta", item_id=self._message_id, output_index=0,
            content_index=0, delta=text, logprobs=[],
        ))
        self._streamed.append(text)
        return frames

    def closing(self, completion: Mapping[str, Any]) -> list[str]:
        self._check_open()
        frames = [] if self._opened else self.opening()
        answer = _answer(completion)
        streamed = "".join(self._streamed)
        if not answer.text.startswith(streamed):
            raise ValueError("the streamed text is not the start of the completion's answer")
        final = response_object(completion, response_id=self.response_id,
                                created_at=self.created_at, request=self._request)
        output = final["output"]
        first_call = 0
        if answer.has_message:
            rest = answer.text[len(streamed):]
            if rest:
                frames += self.text_delta(rest)
            elif not self._message_open:
                frames += self._open_message()
            item = output[0]
            where = {"item_id": self._message_id, "output_index": 0}
            frames += [
                self._frame("response.output_text.done", **where, content_index=0,
                            text=answer.text, logprobs=[]),
                self._frame("response.content_part.done", **where, content_index=0,
                            part=item["content"][0]),
                self._frame("response.output_item.done", output_index=0, item=item),
            ]
            first_call = 1
        elif streamed:
            raise ValueError("text was streamed but the completion has no text answer")
        for index, item in enumerate(output[first_call:], start=first_call):
            where = {"item_id": item["id"], "output_index": index}
            frames += [
                self._frame("response.output_item.added", output_index=index,
                            item={**item, "arguments": "", "status": "in_progress"}),
                self._frame("response.function_call_arguments.delta", **where,
                            delta=item["arguments"]),
                self._frame("response.function_call_arguments.done", **where,
                            name=item["name"], arguments=item["arguments"]),
                self._frame("response.output_item.done", output_index=index, item=item),
            ]
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        frames.append(self._frame(kind, response=final))
        self._closed = True
        return frames

    def _open_message(self) -> list[str]:
        self._message_open = True
        item = {"id": self._message_id, "type": "message", "status": "in_progress",
                "content": [], "role": "assistant"}
        return [
            self._frame("response.output_item.added", output_index=0, item=item),
            self._frame("response.content_part.added", item_id=self._message_id, output_index=0,
                        content_index=0, part=_text_part("")),
        ]

    def error(self, error: Mapping[str, Any]) -> list[str]:
        """A stream that fails after it started ends with OpenAI's ``error`` event (``error``:
        the body's ``{"message", "code", "param"}``)."""
        self._closed = True
        return [self._frame("error", code=error.get("code"), message=error.get("message", ""),
                            param=error.get("param"))]

    def _frame(self, kind: str, **fields: Any) -> str:
        payload = {"type": kind, **fields, "sequence_number": self._sequence}
        self._sequence += 1
        data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        return f"event: {kind}\ndata: {data}\n\n"

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the stream is closed: closing() was already sent")


class _Answer:
    """What a ``chat.completion`` body answered, read defensively."""

    def __init__(self, completion: Mapping[str, Any]) -> None:
        choices = completion.get("choices") or [{}]
        choice = choices[0] if isinstance(choices[0], Mapping) else {}
        message = choice.get("message") or {}
        content = message.get("content")
        self.text: str = content if isinstance(content, str) else ""
        self.tool_calls: list[tuple[str, str, str]] = []
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            self.tool_calls.append((str(call.get("id") or ""), str(function.get("name") or ""),
                                    str(function.get("arguments") or "")))
        reason = choice.get("finish_reason")
        self.incomplete: str | None = {"length": "max_output_tokens",
                                       "content_filter": "content_filter"}.get(reason)
        self.model: str = str(completion.get("model") or "")
        self.usage = _usage(completion.get("usage"))
        self.memroute = completion.get("memroute")

    @property
    def has_message(self) -> bool:
        """A message item: when there is text, or nothing else (an empty answer)."""
        return bool(self.text) or not self.tool_calls


def _answer(completion: Mapping[str, Any]) -> _Answer:
    if not isinstance(completion, Mapping):
        raise TypeError(f"completion must be a chat.completion mapping, got {type(completion)}")
    return _Answer(completion)


def _output_items(answer: _Answer, response_id: str) -> list[dict[str, Any]]:
    status = "incomplete" if answer.incomplete else "completed"
    items: list[dict[str, Any]] = []
    if answer.has_message:
        items.append({"id": _message_id(response_id), "type": "message", "status": status,
                      "content": [_text_part(answer.text)], "role": "assistant"})
    for k, (call_id, name, arguments) in enumerate(answer.tool_calls):
        items.append({"id": f"fc_{_id_suffix(response_id)}_{k}", "type": "function_call",
                      "status": status, "arguments": arguments, "call_id": call_id,
                      "name": name})
    return items


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def _usage(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, Mapping):
        return None

    def count(d: Any, key: str) -> int:
        value = d.get(key) if isinstance(d, Mapping) else None
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    prompt, completion = count(raw, "prompt_tokens"), count(raw, "completion_tokens")
    total = count(raw, "total_tokens") or prompt + completion
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": count(raw.get("prompt_tokens_details"), "cached_tokens"),
            "cache_write_tokens": 0,  # memroute has no prompt cache to write
        },
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": count(raw.get("completion_tokens_details"),
                                                            "reasoning_tokens")},
        "total_tokens": total,
    }


def _response(
    *,
    response_id: str,
    created_at: float,
    model: str,
    settings: Mapping[str, Any],
    status: str,
    incomplete: str | None,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    memroute: Any,
    completed_at: float | None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None if incomplete is None else {"reason": incomplete},
        "instructions": settings["instructions"],
        "max_output_tokens": settings["max_output_tokens"],
        "model": model,
        "output": output,
        "parallel_tool_calls": settings["parallel_tool_calls"],
        "previous_response_id": None,
        "reasoning": None,
        "service_tier": "default",
        "store": False,
        "temperature": settings["temperature"],
        "text": {"format": {"type": "text"}},
        "tool_choice": settings["tool_choice"],
        "tools": [dict(t) for t in settings["tools"]],
        "top_p": settings["top_p"],
        "truncation": "disabled",
        "usage": usage,
        "user": settings["user"],
        "metadata": dict(settings["metadata"]),
    }
    if completed_at is not None:
        out["completed_at"] = completed_at
    if memroute is not None:
        out["memroute"] = memroute
    return out


def _id_suffix(response_id: str) -> str:
    return response_id.removeprefix("resp_")


def _message_id(response_id: str) -> str:
    return f"msg_{_id_suffix(response_id)}"
