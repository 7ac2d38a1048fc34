"""The Router's per-request state while a batch climbs the cascade, and one tier's prompt."""

from __future__ import annotations

from dataclasses import dataclass, field

from memroute.routing.decoding import Decoding
from memroute.types import CallRecord, Message, ModelReply, RetrievalHit


@dataclass
class Pending:
    index: int
    hits: list[RetrievalHit]
    confidences: list[float] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    memory_degraded: bool = False
    skipped: list[int] = field(default_factory=list)  # tiers that failed for this member
    tier_errors: list[str] = field(default_factory=list)  # each failed tier's error, for logs
    tier_reasons: list[str] = field(default_factory=list)  # "tier 1 (model) down", for clients
    rejected: tuple[int, str, Prompt, ModelReply] | None = None  # latest below-tau answer
    pinned: bool = False  # the request named its tier: answered there, not escalated
    query: str = ""  # the question (what the calibrator's memory features compare with)


@dataclass
class Prompt:
    messages: list[Message]
    memories: list[RetrievalHit]  # the hits that fit the tier's budget
    base_tokens: int  # the prompt's tokens without the memory block and the history
    decoding: Decoding
    history_tokens: int = 0  # what the client's earlier turns add
    # What a lower tier's answer may also be read from besides the memories (facts block, the
    # client's turns; memroute.routing.grounding); None: the answer is not checked.
    evidence: list[str] | None = None
