"""The router ingress: OpenAI-compatible HTTP in front of the cascade (FastAPI on Ray Serve).

Thin on purpose: HTTP parsing and framing here, everything else in
:class:`memroute.serving.core.ServingCore`. The ingress also embeds and retrieves (no separate
memory deployment): retrieval is ~10 ms of CPU next to seconds of generation, a separate hop
would add a round trip per request, and with Milvus Lite the store is a file only one process
may open. With a Milvus server the ingress scales out like any stateless replica.
"""

from __future__ import annotations

import asyncio
import functools
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from ray import serve
from starlette.exceptions import HTTPException as StarletteHTTPException

from memroute.api.body import BodyLimit, check_media_type, decode_json
from memroute.api.handler import IDEMPOTENCY_HEADER, ApiResponse, PreparedChat
from memroute.api.metrics import CONTENT_TYPE
from memroute.api.responses import error_body, error_object
from memroute.config.schema import ordered_cascade
from memroute.config.serve import ServeConfig
from memroute.errors import InvalidRequest, MethodNotAllowed, NotFound
from memroute.serving.fact_requests import fact_id
from memroute.types import RouteResult

# The schema is an operator surface: served behind the admin key below, not by FastAPI openly.
# redirect_slashes off: "/v1/models/" is an OpenAI 404, not a 307 whose Location echoes the Host header
app = FastAPI(title="memroute", docs_url=None, redoc_url=None, openapi_url=None, redirect_slashes=False)


@app.exception_handler(StarletteHTTPException)
async def _routing_error(request: Request, exc: StarletteHTTPException) -> Response:
    """Unknown routes and wrong methods in OpenAI's error shape, not FastAPI's ``{"detail"}``."""
    where = f"{request.method} {request.url.path}"
    if exc.status_code in (404, 405):
        err = (NotFound(f"no such endpoint: {where}", field="path") if exc.status_code == 404
               else MethodNotAllowed(f"{where} is not allowed", field="method"))
        status, body = error_body(err)
    else:
        status = exc.status_code
        body = error_object(status, str(exc.detail))
    return JSONResponse(body, status_code=status, headers=getattr(exc, "headers", None))


@app.exception_handler(Exception)
async def _unexpected(request: Request, exc: Exception) -> Response:
    status, body = error_body(exc)  # a fixed 500 message; the details stay in the log
    return JSONResponse(body, status_code=status)


