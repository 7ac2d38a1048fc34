"""Dataset config -> what the benchmark runs on.

:func:`load_conversations` reads the LoCoMo-format sets (the built-in generator writes LoCoMo JSON,
so one loader reads both). :func:`load_benchmark_set` turns any benchmark dataset into
:class:`EvalConversation` s, one per memory user: its turn-pairs (stored as memories), its
history (for the full-context condition) and its questions.

LongMemEval-format sets (``dataset=longmemeval``, the real file or the generated one):

* every question is its own user (:func:`~memroute.eval.datasets.longmemeval.lme_user_id`), whose
  memories are the question's haystack (:func:`~memroute.eval.datasets.longmemeval.lme_turn_pairs`);
* the question is asked on ``question_date``, so the text every condition receives is
  ``"[Current date: <question_date>] <question>"`` (LongMemEval's reader prompt gives the date
  too; "how many days ago" questions need it);
* evidence keys are ``"<session id>:<turn-pair index>"`` of the turn-pairs marked ``has_answer``;
* ``fact_type`` holds the question type, the report's grouping; ``category`` is null (plain token
  F1) except for abstention questions (``_abs``), which get LoCoMo's category 5 rule: correct iff
  the answer says "no information available" or "not mentioned"
  (:func:`memroute.eval.metrics.f1`). LongMemEval's paper asks a GPT-4o judge whether the answer
  identifies the question as unanswerable; the category-5 rule is stricter (it misses "I don't
  know"). Abstention questions have no evidence and form their own group, ``abstention``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from memroute.config import DatasetConfig
from memroute.errors import ConfigError
from memroute.eval.datasets.locomo import QA, Conversation, PairRecord, load_locomo, turn_pairs
from memroute.eval.full_context import HistorySession, HistoryTurn

if TYPE_CHECKING:
    from memroute.eval.datasets.longmemeval import LMEQuestion

DATASETS = ("locomo", "longmemeval", "synthetic")
ABSTENTION_GROUP = "abstention"
ABSTENTION_CATEGORY = 5  # LoCoMo's adversarial rule (see the module doc)


@dataclass(frozen=True)
class EvalConversation:
    """One memory user: the turn-pairs stored for it, its history and the questions about it."""

    sample_id: str  # the user id in the memory store
    records: tuple[PairRecord, ...]  # turn-pairs with the evidence keys they hold
    history: tuple[HistorySession, ...]
    qa: tuple[QA, ...]


def load_conversations(cfg: DatasetConfig, workdir: Path) -> list[Conversation]:
    if cfg.name == "synthetic":
        from memroute.eval.synthetic import generate, write_json

        path = workdir / f"synthetic_u{cfg.num_users}_s{cfg.sessions_per_user}_seed{cfg.seed}.json"
        write_json(generate(num_users=cfg.num_users, sessions_per_user=cfg.sessions_per_user, seed=cfg.seed), path)
        return load_locomo(path, categories=cfg.categories or None, limit=cfg.limit)
    if cfg.name == "locomo":
        if not cfg.path:
            raise ConfigError("dataset.path is required for LoCoMo (path to locomo10.json)", field="dataset.path")
        path = Path(cfg.path).expanduser()
        if not path.is_file():
            raise ConfigError(f"dataset.path {str(path)!r} does not exist", field="dataset.path")
        return load_locomo(
            path, sample_ids=cfg.sample_ids or ["conv-26"], categories=cfg.categories or None, limit=cfg.limit
        )
    raise ConfigError(f"Unknown dataset {cfg.name!r}. Available: locomo, synthetic", field="dataset.name")


def load_benchmark_set(cfg: DatasetConfig, workdir: Path) -> list[EvalConversation]:
    """Any benchmark dataset as :class:`EvalConversation` s (LongMemEval: one per question)."""
    if cfg.name == "longmemeval":
        from memroute.eval.datasets.longmemeval import load_longmemeval
        from memroute.ingest.sources import longmemeval_path

        return [from_longmemeval(q) for q in load_longmemeval(longmemeval_path(cfg, workdir), limit=cfg.limit)]
    if cfg.name not in DATASETS:
        raise ConfigError(f"Unknown dataset {cfg.name!r}. Available: {', '.join(DATASETS)}", field="dataset.name")
    return [from_locomo(c) for c in load_conversations(cfg, workdir)]


def from_locomo(conv: Conversation) -> EvalConversation:
    """LoCoMo: the sample is the user; evidence keys are dia_ids."""
    history = tuple(
        HistorySession(f"Session {s.index}", s.date_text, tuple(HistoryTurn(t.render(), t.dia_id) for t in s.turns))
        for s in conv.sessions
    )
    return EvalConversation(conv.sample_id, tuple(turn_pairs(conv)), history, conv.qa)


def lme_pair_key(session_id: str, turn_index: int) -> str:
    return f"{session_id}:{turn_index}"


def from_longmemeval(q: LMEQuestion) -> EvalConversation:
    """LongMemEval: the question is the user (see the module doc for the choices)."""
    from memroute.eval.datasets.longmemeval import lme_turn_pairs

    lme_records = lme_turn_pairs(q)
    records = tuple(PairRecord(r.pair, (lme_pair_key(r.pair.session_id, r.pair.turn_index),)) for r in lme_records)
    turns: dict[str, list[HistoryTurn]] = defaultdict(list)
    for r in lme_records:
        key = lme_pair_key(r.pair.session_id, r.pair.turn_index)
        for speaker, text in (("User", r.pair.user_text), ("Assistant", r.pair.assistant_text)):
            if text.strip():
                turns[r.pair.session_id].append(HistoryTurn(f"{speaker}: {text}", key))
    # The pairs' session ids: a session id repeated in the haystack gets "#2", "#3"... (lme_turn_pairs).
    seen: Counter[str] = Counter()
    dated = []
    for position, (sid, epoch, date_text) in enumerate(
        zip(q.haystack_session_ids, q.haystack_dates, q.haystack_dates_text, strict=True)
    ):
        seen[sid] += 1
        pair_sid = sid if seen[sid] == 1 else f"{sid}#{seen[sid]}"
        if turns.get(pair_sid):
            dated.append((epoch, position, date_text, tuple(turns[pair_sid])))
    dated.sort()  # chronological; the file's order breaks ties
    history = tuple(
        HistorySession(f"Session {n}", date_text, session_turns)
        for n, (_, _, date_text, session_turns) in enumerate(dated, start=1)
    )
    evidence = () if q.is_abstention else tuple(
        lme_pair_key(r.pair.session_id, r.pair.turn_index) for r in lme_records if r.has_answer
    )
    qa = QA(
        question=f"[Current date: {q.question_date_text}] {q.question}",
        answer=q.answer,
        evidence=evidence,
        category=ABSTENTION_CATEGORY if q.is_abstention else None,  # type: ignore[arg-type]
        fact_type=ABSTENTION_GROUP if q.is_abstention else q.question_type,
        qid=q.question_id,
    )
    return EvalConversation(records[0].pair.user_id if records else _user(q), records, history, (qa,))


def _user(q: LMEQuestion) -> str:
    from memroute.eval.datasets.longmemeval import lme_user_id

    return lme_user_id(q.question_id)


def as_eval_conversation(conv: Conversation | EvalConversation) -> EvalConversation:
    return conv if isinstance(conv, EvalConversation) else from_locomo(conv)
