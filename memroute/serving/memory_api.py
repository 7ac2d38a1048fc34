"""The memory endpoints (``/v1/memory/*``) as plain Python: session start, facts and their
timeline, appended turns, memory search, and the admin view of stored turn-pairs.

The caller (:class:`~memroute.serving.core.ServingCore`, for the Serve ingress) has resolved
the namespaced user from the API key's tenant, as for chat; bodies are checked here into the
stores' inputs (:mod:`memroute.serving.fact_requests`: a 400 naming the field).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from memroute.config.serve import ServeConfig
from memroute.memory.facts.session import RenderCache, fact_json, session_start
from memroute.memory.search import MemorySearch
from memroute.memory.supersession import marks_for
from memroute.serving.fact_requests import fact_input, search_request, turn_pairs
from memroute.types import Memory, memory_of


class MemoryApi:
    def __init__(
        self,
        cfg: ServeConfig,
        *,
        facts: Any,
        journal: Any,
        store: Any,
        turns: Any,
        units: Any = None,
        corpus: Callable[[str], Sequence[Memory]] | None = None,
    ) -> None:
        """``turns``: the Router's retriever (journals appended pairs; retrieval reads the
        journal too); ``units``: the unit index or None (units off); ``corpus``: the user's
        stored turn-pairs as the search fallback scans them (``build.turn_corpus``: the
        retriever's in-process BM25 corpus, no store round trip; default: the store's rows)."""
        self.cfg = cfg
        self.facts, self.journal, self.store = facts, journal, store
        self.turns, self.units = turns, units
        self.corpus = corpus or store.list_user
        self.search: MemorySearch | None = None  # set by the core (build.memory_search)
        self._renders = RenderCache(cfg.facts.cache_users)

    # -- turn-pairs as stored, with what the journal still holds -----------------------------

    def fallback_turns(self, user_id: str) -> list[Memory]:
        """What the search's keyword fallback scans: the corpus and the journal's pending pairs."""
        rows = {m.id: m for m in self.corpus(user_id)}
        rows.update((e.pair.id, memory_of(e.pair)) for e in self.journal.pending_for_user(user_id))
        return list(rows.values())

    def session_start(self, user_id: str) -> bytes:
        """Profile, active facts, recent turns, the context block and the memory-search tool,
        as the JSON body: one transaction on the fact store (the user's version token, the
        newest turns, the active facts unless cached) and the journal's pending pairs; no
        embedding, no vector search (memroute.memory.facts.session)."""
        n = self.cfg.facts.recent_turns
        pending = ([memory_of(e.pair) for e in self.journal.pending_for_user(user_id, limit=n)]
                   if n > 0 else [])
        return session_start(self.facts, user_id, recent=n, pending=pending,
                             cache=self._renders).to_json_bytes()

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

    def turn_timeline(self, user_id: str) -> dict[str, Any]:
        """Every turn-pair of the user, stored and pending, oldest first, with what superseded
        what (``superseded_by``, ``valid_until``: 0 while current). Pending change statements
        are applied as the flusher will apply them (``retrieval.supersede``)."""
        stored = self.store.list_user(user_id)
        pending = [e.pair for e in self.journal.pending_for_user(user_id)]
        rows = {m.id: m for m in stored}
        rows.update((p.id, memory_of(p)) for p in pending)
        similar = getattr(self.turns, "similar", None)  # rule 5, as the flusher will apply it
        marks = marks_for(pending, rows.values(), similar) if self.cfg.retrieval.supersede else {}
        pending_ids = {p.id for p in pending}
        out = []
        for m in sorted(rows.values(), key=lambda m: (m.session_time, m.created_at, m.turn_index)):
            by, until = marks.get(m.id, (m.superseded_by, m.valid_until))
            out.append({"id": str(m.id), "text": m.text, "session_time": m.session_time,
                        "status": "superseded" if by else "current",
                        "superseded_by": str(by) if by else None,
                        "valid_until": until or None, "pending": m.id in pending_ids})
        return {"object": "list", "data": out}

    def append_turns(self, user_id: str, body: Any) -> dict[str, Any]:
        """Turn-pairs an agent answered elsewhere: acknowledged once journaled (fsync); the
        flusher embeds and stores them as it does the routed answers' pairs."""
        pairs = turn_pairs(body, user_id, max_chars=self.cfg.api.limits.max_input_chars)
        journaled = self.turns.remember(pairs)
        return {"object": "memory.turns", "journaled": journaled,
                "ids": [str(p.id) for p in pairs]}

    # -- facts --------------------------------------------------------------------------------

    def list_facts(self, user_id: str, key: str | None = None) -> dict[str, Any]:
        """The user's active facts; with ``key``, that key's whole timeline (every status)."""
        rows = self.facts.timeline(user_id, key) if key else self.facts.active(user_id)
        return {"object": "list", "data": [fact_json(f) for f in rows]}

    def assert_fact(self, user_id: str, body: Any) -> dict[str, Any]:
        """A fact the client states (``source`` explicit unless it says otherwise); the key's
        previous value is superseded, never deleted."""
        return fact_json(self.facts.assert_fact(user_id, fact_input(body)))

    def retract_fact(self, user_id: str, fact_id: Any) -> dict[str, Any]:
        return fact_json(self.facts.retract(user_id, fact_id))

    # -- search -------------------------------------------------------------------------------

    def search_memory(self, user_id: str, body: Any) -> dict[str, Any]:
        """``{"query", "top_k"?}``: facts, units and turn-pairs in one ranking, a confidence,
        and the keyword fallback's hits below every real match (memroute.memory.search)."""
        if self.search is None:
            raise RuntimeError("memory search is not wired (MemoryApi.search)")
        query, top_k = search_request(body, max_chars=self.cfg.search.max_query_chars)
        return self.search.search(user_id, query, top_k).to_json()
