"""The routed endpoint without the web server: everything the Serve ingress does, as plain Python.

``ServingCore`` owns the memory side (encoder, Milvus store, hybrid retriever, durable journal and
its flusher) and the :class:`~memroute.routing.router.Router` over the cascade's back ends. The
back ends are given: in Ray Serve they are deployment handles wrapped as back ends
(``serve/handle_backend.py``); in tests and benchmarks they can be in-process engines. So the
Router that is benchmarked in-process is the Router that is served.

Request flow (:meth:`ServingCore.prepare` -> :meth:`route_batch` -> :meth:`respond`):
authenticate and validate (4xx before any model work) -> route the batch (retrieve with
read-your-writes, probe, escalate) -> the new turn-pairs are journaled (fsync) inside
``route_batch``, i.e. before any response leaves -> the flusher writes them to Milvus.

With an ``Idempotency-Key`` (:meth:`ServingCore.begin` between prepare and routing): a key
already answered replays its first answer (no model call, no second turn-pair); otherwise the
request claims it, and :meth:`respond` records the answer (fsync'd, after the turn-pair's journal
commit, before the response leaves); a failure drops the claim so a retry runs again. A keyed
request's turn-pair id derives from the key, so even a retry that runs again (the answer was
not recorded: a crash in between) replaces its pair instead of adding one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from memroute import build
from memroute.api.handler import IDEMPOTENCY_HEADER, ApiResponse, ChatApi, PreparedChat
from memroute.api.metrics import ApiMetrics, render
from memroute.api.tenancy import ApiKeys
from memroute.config.schema import is_server_uri, ordered_cascade
from memroute.config.serve import ServeConfig, check_serve_config, served_facts_config
from memroute.journal.flusher import error_text
from memroute.journal.idempotency import (
    Conflict,
    Existing,
    IdempotencyConflict,
    InProgress,
    Started,
)
from memroute.llm.base import Backend
from memroute.memory.facts.extraction import Extractor
from memroute.routing.router import RouteRequest
from memroute.serving.erasure import (
    ErasureReport,
    erase_tenant,
    erase_user,
    erasure_audit,
    store_remover,
)
from memroute.memory.facts.lane import ExtractionLane
from memroute.serving.health_report import health_report
from memroute.serving.memory_api import MemoryApi
from memroute.serving.shadow import ShadowJudge
from memroute.serving.tier_health import TierHealth
from memroute.types import RouteResult, TurnPair, stable_id

log = logging.getLogger(__name__)


class ServingCore:
    def __init__(
        self,
        cfg: ServeConfig,
        backends: Sequence[Backend],
        *,
        environ: dict[str, str] | None = None,
    ) -> None:
        from prometheus_client import CollectorRegistry

        from memroute.journal import Flusher, JournaledRetriever

        check_serve_config(cfg)
        models = ordered_cascade(cfg.cascade)
        if len(backends) != len(models):
            raise ValueError(f"{len(models)} tiers configured but {len(backends)} back ends given")
        self.cfg = cfg
        self.keys = ApiKeys.from_api_config(cfg.api, environ=environ)  # fails early without keys
        self.registry = CollectorRegistry()
        metrics = ApiMetrics(self.registry, tenant_labels=cfg.api.metrics_tenant_labels)
        self.api = ChatApi(cfg.api, self.keys, metrics,
                           tiers=[m.name for m in ordered_cascade(cfg.cascade)])

        mem = build.memory(cfg.embedder, cfg.memory, cfg.retrieval, build.asset_store(cfg.assets),
                           units=cfg.units)
        self.encoder, self.store, self.retriever = mem.encoder, mem.store, mem.retriever
        self.units = mem.units  # None: units off
        self.journal = build.journal(cfg.journal)
        self.facts = build.facts(served_facts_config(cfg))
        self.idempotency = build.idempotency(cfg.journal)  # in the journal's database
        self._claims: dict[int, Started] = {}  # id(PreparedChat) -> its claim, until answered
        self._claims_lock = threading.Lock()
        self._last_store_flush = 0.0
        self._flush_every_write = not is_server_uri(cfg.memory.uri)  # Milvus Lite: see _write_to_store
        self._flush_lock = threading.Lock()
        self.fact_store_misses = 0  # stored pairs the fact store could not note (see below)
        # on_erased: a batch written while another process erased its user is deleted again
        self.flusher = Flusher.from_config(self.journal, self._write_to_store, cfg.journal,
                                           on_erased=store_remover(self.store, self.retriever),
                                           probe_fn=getattr(self.store, "ping", None))
        # read-your-writes over the journal; its pending-pair vectors are erased with the user
        self.journaled = JournaledRetriever(self.retriever, self.journal, visible_after_s=(
            cfg.journal.visible_after_s if is_server_uri(cfg.memory.uri) else 0.0),
            writer=self.flusher.owner)
        self.router = build.router(
            build.tiers(models, None, backends=backends), cfg.router, cfg.retrieval,
            self.journaled, facts=self.facts if cfg.facts.inject else None,
        )
        self.memory_api = MemoryApi(cfg, facts=self.facts, journal=self.journal, store=self.store,
                                    turns=self.router.retriever, units=self.units,
                                    corpus=build.turn_corpus(self.retriever, self.store))
        self.search = self.memory_api.search = build.memory_search(
            cfg.search, self.facts, self.router.retriever, cfg.retrieval, enc=self.encoder,
            units=self.units, raw_turns=self.memory_api.fallback_turns)
        self.shadow = self._shadow_judge(cfg)
        self.extraction = self._extraction_lane(cfg)
        self.tier_health = TierHealth([t.name for t in self.router.tiers])
        self.flusher.start()  # replays whatever a previous process acknowledged but did not flush
        if self.extraction is not None:
            self.extraction.recover()  # users a previous process left past the threshold
        self.started_at = time.time()

    def _shadow_judge(self, cfg: ServeConfig) -> ShadowJudge | None:
        tiers = self.router.tiers
        if cfg.shadow.share <= 0 or len(tiers) < 2:
            return None
        return ShadowJudge(cfg.shadow, tiers[-1], len(tiers) - 1, system_prompt=cfg.router.system_prompt,
                           max_tokens=cfg.router.max_tokens, registry=self.registry)

    def _extraction_lane(self, cfg: ServeConfig) -> ExtractionLane | None:
        """Facts and atomic context units from conversation, by ``extraction.tier``, off the
        request path."""
        if not cfg.extraction.enabled:
            return None
        backend = self.router.tiers[cfg.extraction.tier].backend
        extractor = Extractor.from_config(backend, self.facts, cfg.extraction,
                                          unit_sink=self.units, encoder=self.encoder)
        return ExtractionLane(extractor, queue=self.facts.queue,
                              threshold_tokens=cfg.extraction.threshold_tokens,
                              count_text_tokens=backend.count_text_tokens)

    # -- memory writes (flusher thread) ------------------------------------------------------

    def _write_to_store(self, pairs: Sequence[TurnPair]) -> int:
        """Embed + upsert by deterministic id (a replay re-upserts the same rows: exactly once),
        then flush. Milvus Lite: every time, before the journal lets the pairs go, because Lite
        keeps upserts in a memtable that a failed flush drops (and the next good flush removes
        their WAL): an acknowledged pair would be lost (~10 ms per batch, searches unchanged).
        A server has its own WAL; it is flushed now and then (searching unflushed rows is slow)."""
        written = self.retriever.remember(pairs)
        self._note_in_fact_store(pairs)
        with self._flush_lock:
            since = time.monotonic() - self._last_store_flush
            if self._flush_every_write or since >= self.cfg.ingress.store_flush_interval_s:
                self.store.flush()
                self._last_store_flush = time.monotonic()
        return written

    def _note_in_fact_store(self, pairs: Sequence[TurnPair]) -> None:
        """Session start's recent turns and the extraction queue (counted now, extracted on the
        lane's own thread). Best effort: the pairs are stored already, and a fact database
        that is down must not hold up memory writes (a missed pair is logged)."""
        keep = self.cfg.facts.recent_turns
        try:
            if self.extraction is not None:  # queued and recorded in one transaction
                self.extraction.observe(pairs, recent_keep=keep)
            else:
                self.facts.record_turns(list(pairs), keep=keep)
        except Exception:  # noqa: BLE001
            self.fact_store_misses += len(pairs)
            log.exception("the fact store could not note %d stored turn-pairs", len(pairs))

    # -- request flow ------------------------------------------------------------------------

    def admit(self, authorization: str | None) -> str:
        return self.api.admit(authorization)

    def prepare(
        self, body: Any, authorization: str | None, idempotency_key: str | None = None,
        *, tenant: str | None = None, headers: Mapping[str, str] | None = None,
    ) -> PreparedChat:
        return self.api.prepare(body, authorization, idempotency_key, tenant=tenant,
                                headers=headers)

    def prepare_responses(
        self, body: Any, authorization: str | None, idempotency_key: str | None = None,
        *, tenant: str | None = None, headers: Mapping[str, str] | None = None,
    ) -> PreparedChat:
        """``POST /v1/responses``: the same request flow, answered in the Responses shape."""
        return self.api.prepare_responses(body, authorization, idempotency_key, tenant=tenant,
                                          headers=headers)

    def begin(self, prepared: PreparedChat) -> ApiResponse | None:
        """The first answer again when the request's key has one (a replay); None when there
        is no key or this request now holds it: route it, then :meth:`respond` (or
        :meth:`error` / :meth:`release`, which drop the claim). Blocks up to
        ``journal.idempotency_wait_s`` while a duplicate is in progress; 409 after that, or
        when the key was used with a different body."""
        key = prepared.idempotency_key
        if key is None:
            return None
        outcome = self.idempotency.begin(
            prepared.tenant, key, prepared.body_hash or "",
            wait_s=self.cfg.journal.idempotency_wait_s, user_id=prepared.user_id,
        )
        if isinstance(outcome, Existing):
            return self.api.replay(outcome.response, prepared.tenant)
        if isinstance(outcome, Conflict):
            raise IdempotencyConflict(
                "Idempotency-Key: the key was used with a different request",
                field=IDEMPOTENCY_HEADER,
            )
        if isinstance(outcome, InProgress):
            raise IdempotencyConflict(
                "Idempotency-Key: a request with this key is still in progress; retry later",
                field=IDEMPOTENCY_HEADER,
            )
        with self._claims_lock:
            self._claims[id(prepared)] = outcome
        return None

    def route_batch(self, prepared: Sequence[PreparedChat]) -> list[RouteResult | Exception]:
        """Route requests together (one embedding call, one engine batch per tier). One result
        per request: its answer, or the exception that failed it alone (``Router.route_each``:
        another tenant's bad request in the same batch never fails this one)."""
        requests = [route_request(p) for p in prepared]
        results = self.router.route_each(requests)
        self.tier_health.observe(results)
        if self.shadow is not None:  # judged in a background thread: the answers do not wait
            ok = [(q, r) for q, r in zip(requests, results)
                  if isinstance(r, RouteResult) and r.stream is None]
            if ok:
                self.shadow.offer([q for q, _ in ok], [r for _, r in ok])
        return results

    def respond(self, prepared: PreparedChat, result: RouteResult, *, latency_s: float) -> ApiResponse:
        """The response; a claimed key records it first (a fsync), so a retry finds it."""
        resp = self.api.respond(prepared, result, latency_s=latency_s)
        claim = self._take_claim(prepared)
        if claim is not None:
            try:
                self.idempotency.complete(claim, resp.to_json())
            except Exception:  # the answer stands; a retry would run again
                log.exception("could not record the answer of an idempotency key")
                self._forget(claim)
        return resp

    def respond_live(self, prepared: PreparedChat, result: RouteResult, *, started: float) -> ApiResponse:
        """A live stream (``result.stream``: the answering tier still generating). A claimed
        key is taken now and recorded once the stream completed (or dropped if it fails or the
        client leaves), so :meth:`release` no longer drops it under the running stream."""
        claim = self._take_claim(prepared)

        def done(frames: list[str]) -> None:
            if claim is None:
                return
            resp = ApiResponse(200, "text/event-stream", {}, events=frames)
            try:
                self.idempotency.complete(claim, resp.to_json())
            except Exception:  # the answer stands; a retry would run again
                log.exception("could not record the answer of an idempotency key")
                self._forget(claim)

        def failed(exc: BaseException) -> None:
            if not getattr(exc, "status", None):
                log.error("a streamed answer failed: %s", error_text(exc))
            if claim is not None:
                self._forget(claim)

        return self.api.respond_live(prepared, result, started=started, on_done=done,
                                     on_error=failed)

    def error(
        self, exc: BaseException, *, tenant: str | None = None, prepared: PreparedChat | None = None
    ) -> ApiResponse:
        """The error response; a claim ``prepared`` holds is dropped (never cache a failure)."""
        if prepared is not None:
            self.release(prepared)
        if not getattr(exc, "status", None):
            log.exception("request failed", exc_info=exc)
        return self.api.error(exc, tenant=tenant)

    def release(self, prepared: PreparedChat) -> None:
        """Drop the request's claim unless answered (a failure, a cancellation); idempotent."""
        claim = self._take_claim(prepared)
        if claim is not None:
            self._forget(claim)

    def _take_claim(self, prepared: PreparedChat) -> Started | None:
        with self._claims_lock:
            return self._claims.pop(id(prepared), None)

    def _forget(self, claim: Started) -> None:
        try:
            self.idempotency.forget(claim)
        except Exception:  # the claim then expires with its lease
            log.exception("could not drop the claim of an idempotency key")

    def models(self, authorization: str | None) -> ApiResponse:
        return self.api.models(authorization)

    # -- operations ----------------------------------------------------------------------------

    def health(self, *, probe_store: bool = False) -> dict[str, Any]:
        """What an operator needs to know, and ``problems``: why it is not ready (empty when
        it is); ``probe_store``: also call the store now (readiness). See health_report."""
        return health_report(self, probe_store=probe_store)

    def metrics(self) -> bytes:
        return render(self.registry)

    # -- the memory endpoints: memroute/serving/memory_api.py (the ingress calls it directly) --

    def session_start(self, user_id: str) -> bytes:
        return self.memory_api.session_start(user_id)  # the JSON body, encoded

    def append_turns(self, user_id: str, body: Any) -> dict[str, Any]:
        return self.memory_api.append_turns(user_id, body)

    def turn_timeline(self, user_id: str) -> dict[str, Any]:
        return self.memory_api.turn_timeline(user_id)

    def list_facts(self, user_id: str, key: str | None = None) -> dict[str, Any]:
        return self.memory_api.list_facts(user_id, key)

    def assert_fact(self, user_id: str, body: Any) -> dict[str, Any]:
        return self.memory_api.assert_fact(user_id, body)

    def retract_fact(self, user_id: str, fact_id: Any) -> dict[str, Any]:
        return self.memory_api.retract_fact(user_id, fact_id)

    # -- erasure (GDPR Art. 17): memroute/serving/erasure.py --------------------------------

    def erase_user(self, user_id: str, *, actor: str) -> ErasureReport:
        """Every copy of one namespace's turn-pairs: journal, stored answers, Milvus, caches."""
        # Not under _flush_lock: the flusher takes it inside the journal's store gate, which
        # the erasure holds; the other order here would deadlock.
        return erase_user(self.store, self.journal, self.idempotency, self.retriever, user_id,
                          actor=actor, caches=self._erasable_caches(), facts=self.facts,
                          units=self.units)

    def erase_tenant(self, tenant: str, *, actor: str) -> ErasureReport:
        return erase_tenant(self.store, self.journal, self.idempotency, self.retriever, tenant,
                            actor=actor, caches=self._erasable_caches(), facts=self.facts,
                            units=self.units)

    def erasure_audit(self, limit: int = 100) -> list[dict[str, Any]]:
        return erasure_audit(self.journal, limit=limit)

    def _erasable_caches(self) -> list[Any]:
        """Per-user caches beside the retriever's BM25 (the read-your-writes vectors, the memory
        search's fact vectors); the extraction queue is in the fact store, erased with it."""
        return [self.journaled, self.search]

    def drain(self, timeout: float = 30.0) -> bool:
        """Block until every journaled pair is in Milvus (and flushed); tests and shutdown."""
        ok = self.flusher.wait_drained(timeout)
        with self._flush_lock:
            self.store.flush()
        return ok

    def close(self) -> None:
        if self.shadow is not None:
            self.shadow.close()
        left = self.flusher.stop(drain=True)
        if self.extraction is not None:
            self.extraction.close(wait=False)
        if left:
            log.warning("%d journaled turn-pairs not yet in the store; they replay on next start", left)
        self.store.close()
        if self.units is not None:
            self.units.close()
        self.facts.close()
        self.idempotency.close()
        self.journal.close()


def route_request(prepared: PreparedChat) -> RouteRequest:
    """The API's plain values as the Router's request (the API layer knows nothing of routing):
    the namespace, the last user turn, the client's system prompt(s) joined, its earlier turns
    as history, what followed the question (tool calls and results), and its generation
    settings. A keyed request's turn index (so its pair id) comes from the key."""
    key = prepared.idempotency_key
    turn = stable_id(IDEMPOTENCY_HEADER, key) if key is not None else None
    chat, controls, gen = prepared.chat, prepared.chat.controls, prepared.chat.generation
    systems = [m.content for m in chat.messages if m.role == "system"]
    turns = [m for m in chat.messages if m.role != "system"]
    asked = max(i for i, m in enumerate(turns) if m.role == "user")
    return RouteRequest(
        user_id=prepared.user_id, query=turns[asked].content, turn_index=turn,
        system="\n\n".join(systems) if systems else None,
        history=tuple(turns[:asked]), tail=tuple(turns[asked + 1:]),
        store=controls.store, use_memory=controls.use_memory, tier=controls.tier, tau=controls.tau,
        stream=chat.stream, max_tokens=gen.max_tokens, temperature=gen.temperature, stop=gen.stop,
        options=gen.options(),
    )
