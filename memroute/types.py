"""Core value types shared by every layer (store, retrieval, back ends, router, eval)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal

from memroute.errors import InvalidRequest

Role = Literal["system", "user", "assistant", "tool"]

# User ids become Milvus partition-key values and filter parameters; keep them boring.
USER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$")


def validate_user_id(user_id: object, *, field_name: str = "user_id") -> str:
    """Return ``user_id`` if it is a safe id, else raise :class:`InvalidRequest` naming the field."""
    if not isinstance(user_id, str):
        raise InvalidRequest(
            f"{field_name} must be a string, got {type(user_id).__name__}", field=field_name
        )
    if not USER_ID_RE.fullmatch(user_id):
        raise InvalidRequest(
            f"{field_name} {user_id[:40]!r} is invalid: use 1-128 characters from "
            "letters, digits and _ . : @ - (starting with a letter or digit)",
            field=field_name,
        )
    return user_id


def format_session_date(epoch_s: int) -> str:
    """``1683504000`` -> ``8 May 2023`` (UTC), the prefix style of the paper's turn-pairs."""
    d = datetime.fromtimestamp(epoch_s, tz=timezone.utc)
    return f"{d.day} {d.strftime('%B %Y')}"


def stable_id(*parts: object) -> int:
    """Deterministic positive INT64 from the parts, so re-inserting a turn never duplicates it."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & 0x7FFF_FFFF_FFFF_FFFF


@dataclass(frozen=True)
class ToolCall:
    """A function call a model made (OpenAI's ``tool_calls[i]``); ``arguments`` is JSON text,
    as OpenAI sends it (a model may emit invalid JSON: the client decides what to do)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Message:
    """One chat message. ``tool_calls``: an assistant turn that called functions (its content
    may be empty); ``tool_call_id``: a ``tool`` message answering one of those calls."""

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True)
class TurnPair:
    """One answered exchange: what the user asked and what the assistant replied."""

    user_id: str
    session_id: str
    turn_index: int
    user_text: str
    assistant_text: str
    session_time: int  # epoch seconds, UTC
    source_model: str = ""
    created_at: float = 0.0  # epoch seconds when recorded

    @property
    def id(self) -> int:
        return stable_id(self.user_id, self.session_id, self.turn_index)

    def text(self) -> str:
        return (
            f"[{format_session_date(self.session_time)}] "
            f"Q: {self.user_text} / A: {self.assistant_text}"
        )


# The source_model of a history loaded from a dataset (LoCoMo, LongMemEval): its replies are part
# of the record, not answers a tier gave here.
DATASET_SOURCE = "dataset"


def replied_here(source_model: str) -> bool:
    """Whether a stored reply is one a tier gave (not an ingested history's, not a dataset's)."""
    return source_model not in ("", DATASET_SOURCE)


@dataclass(frozen=True)
class Memory:
    """A stored turn-pair as read back from the store."""

    id: int
    user_id: str
    text: str
    session_time: int
    source_model: str = ""
    created_at: float = 0.0
    session_id: str = ""
    turn_index: int = 0
    # Bi-temporal supersession (memroute.memory.supersession): the id of the newer pair that
    # replaced this one's value and the session time it did so; 0 while the pair is current.
    superseded_by: int = 0
    valid_until: int = 0


def memory_of(pair: TurnPair) -> Memory:
    """The :class:`Memory` the store returns for ``pair`` once written (same id, same text)."""
    return Memory(
        id=pair.id,
        user_id=pair.user_id,
        text=pair.text(),
        session_time=pair.session_time,
        source_model=pair.source_model,
        created_at=float(pair.created_at),
        session_id=pair.session_id,
        turn_index=pair.turn_index,
    )


def chronological_key(m: TurnPair | Memory) -> tuple[int, float, str, int]:
    """Time order of turn-pairs: session time (whole seconds), then when each was recorded
    (a served pair's ``created_at``: two answers within one second keep their order; a
    dataset's pairs share their session's), then the dataset's own session and turn order."""
    return (int(m.session_time), float(m.created_at), m.session_id, int(m.turn_index))


