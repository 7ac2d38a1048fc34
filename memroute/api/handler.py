"""The request flow of ``POST /v1/chat/completions`` without the HTTP server or the Router.

A server (the Ray Serve ingress) does::

    try:
        prepared = api.prepare(body, headers.get("authorization"))    # 401 / 400 / 404 / 413
        result = await router(prepared.route_request())                # the cascade
        return api.respond(prepared, result, latency_s=...)            # body or SSE + headers
    except Exception as exc:
        return api.error(exc, tenant=...)                              # OpenAI error shape

The API key is checked before the body, so an unauthenticated caller learns nothing about
validation. Everything here is synchronous and pure, so it runs in any server and in unit tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memroute.api.config import ApiConfig
from memroute.api.metrics import ApiMetrics
from memroute.api.responses import (
    chat_completion,
    error_body,
    finish_reason,
    memroute_headers,
    models_list,
    new_completion_id,
    stream_chunks,
)
from memroute.api.schema import ChatRequest, parse_chat_request
from memroute.api.tenancy import ApiKeys, namespace
from memroute.routing.router import RouteRequest
from memroute.types import RouteResult

JSON = "application/json"
SSE = "text/event-stream"


@dataclass(frozen=True)
class PreparedChat:
    tenant: str
    chat: ChatRequest
    user_id: str  # the memory namespace of (tenant, chat.user)

    def route_request(self) -> RouteRequest:
        return RouteRequest(user_id=self.user_id, query=self.chat.query)


@dataclass
class ApiResponse:
    status: int
    media_type: str
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None  # JSON responses
    events: list[str] | None = None  # SSE responses, already framed ("data: ...\n\n")


class ChatApi:
    def __init__(
        self,
        cfg: ApiConfig,
        keys: ApiKeys,
        metrics: ApiMetrics | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cfg = cfg
        self.keys = keys
        self.metrics = metrics
        self.clock = clock

    def prepare(self, body: Any, authorization: str | None) -> PreparedChat:
        tenant = self.keys.authenticate(authorization)
        chat = parse_chat_request(
            body, limits=self.cfg.limits, default_user=self.cfg.default_user, models=self.cfg.models
        )
        return PreparedChat(tenant, chat, namespace(tenant, chat.user))

    def respond(
        self, prepared: PreparedChat, result: RouteResult, *, latency_s: float
    ) -> ApiResponse:
        chat = prepared.chat
        kw = dict(
            created=int(self.clock()),
            completion_id=new_completion_id(),
            finish=finish_reason(result, chat.max_tokens),
        )
        headers = memroute_headers(result)
        if self.metrics is not None:
            self.metrics.record(result, prepared.tenant, latency_s)
        if chat.stream:
            return ApiResponse(200, SSE, headers, events=stream_chunks(result, chat, **kw))
        return ApiResponse(200, JSON, headers, body=chat_completion(result, chat, **kw))

    def error(self, exc: BaseException, *, tenant: str | None = None) -> ApiResponse:
        status, body = error_body(exc)
        if self.metrics is not None:
            self.metrics.record_error(status, tenant)
        headers = {"www-authenticate": "Bearer"} if status == 401 else {}
        return ApiResponse(status, JSON, headers, body=body)

    def models(self, authorization: str | None) -> ApiResponse:
        """``GET /v1/models`` (authenticated, as OpenAI's is)."""
        try:
            self.keys.authenticate(authorization)
        except Exception as exc:  # noqa: BLE001 - every failure becomes an error response
            return self.error(exc)
        return ApiResponse(200, JSON, body=models_list(list(self.cfg.models)))
