"""The HTTP API of the routed endpoint as a library (no Ray, no web framework).

- :mod:`~memroute.api.schema`: ``parse_chat_request`` validates OpenAI chat bodies (errors name
  the field).
- :mod:`~memroute.api.responses`: ``chat.completion`` bodies, SSE chunks, ``x-memroute-*`` headers,
  OpenAI error bodies, ``/v1/models``.
- :mod:`~memroute.api.tenancy`: API keys -> tenants (the namespace itself: :mod:`memroute.namespace`).
- :mod:`~memroute.api.metrics`: Prometheus collectors on a caller-owned registry.
- :mod:`~memroute.api.handler`: ``ChatApi`` ties them together for a thin server.
"""

from __future__ import annotations

from memroute.api.handler import ApiResponse, ChatApi, PreparedChat
from memroute.api.metrics import ApiMetrics, render
from memroute.api.responses import (
    chat_completion,
    error_body,
    memroute_headers,
    models_list,
    stream_chunks,
)
from memroute.api.schema import ChatRequest, check_body_size, parse_chat_request
from memroute.api.tenancy import ApiKeys

__all__ = [
    "ApiKeys",
    "ApiMetrics",
    "ApiResponse",
    "ChatApi",
    "ChatRequest",
    "PreparedChat",
    "chat_completion",
    "check_body_size",
    "error_body",
    "memroute_headers",
    "models_list",
    "parse_chat_request",
    "render",
    "stream_chunks",
]
