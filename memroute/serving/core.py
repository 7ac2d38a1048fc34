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
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memroute.accounting.cost import Pricing
from memroute.api.handler import ApiResponse, ChatApi, PreparedChat
from memroute.api.metrics import ApiMetrics, render
from memroute.api.tenancy import ApiKeys
from memroute.config.serve import ServeConfig, check_serve_config, ordered_tiers
from memroute.llm.base import Backend
from memroute.routing.router import Router, Tier
from memroute.types import RouteResult, TurnPair

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

        from memroute.embedding import build_encoder
        from memroute.journal import Flusher, Journal, JournaledRetriever
        from memroute.llm.assets import AssetStore
        from memroute.memory import MilvusMemoryStore
        from memroute.retrieval.retriever import HybridRetriever

        check_serve_config(cfg)
        tiers_cfg = ordered_tiers(cfg)
        if len(backends) != len(tiers_cfg):
            raise ValueError(f"{len(tiers_cfg)} tiers configured but {len(backends)} back ends given")
        self.cfg = cfg
        self.keys = ApiKeys.from_api_config(cfg.api, environ=environ)  # fails early without keys
        self.registry = CollectorRegistry()
        self.api = ChatApi(cfg.api, self.keys, ApiMetrics(self.registry))

        assets = AssetStore(cfg.assets.cache_dir, pip=cfg.assets.pip)
        self.encoder = build_encoder(cfg.embedder, assets)
        self.store = MilvusMemoryStore(cfg.memory, self.encoder.dim)
        self.retriever = HybridRetriever(self.encoder, self.store, cfg.retrieval)
        # Absolute: a Ray replica's working directory is not the one the config was written for.
        self.journal = Journal(Path(cfg.journal.path).expanduser().resolve())
        self._last_store_flush = 0.0
        self._flush_lock = threading.Lock()
        self.flusher = Flusher.from_config(self.journal, self._write_to_store, cfg.journal)
        tiers = [
            Tier(t.model.name, b, Pricing(t.model.params_b, t.model.usd_per_m_input, t.model.usd_per_m_output))
            for t, b in zip(tiers_cfg, backends)
        ]
        self.router = Router(
            tiers, cfg.router, cfg.retrieval, retriever=JournaledRetriever(self.retriever, self.journal)
        )
        self.flusher.start()  # replays whatever a previous process acknowledged but did not flush
        self.started_at = time.time()

    # -- memory writes (flusher thread) ------------------------------------------------------

    def _write_to_store(self, pairs: Sequence[TurnPair]) -> int:
        """Embed + upsert by deterministic id (a replay re-upserts the same rows: exactly once),
        then flush Milvus now and then: searching unflushed Milvus Lite rows is 30-100x slower."""
        written = self.retriever.remember(pairs)
        with self._flush_lock:
            if time.monotonic() - self._last_store_flush >= self.cfg.ingress.store_flush_interval_s:
                self.store.flush()
                self._last_store_flush = time.monotonic()
        return written

    # -- request flow ------------------------------------------------------------------------

    def prepare(self, body: Any, authorization: str | None) -> PreparedChat:
        return self.api.prepare(body, authorization)

    def route_batch(self, prepared: Sequence[PreparedChat]) -> list[RouteResult]:
        """Route requests together (one embedding call, one engine batch per tier)."""
        return self.router.route_many([p.route_request() for p in prepared])

    def respond(self, prepared: PreparedChat, result: RouteResult, *, latency_s: float) -> ApiResponse:
        return self.api.respond(prepared, result, latency_s=latency_s)

    def error(self, exc: BaseException, *, tenant: str | None = None) -> ApiResponse:
        if not getattr(exc, "status", None):
            log.exception("request failed", exc_info=exc)
        return self.api.error(exc, tenant=tenant)

    def models(self, authorization: str | None) -> ApiResponse:
        return self.api.models(authorization)

    # -- operations ----------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        j = self.journal.stats()
        f = self.flusher.stats()
        return {
            "status": "ok" if self.flusher.running else "degraded",
            "tiers": [t.name for t in self.router.tiers],
            "journal": {"pending": j.pending, "flushed": j.flushed, "failed": j.failed},
            "flusher": {"running": self.flusher.running, "write_errors": f.write_errors,
                        "last_error": f.last_error},
            "uptime_s": round(time.time() - self.started_at, 1),
        }

    def metrics(self) -> bytes:
        return render(self.registry)

    def memories(self, user_id: str) -> dict[str, Any]:
        """One namespace's turn-pairs in Milvus, oldest first, and how many still wait in the
        journal (admin endpoint: lets tests check exactly-once writes without opening the
        Milvus Lite file, which only this process may hold)."""
        stored = self.store.list_user(user_id)
        return {
            "count": len(stored),
            "memories": [
                {"id": str(m.id), "text": m.text, "session_time": m.session_time} for m in stored
            ],
            "pending": len(self.journal.pending_for_user(user_id)),
        }

    def drain(self, timeout: float = 30.0) -> bool:
        """Block until every journaled pair is in Milvus (and flushed); tests and shutdown."""
        ok = self.flusher.wait_drained(timeout)
        with self._flush_lock:
            self.store.flush()
        return ok

    def close(self) -> None:
        left = self.flusher.stop(drain=True)
        if left:
            log.warning("%d journaled turn-pairs not yet in the store; they replay on next start", left)
        self.store.close()
        self.journal.close()
