"""The request flow of ``POST /v1/chat/completions`` without the HTTP server or the Router.

A server (the Ray Serve ingress) does::

    try:
        prepared = api.prepare(body, headers.get("authorization"))    # 401 / 429 / 400 / 404 / 413
        result = await router(prepared.user_id, prepared.chat.query)   # the cascade (serving core)
        return api.respond(prepared, result, latency_s=...)            # body or SSE + headers
    except Exception as exc:
        return api.error(exc, tenant=...)                              # OpenAI error shape

The API key is checked before the body, so an unauthenticated caller learns nothing about
validation. Everything here is synchronous and pure, so it runs in any server and in unit tests.
An ``Idempotency-Key`` header is validated here and carried with the body's hash; the serving
core looks it up and records the answer (:meth:`ApiResponse.to_json`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memroute.api.controls import tier_model_names
from memroute.api.metrics import ApiMetrics
from memroute.api.ratelimit import TenantLimiter, retry_after_headers
from memroute.api.responses import (
    chat_completion,
    error_body,
    finish_reason,
    memroute_headers,
    models_list,
    new_completion_id,
    stream_chunks,
    usage,
)
from memroute.api.schema import ChatRequest, parse_chat_request
from memroute.api.tenancy import ApiKeys
from memroute.config.api import ApiConfig
from memroute.errors import InvalidRequest, RateLimited
from memroute.namespace import namespace, validate_tenant
from memroute.types import RouteResult

JSON = "application/json"
SSE = "text/event-stream"
IDEMPOTENCY_HEADER = "idempotency-key"
REPLAYED_HEADER = "idempotent-replayed"
MAX_IDEMPOTENCY_KEY = 255


@dataclass(frozen=True)
class PreparedChat:
    tenant: str
    chat: ChatRequest
    user_id: str  # the memory namespace of (tenant, chat.user)
    idempotency_key: str | None = None
    body_hash: str | None = None  # sha256 of the canonical JSON body; only with a key


@dataclass
class ApiResponse:
    status: int
    media_type: str
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None  # JSON responses
    events: list[str] | None = None  # SSE responses, already framed ("data: ...\n\n")

    def to_json(self) -> str:
        """The whole response as stored for an idempotency key (replayed as it was)."""
        return json.dumps(
            {"status": self.status, "media_type": self.media_type, "headers": self.headers,
             "body": self.body, "events": self.events},
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str, *, replayed: bool = True) -> ApiResponse:
        d = json.loads(text)
        headers = dict(d.get("headers") or {})
        if replayed:
            headers[REPLAYED_HEADER] = "true"
        return cls(d["status"], d["media_type"], headers, d.get("body"), d.get("events"))


def check_idempotency_key(value: str | None) -> str | None:
    """The ``Idempotency-Key`` header: absent (None), or 1-255 printable ASCII characters."""
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_IDEMPOTENCY_KEY or not all(
        32 <= ord(ch) < 127 for ch in value
    ):
        raise InvalidRequest(
            f"the Idempotency-Key header must be 1-{MAX_IDEMPOTENCY_KEY} printable ASCII "
            "characters",
            field=IDEMPOTENCY_HEADER,
        )
    return value


def body_hash(body: Any) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces): a retry's body hashes the same
    however its client ordered or spaced it."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


class ChatApi:
    def __init__(
        self,
        cfg: ApiConfig,
        keys: ApiKeys,
        metrics: ApiMetrics | None = None,
        *,
        clock: Callable[[], float] = time.time,
        limiter: TenantLimiter | None = None,
        tiers: Sequence[str] = (),
    ) -> None:
        self.cfg = cfg
        self.keys = keys
        self.tiers = list(tiers)  # the cascade's tier names: pinned as memroute/<name>
        self.metrics = metrics
        self.clock = clock
        # Per-tenant request and token rates (api.rate_limits); None when nothing is limited.
        self.limiter = limiter if limiter is not None else TenantLimiter.from_config(cfg)

    def admit(self, authorization: str | None) -> str:
        """The caller's tenant, if its key is valid (401/403) and it is within its rate limits
        (429): a server calls this before reading the body, so a refusal costs nothing."""
        tenant = self.keys.authenticate(authorization)
        if self.limiter is not None:
            self.limiter.admit(tenant)
        return tenant

    def prepare(
        self, body: Any, authorization: str | None, idempotency_key: str | None = None,
        *, tenant: str | None = None, headers: Mapping[str, str] | None = None,
    ) -> PreparedChat:
        """``tenant``: given when :meth:`admit` already ran for this request (not counted twice);
        ``headers``: the request's, for the ``x-memroute-*`` controls."""
        tenant = tenant if tenant is not None else self.admit(authorization)
        key = check_idempotency_key(idempotency_key)
        chat = parse_chat_request(
            body, limits=self.cfg.limits, default_user=self.cfg.default_user, models=self.cfg.models,
            tiers=self.tiers, headers=headers, tau_range=tuple(self.cfg.tau_range),  # type: ignore[arg-type]
        )
        digest = body_hash(body) if key is not None else None
        return PreparedChat(tenant, chat, namespace(tenant, chat.user), key, digest)

    def namespace_of(self, tenant: str | None, user: str | None) -> str:
        """The memory namespace an operator names (``?tenant=&user=``), validated as a chat
        request's ``user`` is (same length limit), so admin reads accept no id chat refuses."""
        if not tenant:
            raise InvalidRequest("the query parameter tenant is required", field="tenant")
        if not user:
            raise InvalidRequest("the query parameter user is required", field="user")
        validate_tenant(tenant)
        limit = self.cfg.limits.max_user_chars
        if len(user) > limit:
            raise InvalidRequest(f"user is {len(user)} characters; the limit is {limit}", field="user")
        return namespace(tenant, user)

    def replay(self, stored: str, tenant: str) -> ApiResponse:
        """The first answer of an idempotency key, sent again (no model work)."""
        if self.metrics is not None:
            self.metrics.record_replay(tenant)
        return ApiResponse.from_json(stored)

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
        if self.limiter is not None:  # tokens are known only now: charged after the answer
            self.limiter.charge(prepared.tenant, usage(result)["total_tokens"])
        if self.metrics is not None:
            self.metrics.record(result, prepared.tenant, latency_s)
        if chat.stream:
            return ApiResponse(200, SSE, headers, events=stream_chunks(result, chat, **kw))
        return ApiResponse(200, JSON, headers, body=chat_completion(result, chat, **kw))

    def error(self, exc: BaseException, *, tenant: str | None = None) -> ApiResponse:
        status, body = error_body(exc)
        if isinstance(exc, RateLimited) and tenant is None:
            tenant = exc.tenant  # refused in prepare, before the caller knew the tenant
        if self.metrics is not None:
            self.metrics.record_error(status, tenant)
        headers = {"www-authenticate": "Bearer"} if status == 401 else {}
        if isinstance(exc, RateLimited):
            headers.update(exc.headers)
            headers.update(retry_after_headers(exc.retry_after_s))
        return ApiResponse(status, JSON, headers, body=body)

    def models(self, authorization: str | None) -> ApiResponse:
        """``GET /v1/models`` (authenticated, as OpenAI's is)."""
        try:
            self.keys.authenticate(authorization)
        except Exception as exc:  # noqa: BLE001 - every failure becomes an error response
            return self.error(exc)
        return ApiResponse(200, JSON, body=models_list([*self.cfg.models,
                                                         *tier_model_names(self.tiers)]))
