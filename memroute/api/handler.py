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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from memroute.api.controls import tier_model_names
from memroute.api.metrics import ApiMetrics
from memroute.api.ratelimit import TenantLimiter, retry_after_headers
from memroute.api.responses import (
    ChatChunks,
    chat_completion,
    error_body,
    finish_reason,
    memroute_headers,
    models_list,
    new_completion_id,
    split_for_stream,
    sse,
    stream_chunks,
    usage,
)
from memroute.api.responses_output import ResponseEvents, response_object
from memroute.api.responses_request import (
    new_response_id,
    responses_field,
    responses_to_chat_body,
)
from memroute.api.schema import ChatRequest, parse_chat_request
from memroute.api.tenancy import ApiKeys
from memroute.config.api import ApiConfig
from memroute.errors import InvalidRequest, MemrouteError, RateLimited
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
    # A Responses API request (POST /v1/responses): its own body, answered in its shape.
    responses_body: dict[str, Any] | None = None


@dataclass
class ApiResponse:
    status: int
    media_type: str
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None  # JSON responses
    # SSE responses, already framed ("data: ...\n\n"): a list, or an iterator of a live stream
    # (blocking: a server pulls it from a worker thread)
    events: list[str] | Iterator[str] | None = None

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

    @property
    def live(self) -> bool:
        return self.events is not None and not isinstance(self.events, list)


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

    def prepare_responses(
        self, body: Any, authorization: str | None, idempotency_key: str | None = None,
        *, tenant: str | None = None, headers: Mapping[str, str] | None = None,
    ) -> PreparedChat:
        """``POST /v1/responses``: the body translated to a chat body and prepared as one
        (:mod:`memroute.api.responses_request`); errors name the Responses fields."""
        tenant = tenant if tenant is not None else self.admit(authorization)
        chat_body = responses_to_chat_body(body)
        try:
            prepared = self.prepare(chat_body, authorization, idempotency_key, tenant=tenant,
                                    headers=headers)
        except MemrouteError as exc:
            exc.field = responses_field(exc.field)
            raise
        digest = body_hash({"responses": body}) if prepared.idempotency_key is not None else None
        return replace(prepared, body_hash=digest, responses_body=body)

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
        kw: dict[str, Any] = {
            "created": int(self.clock()),
            "completion_id": new_completion_id(),
            "finish": finish_reason(result, chat.max_tokens),
        }
        headers = memroute_headers(result)
        if self.limiter is not None:  # tokens are known only now: charged after the answer
            self.limiter.charge(prepared.tenant, usage(result)["total_tokens"])
        if self.metrics is not None:
            self.metrics.record(result, prepared.tenant, latency_s)
        if prepared.responses_body is not None:
            return self._responses(prepared, result, headers, kw)
        if chat.stream:
            return ApiResponse(200, SSE, headers, events=stream_chunks(result, chat, **kw))
        return ApiResponse(200, JSON, headers, body=chat_completion(result, chat, **kw))

    def respond_live(
        self, prepared: PreparedChat, result: RouteResult, *, started: float,
        on_done: Callable[[list[str]], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> ApiResponse:
        """A streamed answer whose last tier is still generating (``result.stream``): the
        events go out as its text comes; the headers carry what was known before that tier
        (its index, the model, the memories), the final event the whole report. ``on_done``
        gets every frame once the stream completed (an idempotency record), ``on_error`` the
        exception that ended it (sent as OpenAI's in-stream error); ``started``: perf_counter."""
        return ApiResponse(200, SSE, memroute_headers(result),
                           events=self._live(prepared, result, started, on_done, on_error))

    def _live(self, prepared: PreparedChat, result: RouteResult, started: float,
              on_done: Callable[[list[str]], None] | None,
              on_error: Callable[[BaseException], None] | None) -> Iterator[str]:
        chat, frames = prepared.chat, []
        created, cid = int(self.clock()), new_completion_id()
        responses = prepared.responses_body is not None
        if responses:
            events = ResponseEvents(response_id=new_response_id(), created_at=created,
                                    model=chat.model, request=prepared.responses_body)
            opening, delta = events.opening, events.text_delta
        else:
            chunks = ChatChunks(chat, created=created, completion_id=cid)
            opening, delta = chunks.opening, chunks.delta
        frames += opening()
        yield from frames
        try:
            assert result.stream is not None
            for piece in result.stream:
                out = delta(piece)
                frames += out
                yield from out
        except Exception as exc:  # noqa: BLE001 - the stream has started: an in-stream error
            status, body = error_body(exc)
            if self.metrics is not None:
                self.metrics.record_error(status, prepared.tenant)
            if on_error is not None:
                on_error(exc)
            yield from (events.error(body["error"]) if responses
                        else [sse(body), "data: [DONE]\n\n"])
            return
        result.stream = None
        finish = finish_reason(result, chat.max_tokens)
        if self.limiter is not None:
            self.limiter.charge(prepared.tenant, usage(result)["total_tokens"])
        if self.metrics is not None:
            self.metrics.record(result, prepared.tenant, time.perf_counter() - started)
        if responses:
            completion = chat_completion(result, chat, created=created, completion_id=cid,
                                         finish=finish)
            out = events.closing(completion)
        else:
            out = chunks.closing(result, finish)
        frames += out
        if on_done is not None:
            on_done(frames)  # before the last frame: a retry after [DONE] finds the record
        yield from out

    def _responses(self, prepared: PreparedChat, result: RouteResult, headers: dict[str, str],
                   kw: dict[str, Any]) -> ApiResponse:
        """The answer in the Responses API's shape: a ``response`` object, or its events."""
        completion = chat_completion(result, prepared.chat, **kw)
        rid, created = new_response_id(), kw["created"]
        request = prepared.responses_body
        if not prepared.chat.stream:
            return ApiResponse(200, JSON, headers, body=response_object(
                completion, response_id=rid, created_at=created, request=request))
        events = ResponseEvents(response_id=rid, created_at=created, model=completion["model"],
                                request=request)
        frames = events.opening()
        for piece in split_for_stream(result.answer):
            frames += events.text_delta(piece)
        return ApiResponse(200, SSE, headers, events=frames + events.closing(completion))

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
        """``GET /v1/models`` (authenticated and rate-limited, as every endpoint is)."""
        try:
            self.admit(authorization)
        except Exception as exc:  # noqa: BLE001 - every failure becomes an error response
            return self.error(exc)
        return ApiResponse(200, JSON, body=models_list([*self.cfg.models,
                                                         *tier_model_names(self.tiers)]))
