"""The router ingress: OpenAI-compatible HTTP in front of the cascade (FastAPI on Ray Serve).

Thin on purpose: HTTP parsing and framing here, everything else in
:class:`memroute.serving.core.ServingCore`. The ingress also embeds and retrieves (no separate
memory deployment): retrieval is ~10 ms of CPU next to seconds of generation, a separate hop
would add a round trip per request, and with Milvus Lite the store is a file only one process
may open. With a Milvus server the ingress scales out like any stateless replica.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from ray import serve

from memroute.api.handler import IDEMPOTENCY_HEADER, ApiResponse, PreparedChat
from memroute.api.metrics import CONTENT_TYPE
from memroute.api.schema import check_body_size
from memroute.config.schema import ordered_cascade
from memroute.config.serve import ServeConfig
from memroute.errors import InvalidRequest
from memroute.namespace import namespace
from memroute.types import RouteResult

app = FastAPI(title="memroute", docs_url=None, redoc_url=None)


def _http(resp: ApiResponse) -> Response:
    if resp.events is not None:
        async def events() -> Any:
            for event in resp.events or []:
                yield event

        return StreamingResponse(events(), status_code=resp.status, media_type=resp.media_type,
                                 headers=resp.headers)
    return JSONResponse(resp.body, status_code=resp.status, headers=resp.headers)


@serve.deployment
@serve.ingress(app)
class RouterIngress:
    def __init__(self, cfg: ServeConfig, *tier_handles: Any) -> None:
        from memroute.logs import quiet_third_party_logs
        from memroute.serving.core import ServingCore
        from serve.handle_backend import HandleBackend
        from serve.tokenizers import local_tokenizer

        quiet_third_party_logs()
        backends = [
            HandleBackend(h, m.name, local_tokenizer(m, cfg.assets))
            for h, m in zip(tier_handles, ordered_cascade(cfg.cascade))
        ]
        self.cfg = cfg
        self.core = core = ServingCore(cfg, backends)

        async def route_batch(prepared: list[PreparedChat]) -> list[RouteResult]:
            # The Router blocks (engine calls through handles, Milvus): keep it off the event loop.
            return await asyncio.to_thread(core.route_batch, prepared)

        # Built here, not as a decorator: serve.batch has no setter for max_concurrent_batches.
        # Concurrent batches are safe: the journal, the BM25 cache and the store take their locks.
        self.route = serve.batch(
            max_batch_size=cfg.ingress.max_batch_size,
            batch_wait_timeout_s=cfg.ingress.batch_wait_timeout_s,
            max_concurrent_batches=cfg.ingress.max_concurrent_batches,
        )(route_batch)

    @app.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> Response:
        started = time.perf_counter()
        tenant = prepared = None
        try:
            raw = await request.body()
            check_body_size(len(raw), self.cfg.api.limits)
            try:
                body = json.loads(raw)
            except ValueError:
                raise InvalidRequest("the request body is not valid JSON", field="body") from None
            keys = request.headers.getlist(IDEMPOTENCY_HEADER)
            if len(keys) > 1:
                raise InvalidRequest("send one Idempotency-Key header", field=IDEMPOTENCY_HEADER)
            prepared = await asyncio.to_thread(
                self.core.prepare, body, request.headers.get("authorization"),
                keys[0] if keys else None,
            )
            tenant = prepared.tenant
            if prepared.idempotency_key is None:
                resp = await self._answer(prepared, started)
            else:
                # Shielded: a client that disconnects cancels this handler, not the keyed
                # request, whose answer is still recorded for the client's retry.
                resp = await asyncio.shield(asyncio.ensure_future(self._keyed(prepared, started)))
        except Exception as exc:  # noqa: BLE001 - every failure becomes an OpenAI-shaped error
            resp = self.core.error(exc, tenant=tenant, prepared=prepared)
        return _http(resp)

    async def _keyed(self, prepared: PreparedChat, started: float) -> ApiResponse:
        """A replay of the key's first answer (no model work), or route and record it; waits
        (in a thread) while a duplicate with the same key is in progress."""
        try:
            replay = await asyncio.to_thread(self.core.begin, prepared)
        except Exception as exc:  # noqa: BLE001 - 409 / journal errors
            return self.core.error(exc, tenant=prepared.tenant, prepared=prepared)
        return replay if replay is not None else await self._answer(prepared, started)

    async def _answer(self, prepared: PreparedChat, started: float) -> ApiResponse:
        try:
            result = await self.route(prepared)
            latency_s = time.perf_counter() - started
            if prepared.idempotency_key is None:
                return self.core.respond(prepared, result, latency_s=latency_s)
            # Records the answer under the key (a fsync): off the event loop.
            return await asyncio.to_thread(self.core.respond, prepared, result, latency_s=latency_s)
        except Exception as exc:  # noqa: BLE001 - one request's failure is its own
            return self.core.error(exc, tenant=prepared.tenant, prepared=prepared)
        finally:
            self.core.release(prepared)  # a no-op once answered; a cancelled route drops the claim

    @app.get("/v1/models")
    async def models(self, request: Request) -> Response:
        return _http(self.core.models(request.headers.get("authorization")))

    @app.get("/healthz")
    async def healthz(self) -> Response:
        return JSONResponse(await asyncio.to_thread(self.core.health))

    @app.get("/metrics")
    async def metrics(self) -> Response:
        return Response(self.core.metrics(), media_type=CONTENT_TYPE)

    @app.post("/admin/drain")
    async def drain(self, request: Request) -> Response:
        """Wait until every acknowledged turn-pair is in Milvus (tests, orderly shutdown)."""
        try:
            self.core.keys.authenticate(request.headers.get("authorization"))
        except Exception as exc:  # noqa: BLE001
            return _http(self.core.error(exc))
        ok = await asyncio.to_thread(self.core.drain)
        return JSONResponse({"drained": ok}, status_code=200 if ok else 503)

    @app.get("/admin/memories")
    async def memories(self, request: Request) -> Response:
        """Stored turn-pairs of ``?user=`` in the caller's own tenant (the key's): ``?user=alice``
        with an acme key reads acme:alice. POST /admin/drain first to see every acknowledged pair."""
        try:
            tenant = self.core.keys.authenticate(request.headers.get("authorization"))
            user = request.query_params.get("user")
            if not user:
                raise InvalidRequest("the query parameter user is required", field="user")
            user_id = namespace(tenant, user)
        except Exception as exc:  # noqa: BLE001
            return _http(self.core.error(exc))
        body = await asyncio.to_thread(self.core.memories, user_id)
        return JSONResponse({"user": user, **body})

    def __del__(self) -> None:
        core = getattr(self, "core", None)
        if core is not None:
            core.close()
