"""Fault isolation for batched steps: one member's failure fails only that member.

The Router runs each step of a batch (retrieval, one tier's ``generate_many``, the memory write)
as one call for speed. :class:`Steps` runs such a step either *strictly* (an exception propagates:
:meth:`Router.route_many`) or *isolated* (:meth:`Router.route_each`): the batched call is tried
first, and only when it raises is the batch split in halves and each half retried, recursively,
until the failing members are alone. A failing member's result is its own exception (from the
call that held it alone); every other member gets its value.

Cost: nothing extra while a batch succeeds (one call, as before). With ``k`` failing members in a
batch of ``n`` the bisection makes at most ``2 * k * log2(n)`` further calls, each batched (one
poisoned request among 32: ~10 calls of 16, 8, 4, 2, 1 members, instead of 32 calls of one); when
every member fails (an engine that is down) it makes ``2n - 1`` calls. Retried steps must be safe
to repeat: retrieval and generation have no side effects, and the memory write upserts by turn-pair
id (the journal skips a pair id it already holds with the same content), so a member written by a
failed batch call is not stored twice.

A :class:`~memroute.errors.BackendUnavailable` (an engine that is down or timed out) is nobody's
input: every member gets it at once, without the bisection's ``2n - 1`` calls to a dead tier.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

from memroute.errors import BackendUnavailable

log = logging.getLogger(__name__)

M = TypeVar("M")
R = TypeVar("R")


class Steps:
    """How a batch's steps run: ``isolate=False`` raises, ``isolate=True`` returns exceptions."""

    def __init__(self, *, isolate: bool) -> None:
        self.isolate = isolate

    def batch(
        self, step: Callable[[list[M]], Sequence[R]], members: Sequence[M]
    ) -> list[R | Exception]:
        """``step(members)`` -> one result per member, in order (not called for no members)."""
        members = list(members)
        if not members:
            return []
        if not self.isolate:
            return _aligned(step(members), members)
        try:
            return _aligned(step(members), members)
        except Exception as exc:  # noqa: BLE001 - whose fault it is, the bisection finds out
            if len(members) == 1 or isinstance(exc, BackendUnavailable):
                return [exc] * len(members)
            log.warning("a batched step of %d members failed (%s: %s); isolating the failing "
                        "member(s)", len(members), type(exc).__name__, exc)
            return self._bisect(step, members)

    def _bisect(
        self, step: Callable[[list[M]], Sequence[R]], members: list[M]
    ) -> list[R | Exception]:
        mid = len(members) // 2
        out: list[R | Exception] = []
        for half in (members[:mid], members[mid:]):
            try:
                out.extend(_aligned(step(half), half))
            except Exception as exc:  # noqa: BLE001
                out.extend([exc] if len(half) == 1 else self._bisect(step, half))
        return out

    def each(self, fn: Callable[[M], R], members: Sequence[M]) -> list[R | Exception]:
        """``fn(member)`` for every member (per-member work: validation, prompt building)."""
        if not self.isolate:
            return [fn(m) for m in members]
        out: list[R | Exception] = []
        for m in members:
            try:
                out.append(fn(m))
            except Exception as exc:  # noqa: BLE001
                out.append(exc)
        return out


def keep(
    members: Sequence[M],
    results: Sequence[R | Exception],
    failed: list,
    index: Callable[[M], int],
) -> tuple[list[M], list[R]]:
    """The members that succeeded and their results; a failed member's exception goes to
    ``failed[index(member)]``."""
    kept: list[M] = []
    values: list[R] = []
    for m, r in zip(members, results, strict=True):
        if isinstance(r, Exception):
            failed[index(m)] = r
        else:
            kept.append(m)
            values.append(r)
    return kept, values


def _aligned(results: Sequence[R], members: Sequence[object]) -> list[R]:
    results = list(results)
    if len(results) != len(members):
        raise RuntimeError(
            f"a batched step returned {len(results)} results for {len(members)} members"
        )
    return results
