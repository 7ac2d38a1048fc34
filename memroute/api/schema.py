"""Validation of OpenAI ``POST /v1/chat/completions`` bodies into a typed :class:`ChatRequest`.

Every problem raises before any model or store is touched, as :class:`InvalidRequest` (400),
:class:`NotFound` (404, unknown model) or :class:`PayloadTooLarge` (413), with ``field`` set to
the JSON path of the bad value (``messages[1].content``) so the error body's ``param`` names it.
Fields OpenAI defines but memroute does not use (``top_p``, ``stop``, ``seed``, ...) and unknown
fields are ignored, as OpenAI does. Every string that is used (``model``, each message's content or
text part, ``user``) must be valid Unicode without NUL (:func:`_check_text`), so a request that
would fail inside a tokenizer or the store is refused here, alone, before it joins a batch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memroute.api.controls import Controls, parse_controls, tier_model_names
from memroute.config.api import ApiLimits
from memroute.errors import InvalidRequest, NotFound, PayloadTooLarge
from memroute.types import Message

ROLES = ("system", "user", "assistant")
# Lone UTF-16 surrogate halves (JSON allows "\ud800"; UTF-8 cannot encode them: the tokenizers
# raise) and NUL (the embedder's tokenizer silently drops it; C-string paths may cut at it).
_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: list[Message]  # content already flattened to text
    user: str  # the client's `user`, or the configured default user
    user_given: bool  # False when `user` was absent or null
    max_tokens: int | None = None  # None: the router's configured max_tokens
    temperature: float | None = None  # None: the back end's default (greedy)
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage: a final usage-only chunk
    input_chars: int = 0
    controls: Controls = Controls()  # the request's `memroute` object / x-memroute-* headers

    @property
    def query(self) -> str:
        """What the router answers: the last (user) message."""
        return self.messages[-1].content


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
            f"the request body must be a JSON object, got {_json_type(body)}", field="body"
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
        max_tokens=_max_tokens(body, limits),
        temperature=_temperature(body),
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
        raise InvalidRequest(f"model must be a string, got {_json_type(model)}", field="model")
    _check_text(model, "model")
    if not model.strip():
        raise InvalidRequest("model must not be empty", field="model")
    if models is not None and model not in models:
        served = ", ".join(sorted(models))
        raise NotFound(
            f"the model {model[:80]!r} does not exist; this server serves: {served}", field="model"
        )
    return model


def _messages(body: dict, limits: ApiLimits) -> tuple[list[Message], int]:
    raw = body.get("messages")
    if raw is None:
        raise InvalidRequest("messages is required", field="messages")
    if not isinstance(raw, list):
        raise InvalidRequest(
            f"messages must be an array of messages, got {_json_type(raw)}", field="messages"
        )
    if not raw:
        raise InvalidRequest("messages must contain at least one message", field="messages")
    if len(raw) > limits.max_messages:
        raise PayloadTooLarge(
            f"messages has {len(raw)} messages; the limit is {limits.max_messages}",
            field="messages",
        )
    out = [_message(m, f"messages[{i}]") for i, m in enumerate(raw)]
    last = len(out) - 1
    if out[last].role != "user":
        raise InvalidRequest(
            f"the last message must be from the user, got role {out[last].role!r}",
            field=f"messages[{last}].role",
        )
    if not out[last].content.strip():
        raise InvalidRequest(
            "the last user message has no text", field=f"messages[{last}].content"
        )
    total = sum(len(m.content) for m in out)
    if total > limits.max_input_chars:
        raise PayloadTooLarge(
            f"messages hold {total} characters of content; the limit is {limits.max_input_chars}",
            field="messages",
        )
    return out, total


def _message(raw: Any, path: str) -> Message:
    if not isinstance(raw, dict):
        raise InvalidRequest(f"{path} must be an object, got {_json_type(raw)}", field=path)
    role = raw.get("role")
    if role is None:
        raise InvalidRequest(f"{path}.role is required", field=f"{path}.role")
    if role not in ROLES:
        shown = repr(role[:40]) if isinstance(role, str) else _json_type(role)
        raise InvalidRequest(
            f"{path}.role must be one of {', '.join(ROLES)}, got {shown}", field=f"{path}.role"
        )
    return Message(role=role, content=_content(raw.get("content"), f"{path}.content"))


def _content(raw: Any, path: str) -> str:
    """A string, or an array of ``{"type": "text", "text": ...}`` parts joined by newlines."""
    if isinstance(raw, str):
        return _check_text(raw, path)
    if raw is None:
        raise InvalidRequest(f"{path} is required", field=path)
    if not isinstance(raw, list):
        raise InvalidRequest(
            f"{path} must be a string or an array of text parts, got {_json_type(raw)}", field=path
        )
    texts = []
    for j, part in enumerate(raw):
        p = f"{path}[{j}]"
        if not isinstance(part, dict):
            raise InvalidRequest(f"{p} must be an object, got {_json_type(part)}", field=p)
        if part.get("type") != "text":
            kind = part.get("type")
            shown = repr(kind[:40]) if isinstance(kind, str) else _json_type(kind)
            raise InvalidRequest(
                f"{p}.type must be 'text' (only text content is supported), got {shown}",
                field=f"{p}.type",
            )
        text = part.get("text")
        if not isinstance(text, str):
            raise InvalidRequest(
                f"{p}.text must be a string, got {_json_type(text)}", field=f"{p}.text"
            )
        texts.append(_check_text(text, f"{p}.text"))
    return "\n".join(texts)


def _user(body: dict, limits: ApiLimits, default_user: str) -> tuple[str, bool]:
    user = body.get("user")
    if user is None:
        return default_user, False
    if not isinstance(user, str):
        raise InvalidRequest(f"user must be a string, got {_json_type(user)}", field="user")
    _check_text(user, "user")
    if not user:
        raise InvalidRequest("user must not be empty (omit it for the default user)", field="user")
    if len(user) > limits.max_user_chars:
        raise InvalidRequest(
            f"user is {len(user)} characters; the limit is {limits.max_user_chars}", field="user"
        )
    return user, True


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
        raise InvalidRequest(f"{name} must be an integer, got {_json_type(value)}", field=name)
    if value < 1:
        raise InvalidRequest(f"{name} must be at least 1, got {value}", field=name)
    if value > limits.max_tokens:
        raise InvalidRequest(
            f"{name} must be at most {limits.max_tokens} on this server, got {value}", field=name
        )
    return value


def _temperature(body: dict) -> float | None:
    value = body.get("temperature")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequest(
            f"temperature must be a number, got {_json_type(value)}", field="temperature"
        )
    # An int is compared exactly: math.isfinite(10**400) raises OverflowError (a 500 before).
    if (isinstance(value, float) and not math.isfinite(value)) or not 0.0 <= value <= 2.0:
        raise InvalidRequest(
            f"temperature must be between 0 and 2, got {value}", field="temperature"
        )
    return float(value)


def _optional_bool(body: dict, name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidRequest(f"{name} must be a boolean, got {_json_type(value)}", field=name)
    return value


def _include_usage(body: dict) -> bool:
    opts = body.get("stream_options")
    if opts is None:
        return False
    if not isinstance(opts, dict):
        raise InvalidRequest(
            f"stream_options must be an object, got {_json_type(opts)}", field="stream_options"
        )
    value = opts.get("include_usage")
    if value is not None and not isinstance(value, bool):
        raise InvalidRequest(
            f"stream_options.include_usage must be a boolean, got {_json_type(value)}",
            field="stream_options.include_usage",
        )
    return bool(value)


def _check_text(text: str, path: str) -> str:
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


def _check_n(body: dict) -> None:
    # One answer per request: silently returning 1 choice for n=3 would mislead the client.
    value = body.get("n")
    if value is not None and (isinstance(value, bool) or value != 1):
        raise InvalidRequest(f"n must be 1 on this server, got {value!r}", field="n")


def _json_type(value: Any) -> str:
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