@dataclass(frozen=True)
class RetrievalHit:
    memory: Memory
    score: float  # fused score (higher is better)
    dense_score: float | None = None
    bm25_score: float | None = None


@dataclass
class ModelReply:
    """What a back end returns for one generation (greedy by default)."""

    text: str
    model_id: str
    logprobs: list[float]  # log p of each generated token
    prompt_tokens: int
    completion_tokens: int
    # log p of the best token other than the chosen one, per position (top-2 margin confidence)
    alt_logprobs: list[float] | None = None
    latency_s: float = 0.0
    finish_reason: str = "stop"  # "stop", "length", or "tool_calls" when tool_calls is set
    tool_calls: list[ToolCall] = field(default_factory=list)  # parsed from the text, if tools
    # Per generated token, only when GenerationOptions.top_logprobs asked for them (for the
    # client's `logprobs`): its text, and the engine's top alternatives as (text, logprob).
    token_texts: list[str] | None = None
    top_logprobs: list[list[tuple[str, float]]] | None = None
    # Prompt tokens a prefix cache served: the engine's own count (vLLM's num_cached_tokens,
    # an OpenAI server's prompt_tokens_details.cached_tokens), else counted from the token ids
    # (memroute.llm.prefix_cache)
    cached_tokens: int = 0
    # the engine's time to first token (vLLM with stats on: arrival to first token), else None
    ttft_s: float | None = None


@dataclass
class CallRecord:
    """Exact token attribution and cost of one model call."""

    tier: int
    model_id: str
    base_prompt_tokens: int  # system prompt + the question, without memories or history
    injected_tokens: int  # prompt tokens added by the memory block
    output_tokens: int
    eff_cost: float  # (in + 4*out) * P/8
    latency_s: float
    confidence: float
    accepted: bool
    params_b: float = 0.0
    history_tokens: int = 0  # prompt tokens added by the client's earlier turns
    cached_tokens: int = 0  # of the input, served from the engine's prefix cache
    ttft_s: float | None = None  # ModelReply.ttft_s
    # Whether the answer was read from a trusted source (memroute.routing.grounding); None: not
    # checked. A confident answer with False here escalated for that reason.
    grounded: bool | None = None
    answer: str = ""  # the call's reply text: what a lower tier said before it escalated

    @property
    def input_tokens(self) -> int:
        return self.base_prompt_tokens + self.injected_tokens + self.history_tokens


@dataclass
class RouteDecision:
    answered_tier: int
    answered_model: str
    confidences: list[float]  # one per tier tried, in order
    escalated: bool
    memories: list[RetrievalHit] = field(default_factory=list)
    memory_degraded: bool = False  # the memory could not be read: answered without it
    tiers_skipped: list[int] = field(default_factory=list)  # tiers that failed (down, timed out)


@dataclass
class RouteResult:
    answer: str
    decision: RouteDecision
    calls: list[CallRecord]
    reply: ModelReply | None = None  # the answering call's reply (tool calls, token log-probs)
    messages: list[Message] = field(default_factory=list)  # the prompt that answered
    decoding: dict[str, object] = field(default_factory=dict)  # the answering call's settings
    # A streamed answer (RouteRequest.stream at the tier that answers for sure): its text
    # pieces as the tier generates them. Until it is consumed, ``answer``, ``reply``, ``calls``
    # and ``decision`` hold what was known before that tier; consuming it completes them (and
    # journals the turn-pair) before it ends.
    stream: Iterator[str] | None = None

    @property
    def tool_calls(self) -> list[ToolCall]:
        return list(self.reply.tool_calls) if self.reply is not None else []

    @property
    def eff_cost(self) -> float:
        return sum(c.eff_cost for c in self.calls)