def _http(resp: ApiResponse) -> Response:
    if resp.events is None:
        return JSONResponse(resp.body, status_code=resp.status, headers=resp.headers)
    frames = iter(resp.events)
    if resp.live:  # pulled from a worker thread: the answering tier generates as it is read
        async def events() -> Any:
            while (frame := await asyncio.to_thread(next, frames, None)) is not None:
                yield frame
    else:
        async def events() -> Any:
            for frame in frames:
                yield frame

    return StreamingResponse(events(), status_code=resp.status, media_type=resp.media_type,
                             headers=resp.headers)


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
            HandleBackend(h, m.name, local_tokenizer(m, cfg.assets),
                          timeout_s=cfg.ingress.tier_timeout_s)
            for h, m in zip(tier_handles, ordered_cascade(cfg.cascade))
        ]
        self.cfg = cfg
        self.core = core = ServingCore(cfg, backends)
        # Health checks on threads of their own, never queued behind requests.
        self._liveness = ThreadPoolExecutor(1, thread_name_prefix="liveness")
        self._readiness = ThreadPoolExecutor(1, thread_name_prefix="readiness")

        async def route_batch(prepared: list[PreparedChat]) -> list[RouteResult | Exception]:
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
        return await self._handle(request, self.core.prepare)

    @app.post("/v1/responses")
    async def responses(self, request: Request) -> Response:
        """OpenAI's Responses API: the same routing, answered as a ``response`` (or its events)."""
        return await self._handle(request, self.core.prepare_responses)

    async def _handle(self, request: Request, prepare: Any) -> Response:
        started = time.perf_counter()
        tenant = prepared = None
        try:
            authorization = request.headers.get("authorization")
            # The key and the tenant's rate limits before a byte of the body is read: an
            # unauthenticated or throttled caller learns nothing and costs no buffering.
            tenant = self.core.admit(authorization)
            body = await self._json_body(request)
            keys = request.headers.getlist(IDEMPOTENCY_HEADER)
            if len(keys) > 1:
                raise InvalidRequest("send one Idempotency-Key header", field=IDEMPOTENCY_HEADER)
            prepared = await asyncio.to_thread(
                prepare, body, authorization, keys[0] if keys else None, tenant=tenant,
                headers=request.headers,
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

    async def _json_body(self, request: Request) -> object:
        """Media type, size while streaming in (413 once past the limit), depth, JSON."""
        limits = self.cfg.api.limits
        check_media_type(request.headers.get("content-type"))
        body = BodyLimit(limits, request.headers.get("content-length"))
        async for chunk in request.stream():
            body.feed(chunk)
        return decode_json(body.body(), limits)

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
            if isinstance(result, BaseException):  # this member alone failed in its batch
                raise result
            if result.stream is not None:  # the answering tier streams as the client reads
                return self.core.respond_live(prepared, result, started=started)
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

    @app.delete("/v1/memory/users/{user}")
    async def erase_user(self, user: str, request: Request) -> Response:
        """Forget one user of the caller's tenant (GDPR Art. 17): turn-pairs in Milvus, the
        journal, stored answers and caches; audited (who, when, counts); idempotent."""
        try:
            tenant = self.core.admit(request.headers.get("authorization"))
            user_id = self.core.api.namespace_of(tenant, user)
            report = await asyncio.to_thread(self.core.erase_user, user_id, actor=f"tenant:{tenant}")
        except Exception as exc:  # noqa: BLE001
            return _http(self.core.error(exc))
        return JSONResponse({"object": "memory.erasure", "user": user, **report.to_json()})

    # -- the fact layer: the caller's tenant, ?user= (or the body's "user") names the user -----

    async def _memory_call(self, request: Request, call: Any, *args: Any,
                           read_body: bool = False, parse: Any = None) -> Response:
        """Admit (the key, then the tenant's rate limits) before anything else: the body is
        read, and the path parsed, only for a caller who may send them. ``read_body``: the
        JSON body is ``call``'s first argument and its ``"user"`` names the user (else
        ``?user=``); ``parse``: turns the path's parameters into ``call``'s arguments."""
        try:
            tenant = self.core.admit(request.headers.get("authorization"))
            if parse is not None:
                args = (*parse(), *args)
            user = None
            if read_body:
                body = await self._json_body(request)
                named = body.get("user") if isinstance(body, dict) else None
                user = named if isinstance(named, str) else None
                args = (body, *args)
            user_id = self.core.api.namespace_of(tenant, user or request.query_params.get("user"))
            out = await asyncio.to_thread(call, user_id, *args)
        except Exception as exc:  # noqa: BLE001
            return _http(self.core.error(exc))
        if isinstance(out, bytes):  # encoded already (session start: memory_api)
            return Response(out, media_type="application/json")
        return JSONResponse(out)

    @app.get("/v1/memory/session-start")
    async def session_start(self, request: Request) -> Response:
        """Profile, active facts, recent turns, a context block and the memory-search tool."""
        return await self._memory_call(request, self.core.session_start)

    @app.get("/v1/memory/facts")
    async def list_facts(self, request: Request) -> Response:
        """Active facts; ``?key=`` gives that key's whole timeline (superseded, retracted)."""
        return await self._memory_call(request, self.core.list_facts,
                                       request.query_params.get("key"))

    @app.post("/v1/memory/facts")
    async def assert_fact(self, request: Request) -> Response:
        """State a fact (``{"user", "key", "value", ...}``): the key's old value is superseded."""
        return await self._memory_call(request, self.core.assert_fact, read_body=True)

    @app.get("/v1/memory/turns")
    async def turn_timeline(self, request: Request) -> Response:
        """The user's turn-pairs, oldest first, each current or superseded (and by which)."""
        return await self._memory_call(request, self.core.turn_timeline)

    @app.post("/v1/memory/turns")
    async def append_turns(self, request: Request) -> Response:
        """Remember turn-pairs answered elsewhere (``{"user", "turns": [{user, assistant}]}``):
        acknowledged after the journal's fsync; embedded and stored in the background."""
        return await self._memory_call(request, self.core.append_turns, read_body=True)

    @app.post("/v1/memory/search")
    async def search_memory(self, request: Request) -> Response:
        """Search the user's facts, atomic units and turn-pairs (``{"user", "query", "top_k"}``):
        one ranking with a confidence; below ``search.fallback_below`` a keyword fallback over
        the raw turns, scored below every real match."""
        return await self._memory_call(request, self.core.memory_api.search_memory,
                                       read_body=True)

    @app.post("/v1/memory/facts/{fact}/retract")
    async def retract_fact(self, fact: str, request: Request) -> Response:
        """Retract one fact (kept, status ``retracted``) of ``?user=``."""
        return await self._memory_call(request, self.core.retract_fact,
                                       parse=lambda: (fact_id(fact),))

    @app.get("/healthz")
    async def healthz(self) -> Response:
        """Liveness: 200 while this replica runs; the body says what is degraded. A thread of
        its own: requests stuck on a hung store (the shared pool) never make it look dead."""
        loop = asyncio.get_running_loop()
        return JSONResponse(await loop.run_in_executor(self._liveness, self.core.health))

    @app.get("/readyz")
    async def readyz(self) -> Response:
        """Readiness: 503 while the store does not answer, writes fail, the flusher is down or
        the journal backlog is over its bound; ``problems`` says which, with the real error."""
        loop = asyncio.get_running_loop()
        health = await loop.run_in_executor(
            self._readiness, functools.partial(self.core.health, probe_store=True))
        return JSONResponse(health, status_code=503 if health["problems"] else 200)

    # -- operator endpoints: the admin key (api.admin_keys), never a tenant's ----------------

    def _admin(self, request: Request) -> Response | None:
        """None for an admin key, else the 401/403 response."""
        try:
            self.core.keys.authenticate_admin(request.headers.get("authorization"))
        except Exception as exc:  # noqa: BLE001
            return _http(self.core.error(exc))
        return None

    @app.get("/metrics")
    async def metrics(self, request: Request) -> Response:
        if (refused := self._admin(request)) is not None:
            return refused
        return Response(self.core.metrics(), media_type=CONTENT_TYPE)

    @app.get("/openapi.json")
    async def openapi(self, request: Request) -> Response:
        if (refused := self._admin(request)) is not None:
            return refused
        return JSONResponse(app.openapi())

    @app.post("/admin/drain")
    async def drain(self, request: Request) -> Response:
        """Wait until every acknowledged turn-pair is in Milvus (tests, orderly shutdown)."""
        if (refused := self._admin(request)) is not None:
            return refused
        ok = await asyncio.to_thread(self.core.drain)
        return JSONResponse({"drained": ok}, status_code=200 if ok else 503)

    @app.delete("/admin/tenants/{tenant}/memory")
    async def erase_tenant(self, tenant: str, request: Request) -> Response:
        """Forget a whole tenant (its every user), as :meth:`erase_user` does for one."""
        if (refused := self._admin(request)) is not None:
            return refused
        try:
            report = await asyncio.to_thread(self.core.erase_tenant, tenant, actor="admin")
        except Exception as exc:  # noqa: BLE001
            return _http(self.core.error(exc))
        return JSONResponse({"object": "memory.erasure", **report.to_json()})

    @app.get("/admin/erasures")
    async def erasures(self, request: Request) -> Response:
        """The erasure audit log, newest first: who, when, how many rows; never the content."""
        if (refused := self._admin(request)) is not None:
            return refused
        return JSONResponse({"data": await asyncio.to_thread(self.core.erasure_audit)})

    @app.get("/admin/memories")
    async def memories(self, request: Request) -> Response:
        """Stored turn-pairs of ``?tenant=&user=``. POST /admin/drain first to see every
        acknowledged pair."""
        if (refused := self._admin(request)) is not None:
            return refused
        q = request.query_params
        try:
            user_id = self.core.api.namespace_of(q.get("tenant"), q.get("user"))
        except Exception as exc:  # noqa: BLE001
            return _http(self.core.error(exc))
        body = await asyncio.to_thread(self.core.memory_api.memories, user_id)
        return JSONResponse({"tenant": q.get("tenant"), "user": q.get("user"), **body})

    def __del__(self) -> None:
        core = getattr(self, "core", None)
        if core is not None:
            core.close()
