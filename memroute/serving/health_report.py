"""The serving core's health report (``/healthz`` and ``/readyz``): what an operator needs to
know, and ``problems``, why the replica is not ready (empty when it is).

A part that cannot report (the fact database down, say) shows up as a problem, never as an
exception: liveness must answer whatever else is broken.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from memroute.journal.flusher import error_text


def health_report(core: Any, *, probe_store: bool = False) -> dict[str, Any]:
    """``core``: a :class:`~memroute.serving.core.ServingCore`; ``probe_store``: also call
    the store now (readiness; liveness does not)."""
    j = core.journal.stats()
    f = core.flusher.stats()
    problems = []
    if not core.flusher.running:
        problems.append("the journal flusher is not running: acknowledged pairs are not stored")
    if f.failing:
        problems.append(f"store writes failing ({f.failing} in a row): {f.last_error}")
    if j.pending > core.cfg.journal.ready_max_pending:
        problems.append(f"journal backlog {j.pending} > journal.ready_max_pending "
                        f"{core.cfg.journal.ready_max_pending}")
    tier_status, tier_problems = core.tier_health.report()
    problems.extend(tier_problems)
    if probe_store and hasattr(core.store, "ping"):
        try:
            core.store.ping()
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            problems.append(f"the store does not answer: {error_text(exc)}")
    report: dict[str, Any] = {
        "status": "ok",
        "problems": problems,
        "tiers": [t.name for t in core.router.tiers],
        "tier_status": tier_status,
        "journal": {"pending": j.pending, "flushed": j.flushed, "failed": j.failed},
        "flusher": {"running": core.flusher.running, "write_errors": f.write_errors,
                    "failing": f.failing, "last_error": f.last_error,
                    "last_error_at": f.last_error_at, "last_success_at": f.last_success_at},
        "uptime_s": round(time.time() - core.started_at, 1),
    }
    if core.fact_store_misses:
        report["fact_store_misses"] = core.fact_store_misses
    bm25 = getattr(getattr(core.retriever, "retriever", core.retriever), "bm25", None)
    if bm25 is not None and hasattr(bm25, "stats"):  # the per-user BM25 indexes in this process
        report["bm25_cache"] = asdict(bm25.stats())
    for name in ("shadow", "extraction", "units"):
        part = getattr(core, name, None)
        if part is None:
            continue
        try:
            report[name] = part.stats()
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            problems.append(f"{name} cannot report: {error_text(exc)}")
    report["status"] = "degraded" if problems else "ok"
    return report
