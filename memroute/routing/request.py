"""What the Router is asked (:class:`RouteRequest`), what it climbs (:class:`Tier`) and what it
remembers of an answered request (:func:`turn_pair_of`): kept apart from
:mod:`memroute.routing.router` so the live-stream module can name them too."""

from __future__ import annotations

import time
from dataclasses import dataclass

from memroute.accounting.cost import Pricing
from memroute.llm.base import Backend
from memroute.llm.options import GenerationOptions
from memroute.types import Message, RouteResult, TurnPair, stable_id


@dataclass
class Tier:
    """One rung of the cascade: a back end and how its tokens are priced."""

    name: str
    backend: Backend
    pricing: Pricing
    context_tokens: int | None = None  # the model's context window; None: history is not trimmed


@dataclass
class RouteRequest:
    user_id: str
    query: str
    session_time: int | None = None  # epoch seconds; default: now
    session_id: str | None = None
    turn_index: int | None = None
    system: str | None = None  # the client's system prompt; None: the router's own
    history: tuple[Message, ...] = ()  # the client's earlier turns, oldest first
    # After the question: the assistant's tool calls and their results (a tool loop's 2nd step).
    tail: tuple[Message, ...] = ()
    # The client's generation settings (memroute.routing.decoding); None: the router's.
    max_tokens: int | None = None
    temperature: float | None = None
    stop: tuple[str, ...] | None = None
    options: GenerationOptions | None = None
    # Per-request controls (memroute.api.controls): remember this turn, read memory, pin a
    # tier (None: the cascade), this request's tau (None: the router's).
    store: bool = True
    use_memory: bool = True
    tier: int | None = None
    tau: float | None = None
    stream: bool = False  # the client streams: the tier that answers for sure streams its tokens


def turn_pair_of(req: RouteRequest, res: RouteResult) -> TurnPair:
    """The turn-pair an answered request leaves in memory: the question, the answer and the
    model that wrote it (what grounding trusts or not)."""
    now = time.time()
    session_time = req.session_time if req.session_time is not None else int(now)
    session_id = req.session_id or "live"
    # Without a caller-given turn index, derive one that is unique per answered request.
    turn = req.turn_index if req.turn_index is not None else stable_id(req.query, time.time_ns())
    return TurnPair(
        user_id=req.user_id,
        session_id=session_id,
        turn_index=turn,
        user_text=req.query,
        assistant_text=res.answer,
        session_time=session_time,
        source_model=res.decision.answered_model,
        created_at=now,
    )
