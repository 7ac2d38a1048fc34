"""A live stream: the tier that answers a streaming request for sure streams its tokens.

Kept out of :mod:`memroute.routing.router` (which calls :func:`streams` and :func:`live_result`)
so the cascade's batch flow reads on its own. The stream records its call and journals its
turn-pair once the answer is complete, as a batch does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from memroute.errors import BackendError
from memroute.routing.members import Pending, Prompt
from memroute.routing.request import RouteRequest, Tier
from memroute.routing.tier_failures import own_fault
from memroute.types import ModelReply, RouteDecision, RouteResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveHooks:
    """What the router hands a live stream for its end (the router builds them: this module
    never reaches into it)."""

    decision: RouteDecision  # the report while the answer streams
    judge: Callable[[ModelReply], RouteResult | None]  # records the call; the final result
    fallback: Callable[[], RouteResult]  # a lower tier's rejected answer (the tier failed)
    remember: Callable[[RouteResult], object] | None  # journals the turn; None: not stored


def streams(t: int, last: bool, req: RouteRequest) -> bool:
    """Streamed live: a streaming request at the tier that answers it whatever its
    confidence (the last, or its pinned tier)."""
    return req.stream and (last or req.tier == t)


def live_result(t: int, tier: Tier, p: Pending, prompt: Prompt, hooks: LiveHooks) -> RouteResult:
    """The member's result now, its ``stream`` yielding the answer as it is generated."""
    result = RouteResult("", hooks.decision, p.calls, messages=prompt.messages,
                         decoding=prompt.decoding.report())
    result.stream = _live_pieces(t, tier, p, prompt, hooks, result)
    return result


def _live_pieces(
    t: int, tier: Tier, p: Pending, prompt: Prompt, hooks: LiveHooks, result: RouteResult,
) -> Iterator[str]:
    """The tier's text as it is generated (leading whitespace held, as answers are
    stripped); then the call is recorded and the turn-pair journaled, as a batch does.
    A tier that fails before its first piece gives way to a lower tier's rejected answer,
    as in a batch; one that fails later ends the stream with its error."""
    reply, sent = None, ""
    try:
        for item in tier.backend.stream(prompt.messages, **prompt.decoding.kwargs()):
            if isinstance(item, ModelReply):
                reply = item
                continue
            piece = item if sent else item.lstrip()
            if piece:
                sent += piece
                yield piece
    except Exception as exc:  # re-raised unless a fallback answer exists
        if sent or p.rejected is None or own_fault(exc):
            raise
        log.warning("tier %d (%s) failed while streaming; answering with a lower tier's "
                    "answer: %s", t, tier.name, exc)
        p.skipped.append(t)
        final = hooks.fallback()
        yield final.answer
    else:
        if reply is None:
            raise BackendError(f"tier {tier.name}: the stream ended without its reply")
        final = hooks.judge(reply)
        assert final is not None
    # The answer is what the client was sent (an engine's final text may be detokenized
    # differently from its increments), so the report, the Responses output and memory agree.
    result.answer = sent.strip() or final.answer
    result.reply, result.decision = final.reply, final.decision
    result.calls, result.messages = final.calls, final.messages
    if hooks.remember is not None and not final.tool_calls:
        hooks.remember(result)
