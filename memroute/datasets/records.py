"""The dataset layer's record types: what the loaders return and what evaluation consumes.

* LoCoMo format (the real ``locomo10.json`` and the synthetic set): :class:`Conversation` of
  :class:`Session` s of :class:`Turn` s, with :class:`QA` s; :class:`PairRecord` is a turn-pair
  with the dia_ids it was built from.
* LongMemEval format: :class:`LMEQuestion` (one user per question) of :class:`LMETurn` s;
  :class:`LMEPairRecord` is a turn-pair with its haystack session.
* Recorded traffic: :class:`TraceRecord` (answered turn-pairs to ingest) and
  :class:`TraceRequest` (requests to replay, docs/TRACES.md).
* Any benchmark dataset as one memory user: :class:`EvalConversation` (turn-pairs, the
  :class:`HistorySession` s of :class:`HistoryTurn` s the full-context condition reads, questions);
  :class:`RetrievalCase` is one question with its gold turn-pairs and sessions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from memroute.types import Message, TurnPair

_PHOTO_PREFIX = re.compile(
    r"^(an? )?(photo|photograph|photography|picture|image) of ", re.IGNORECASE
)


# ---------------------------------------------------------------- LoCoMo format
@dataclass(frozen=True)
class Turn:
    speaker: str
    dia_id: str
    text: str
    caption: str | None = None  # BLIP caption of a shared photo, if any

    def render(self) -> str:
        """``"Caroline: text [shares a photo of ...]"`` -- the form stored in turn-pairs."""
        out = f"{self.speaker}: {self.text}"
        if self.caption:
            what = _PHOTO_PREFIX.sub("", self.caption.strip())
            out = f"{out.rstrip()} [shares a photo of {what}]"
        return out


@dataclass(frozen=True)
class Session:
    index: int  # N of session_N
    date_time: int  # epoch seconds, UTC
    date_text: str  # as written in the file
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class QA:
    question: str
    answer: str
    evidence: tuple[str, ...]
    category: int
    fact_type: str | None
    qid: str  # "<sample_id>:q<position in the file's qa list>", stable under filtering
    stale_answer: str | None = None  # synthetic corrections: the superseded value
    adversarial_answer: str | None = None  # category 5: the tempting wrong answer


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[Session, ...]
    qa: tuple[QA, ...]

    def find_turn(self, dia_id: str) -> Turn | None:
        for session in self.sessions:
            for turn in session.turns:
                if turn.dia_id == dia_id:
                    return turn
        return None

    @property
    def num_turns(self) -> int:
        return sum(len(s.turns) for s in self.sessions)


@dataclass(frozen=True)
class PairRecord:
    """A turn-pair ready for the memory store, with the dataset turns it was built from."""

    pair: TurnPair
    dia_ids: tuple[str, ...]


# ---------------------------------------------------------------- LongMemEval format
@dataclass(frozen=True)
class LMETurn:
    role: str  # "user" | "assistant"
    content: str
    has_answer: bool = False  # the dataset marks the turns that hold the evidence


@dataclass(frozen=True)
class LMEQuestion:
    question_id: str
    question_type: str
    question: str
    answer: str
    question_date: int  # epoch seconds, UTC
    question_date_text: str  # as written in the file
    haystack_session_ids: tuple[str, ...]
    haystack_dates: tuple[int, ...]  # epoch seconds, UTC, one per session
    haystack_dates_text: tuple[str, ...]
    haystack_sessions: tuple[tuple[LMETurn, ...], ...]
    answer_session_ids: tuple[str, ...]
    is_abstention: bool
    stale_answer: str | None = None  # generated knowledge updates: the superseded value's answer

    @property
    def num_turns(self) -> int:
        return sum(len(s) for s in self.haystack_sessions)


@dataclass(frozen=True)
class LMEPairRecord:
    """A turn-pair ready for the memory store, with the haystack session it came from.

    ``session_id`` is the dataset's id; ``pair.session_id`` equals it except for a session id that
    repeats within one haystack (a few real histories hold a filler session twice), whose later
    copies get ``#2``, ``#3``... so that every pair keeps a distinct stable id.
    """

    pair: TurnPair
    session_id: str
    has_answer: bool


# ---------------------------------------------------------------- recorded traffic
@dataclass(frozen=True)
class TraceRecord:
    ts: float  # epoch seconds, UTC
    tenant: str
    user_id: str
    session_id: str
    query: str
    answer: str
    model: str = ""
    origin: str = field(default="", compare=False)  # "<file>: line 3", for later errors


# ---------------------------------------------------------------- traffic to replay
TRACE_KINDS = ("statement", "repeat", "paraphrase", "novel", "update")


@dataclass(frozen=True)
class TraceRequest:
    """One request of a replay trace (docs/TRACES.md), in trace (time) order.

    ``messages`` is the OpenAI chat request (roles system / user / assistant); its last message is
    the user turn the replay sends. ``references`` are acceptable answers (empty: not scored);
    ``stale_references`` the values an ``update`` superseded, so a replay can count stale answers.
    ``answer`` / ``model``: what production answered, when recorded. ``kind`` / ``fact_id`` /
    ``domain`` (``personal`` or ``general``) come with generated traces.
    """

    request_id: str  # unique in the trace; the replay's checkpoint and Idempotency-Key
    ts: float  # epoch seconds, UTC
    tenant: str
    user_id: str
    session_id: str
    messages: tuple[Message, ...]  # the last one is the user turn
    references: tuple[str, ...] = ()
    stale_references: tuple[str, ...] = ()
    answer: str | None = None
    model: str | None = None
    kind: str | None = None
    fact_id: str | None = None
    domain: str | None = None
    origin: str = field(default="", compare=False)  # "<file>: line 3", for later errors

    @property
    def query(self) -> str:
        return self.messages[-1].content


# ---------------------------------------------------------------- what evaluation consumes
@dataclass(frozen=True)
class HistoryTurn:
    line: str  # as the model reads it: "Caroline: ..." / "User: ..."
    key: str  # evidence key: a LoCoMo dia_id, or a LongMemEval turn-pair key


@dataclass(frozen=True)
class HistorySession:
    label: str  # "Session 3"
    date_text: str  # as written in the dataset
    turns: tuple[HistoryTurn, ...]

    def header(self) -> str:
        return f"[{self.label}, {self.date_text}]"


@dataclass(frozen=True)
class EvalConversation:
    """One memory user: the turn-pairs stored for it, its history and the questions about it."""

    sample_id: str  # the user id in the memory store
    records: tuple[PairRecord, ...]  # turn-pairs with the evidence keys they hold
    history: tuple[HistorySession, ...]
    qa: tuple[QA, ...]


@dataclass(frozen=True)
class RetrievalCase:
    """One question of one user with its gold turn-pairs and sessions (retrieval evaluation)."""

    user_id: str
    query: str
    group: str  # question type or LoCoMo category
    gold_pairs: tuple[int, ...]
    gold_sessions: tuple[str, ...]
    question_time: int | None = None  # epoch seconds the question is asked at (relative dates)
