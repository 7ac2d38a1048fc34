"""Atomic context units retrieved beside the turn-pairs, in one ranked list.

A unit (:mod:`memroute.memory.units`) is a self-contained sentence the extraction wrote from a
turn ("On 8 May 2023 Caroline went to an LGBTQ support group."): no pronouns, an absolute
date. It can match a question the raw turn matches badly ("When did Caroline go to the support
group?" against a turn that says "yesterday"). :class:`WithUnits` asks the turn retriever and
the unit index for the same query and merges the two rankings by reciprocal rank fusion (their
scores are on different scales; their ranks are not). What comes back is ``top_k`` hits of
either kind; a unit's :class:`~memroute.types.Memory` keeps its source turn's session and turn
index, so :func:`source_turn_id` names the turn it came from (evidence recall counts a unit as
its turn; the router injects the unit's sentence).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from memroute.errors import InvalidRequest
from memroute.memory.units import UNIT_SOURCE
from memroute.types import Memory, RetrievalHit, stable_id

RRF_K = 60  # the usual reciprocal-rank constant: rank 1 of either list weighs alike


class TurnRetriever(Protocol):
    def retrieve_many(self, user_ids: Sequence[str], queries: Sequence[str], *,
                      top_k: int | None = None, **kw: Any) -> list[list[RetrievalHit]]: ...


class UnitSearch(Protocol):
    def search(self, user_id: str, query: str, top_k: int) -> list[RetrievalHit]: ...


def is_unit(m: Memory) -> bool:
    return m.source_model == UNIT_SOURCE


def source_turn_id(m: Memory) -> int:
    """The turn-pair a memory is or came from (a turn-pair's own id; a unit's source turn)."""
    return stable_id(m.user_id, m.session_id, m.turn_index) if is_unit(m) else m.id


class WithUnits:
    """A retriever: ``turns`` and ``units`` fused by rank; ``unit_k`` units are asked for."""

    def __init__(self, turns: TurnRetriever, units: UnitSearch, *, unit_k: int = 5,
                 unit_weight: float = 1.0, default_top_k: int | None = None) -> None:
        if isinstance(unit_k, bool) or not isinstance(unit_k, int) or unit_k < 1:
            raise InvalidRequest(f"unit_k must be a positive integer, got {unit_k!r}",
                                 field="unit_k")
        if not unit_weight > 0:
            raise InvalidRequest(f"unit_weight must be > 0, got {unit_weight!r}",
                                 field="unit_weight")
        self.turns, self.units = turns, units
        self.unit_k, self.unit_weight = unit_k, float(unit_weight)
        cfg = getattr(turns, "cfg", None)
        self.cfg = cfg  # the router reads the turn retriever's settings through this
        self.default_top_k = default_top_k or getattr(cfg, "top_k", None) or 5

    def __getattr__(self, name: str) -> Any:  # remember(), forget_user(), ... go to the turns
        return getattr(self.__dict__["turns"], name)

    def retrieve(self, user_id: str, query: str, *, top_k: int | None = None) -> list[RetrievalHit]:
        return self.retrieve_many([user_id], [query], top_k=top_k)[0]

    def retrieve_many(self, user_ids: Sequence[str], queries: Sequence[str], *,
                      top_k: int | None = None, **kw: Any) -> list[list[RetrievalHit]]:
        k = self.default_top_k if top_k is None else top_k
        turn_hits = self.turns.retrieve_many(user_ids, queries, top_k=k, **kw)
        return [fuse(hits, self.units.search(uid, q, self.unit_k), k, self.unit_weight)
                for uid, q, hits in zip(user_ids, queries, turn_hits, strict=True)]


def fuse(turns: Sequence[RetrievalHit], units: Sequence[RetrievalHit], k: int,
         unit_weight: float = 1.0) -> list[RetrievalHit]:
    """The top ``k`` of both lists by weighted reciprocal rank (ties: turns first, then the
    better rank); each hit's ``score`` becomes its fused score."""
    scored = [(1.0 / (RRF_K + r), 0, r, h) for r, h in enumerate(turns, 1)]
    scored += [(unit_weight / (RRF_K + r), 1, r, h) for r, h in enumerate(units, 1)]
    scored.sort(key=lambda s: (-s[0], s[1], s[2]))
    return [RetrievalHit(h.memory, s, h.dense_score, h.bm25_score) for s, _, _, h in scored[:k]]


__all__ = ["RRF_K", "WithUnits", "fuse", "is_unit", "source_turn_id"]
