"""A live stream: the tier that answers a streaming request for sure streams its tokens.

Kept out of :mod:`memroute.routing.router` (which calls :func:`streams` and :func:`live_result`)
so the cascade's batch flow reads on its own. The stream records its call and journals its
turn-pair once the answer is complete, as a batch does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from memroute.errors import BackendError
from memroute.llm.base import Backend
from memroute.routing.members import Pending, Prompt
from memroute.routing.tier_failures import own_fault
from memroute.types import ModelReply, RouteDecision, RouteResult, TurnPair

log = logging.getLogger(__name__)

# The router's request and tier (memroute.routing.router imports this module, so they are
# duck-typed here rather than imported: no import cycle).
RouteRequest = Any
Tier = Any


class Router(Protocol):
    """What a live stream calls back in the router."""

    cfg: Any
    retriever: Any

    def _decision(self, t: int, model_id: str, p: Pending, prompt: Prompt) -> RouteDecision: ...

    def _fallback(self, p: Pending) -> RouteResult: ...

    def _judge(self, t: int, tier: Tier, last: bool, tau: float | None, p: Pending,
               prompt: Prompt, reply: ModelReply) -> RouteResult | None: ...

    def _remember(self, pairs: Sequence[TurnPair]) -> list[None]: ...

    def _turn_pair(self, req: RouteRequest, res: RouteResult) -> TurnPair: ...


def streams(t: int, last: bool, req: RouteRequest, backend: Backend) -> bool:
    """Streamed live: a streaming request at the tier that answers it whatever its
    confidence (the last, or its pinned tier), if the back end can stream."""
    return req.stream and (last or req.tier == t) and callable(getattr(backend, "stream", None))


def live_result(
    router: Router, t: int, tier: Tier, p: Pending, prompt: Prompt, req: RouteRequest
) -> RouteResult:
    """The member's result now, its ``stream`` yielding the answer as it is generated."""
    result = RouteResult("", router._decision(t, tier.backend.model_id, p, prompt), p.calls,
                         messages=prompt.messages, decoding=prompt.decoding.report())
    result.stream = _live_pieces(router, t, tier, p, prompt, req, result)
    return result


def _live_pieces(
    router: Router, t: int, tier: Tier, p: Pending, prompt: Prompt, req: RouteRequest,
    result: RouteResult,
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
        final = router._fallback(p)
        yield final.answer
    else:
        if reply is None:
            raise BackendError(f"tier {tier.name}: the stream ended without its reply")
        final = router._judge(t, tier, True, None, p, prompt, reply)
        assert final is not None
    # The answer is what the client was sent (an engine's final text may be detokenized
    # differently from its increments), so the report, the Responses output and memory agree.
    result.answer = sent.strip() or final.answer
    result.reply, result.decision = final.reply, final.decision
    result.calls, result.messages = final.calls, final.messages
    if router.cfg.store_answers and router.retriever is not None and req.store \
            and not final.tool_calls:
        router._remember([router._turn_pair(req, result)])
