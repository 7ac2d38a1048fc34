"""Validation of OpenAI ``POST /v1/chat/completions`` bodies into a typed :class:`ChatRequest`.

Every problem raises before any model or store is touched, as :class:`InvalidRequest` (400),
:class:`NotFound` (404, unknown model) or :class:`PayloadTooLarge` (413), with ``field`` set to
the JSON path of the bad value (``messages[1].content``) so the error body's ``param`` names it.
Messages (tool calls and results included): :mod:`memroute.api.messages`; generation settings
and tools: :mod:`memroute.api.generation`. Unknown fields are ignored, as OpenAI does. Every
string that is used must be valid Unicode without NUL (:func:`check_text`), so a request that
would fail inside a tokenizer or the store is refused here, alone, before it joins a batch.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memroute.api.controls import Controls, parse_controls, tier_model_names
from memroute.api.generation import Generation, parse_generation
from memroute.api.messages import check_text, json_type, parse_messages
from memroute.config.api import ApiLimits
from memroute.errors import InvalidRequest, NotFound, PayloadTooLarge
from memroute.types import Message


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: list[Message]  # content already flattened to text
    user: str  # the client's `user`, or the configured default user
    user_given: bool  # False when `user` was absent or null
    generation: Generation = field(default_factory=Generation)  # the client's settings, tools
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage: a final usage-only chunk
    input_chars: int = 0
    controls: Controls = Controls()  # the request's `memroute` object / x-memroute-* headers

    @property
    def query(self) -> str:
        """What the router answers: the last user message (tool results may follow it)."""
        return next(m.content for m in reversed(self.messages) if m.role == "user")

    @property
    def max_tokens(self) -> int | None:
        return self.generation.max_tokens

    @property
    def temperature(self) -> float | None:
        return self.generation.temperature


def check_body_size(n_bytes: int, limits: ApiLimits) -> None:
    """For the server, before JSON parsing: refuse bodies over ``limits.max_body_bytes``."""
    if n_bytes > limits.max_body_bytes:
        raise PayloadTooLarge(
            f"request body is {n_bytes} bytes; the limit is {limits.max_body_bytes}", field="body"
        )


def parse_chat_request(
    body: Any,
    *,
    limits: ApiLimits,
    default_user: str = "default",
    models: Collection[str] | None = None,
    tiers: Sequence[str] = (),
    headers: Mapping[str, str] | None = None,
    tau_range: tuple[float, float] = (0.0, 1.0),
) -> ChatRequest:
    """Validate a decoded JSON body. ``models``: the served names (None accepts any name);
    ``tiers``: the cascade's tier names, pinned by ``memroute/<tier>`` or the ``memroute`` object
    (:mod:`memroute.api.controls`, which also reads ``headers``)."""
    if not isinstance(body, dict):
        raise InvalidRequest(
            f"the request body must be a JSON object, got {json_type(body)}", field="body"
        )
    pins = dict(zip(tier_model_names(tiers), range(len(tiers))))
    model = _model(body, None if models is None else [*models, *pins])
    controls = parse_controls(body, headers, tiers=tiers, tau_range=tau_range,
                              model_tier=pins.get(model))
    _check_n(body)
    messages, input_chars = _messages(body, limits)
    user, user_given = _user(body, limits, default_user)
    return ChatRequest(
        model=model,
        messages=messages,
        user=user,
        user_given=user_given,
        generation=parse_generation(body, limits),
        stream=_optional_bool(body, "stream"),
        include_usage=_include_usage(body),
        input_chars=input_chars,
        controls=controls,
    )


# -- fields ---------------------------------------------------------------------------------


def _model(body: dict, models: Collection[str] | None) -> str:
    if "model" not in body or body["model"] is None:
        raise InvalidRequest("model is required", field="model")
    model = body["model"]
    if not isinstance(model, str):
        raise InvalidRequest(f"model must be a string, got {json_type(model)}", field="model")
    check_text(model, "model")
    if not model.strip():
        raise InvalidRequest("model must not be empty", field="model")
    if models is not None and model not in models:
        served = ", ".join(sorted(models))
        raise NotFound(
            f"the model {model[:80]!r} does not exist; this server serves: {served}", field="model"
        )
    return model


def _messages(body: dict, limits: ApiLimits) -> tuple[list[Message], int]:
    out = parse_messages(body.get("messages"), max_messages=limits.max_messages)
    total = sum(len(m.content) + sum(len(c.arguments) for c in m.tool_calls) for m in out)
    if total > limits.max_input_chars:
        raise PayloadTooLarge(
            f"messages hold {total} characters of content; the limit is {limits.max_input_chars}",
            field="messages",
        )
    return out, total


def _user(body: dict, limits: ApiLimits, default_user: str) -> tuple[str, bool]:
    user = body.get("user")
    if user is None:
        return default_user, False
    if not isinstance(user, str):
        raise InvalidRequest(f"user must be a string, got {json_type(user)}", field="user")
    check_text(user, "user")
    if not user:
        raise InvalidRequest("user must not be empty (omit it for the default user)", field="user")
    if len(user) > limits.max_user_chars:
        raise InvalidRequest(
            f"user is {len(user)} characters; the limit is {limits.max_user_chars}", field="user"
        )
    return user, True


def _optional_bool(body: dict, name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidRequest(f"{name} must be a boolean, got {json_type(value)}", field=name)
    return value


def _include_usage(body: dict) -> bool:
    opts = body.get("stream_options")
    if opts is None:
        return False
    if not isinstance(opts, dict):
        raise InvalidRequest(
            f"stream_options must be an object, got {json_type(opts)}", field="stream_options"
        )
    value = opts.get("include_usage")
    if value is not None and not isinstance(value, bool):
        raise InvalidRequest(
            f"stream_options.include_usage must be a boolean, got {json_type(value)}",
            field="stream_options.include_usage",
        )
    return bool(value)


def _check_n(body: dict) -> None:
    # One answer per request: silently returning 1 choice for n=3 would mislead the client.
    value = body.get("n")
    if value is not None and (isinstance(value, bool) or value != 1):
        raise InvalidRequest(f"n must be 1 on this server, got {value!r}", field="n")
