"""What the Router does when a tier or the memory fails under a request (not the request's own
bad input, a 4xx): unreadable memory is answered without it, a failed tier is skipped (the member
escalates), and at the last tier a lower tier's rejected answer, or NoTierAnswered (503)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from memroute.errors import BackendUnavailable, MemrouteError, NoTierAnswered
from memroute.routing.members import Pending, Prompt
from memroute.types import ModelReply, RouteResult

log = logging.getLogger(__name__)


def own_fault(exc: Exception) -> bool:
    """A request's own bad input (a 4xx), as opposed to a tier or store that failed under it."""
    return isinstance(exc, MemrouteError) and exc.status < 500


def describe(exc: Exception) -> str:
    return exc.message if isinstance(exc, MemrouteError) else f"{type(exc).__name__}: {exc}"


def degrade_unreadable_memory(members: Sequence[int], hits: list) -> set[int]:
    """A member whose memory could not be read (the store or the embedder failing: not its own
    bad input, a 4xx) is answered without memories and flagged, rather than failed: the models
    can still answer, and its new turn-pair still goes to the journal."""
    degraded = set()
    for k, (i, h) in enumerate(zip(members, hits)):
        if isinstance(h, Exception) and not own_fault(h):
            log.warning("memory unreadable for a request (%s: %s); answering without it",
                        type(h).__name__, h)
            hits[k] = []
            degraded.add(i)
    return degraded


def skip_failed_tier(
    t: int,
    tier_name: str,
    model_id: str,
    last: bool,
    members: list[tuple[Pending, Prompt]],
    replies: list[ModelReply | Exception],
    out: list[RouteResult | Exception | None],
    still: list[Pending],
    fallback: Callable[[Pending], RouteResult],
) -> tuple[list[tuple[Pending, Prompt]], list[ModelReply | Exception]]:
    """Members whose call to tier ``t`` failed through no fault of their own go on to the next
    tier (appended to ``still``) or, at the last, get ``fallback`` (a lower tier's rejected
    answer) or NoTierAnswered in ``out``; the other members and replies are returned."""
    kept: list[tuple[Pending, Prompt]] = []
    kept_replies: list[ModelReply | Exception] = []
    failed: list[Exception] = []
    for member, reply in zip(members, replies, strict=True):
        if not isinstance(reply, Exception) or own_fault(reply):
            kept.append(member)
            kept_replies.append(reply)
            continue
        failed.append(reply)
        p = member[0]
        p.skipped.append(t)
        p.tier_errors.append(f"tier {t} ({model_id}): {describe(reply)}")
        down = "down" if isinstance(reply, BackendUnavailable) else "failed"
        p.tier_reasons.append(f"tier {t} ({model_id}) {down}")
        if not last:
            still.append(p)
        elif p.rejected is not None:
            out[p.index] = fallback(p)
        else:
            out[p.index] = NoTierAnswered(
                "no model tier answered: " + "; ".join(p.tier_errors),
                public_message="no model tier answered (" + ", ".join(p.tier_reasons)
                + "); the request may be retried",
                field="model",
            )
    if failed:
        log.warning("tier %d (%s) failed for %d request(s); %s: %s", t, tier_name, len(failed),
                    "answering with a lower tier's answer" if last else "escalating past it",
                    describe(failed[0]))
    return kept, kept_replies
