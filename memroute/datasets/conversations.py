"""Benchmark datasets as :class:`~memroute.datasets.records.EvalConversation` s, one per memory
user: its turn-pairs (stored as memories), its history (for the full-context condition) and its
questions.

LoCoMo-format sets (the real file and the synthetic one): the sample is the user; evidence keys
are dia_ids.

LongMemEval-format sets (``dataset=longmemeval``, the real file or the generated one):

* every question is its own user (:func:`~memroute.datasets.longmemeval.lme_user_id`), whose
  memories are the question's haystack (:func:`~memroute.datasets.longmemeval.lme_turn_pairs`);
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

from memroute.datasets.locomo import turn_pairs
from memroute.datasets.longmemeval import lme_turn_pairs, lme_user_id
from memroute.datasets.records import (
    QA,
    Conversation,
    EvalConversation,
    HistorySession,
    HistoryTurn,
    LMEQuestion,
    PairRecord,
)

ABSTENTION_GROUP = "abstention"
ABSTENTION_CATEGORY = 5  # LoCoMo's adversarial rule (see the module doc)


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
        stale_answer=q.stale_answer,
    )
    return EvalConversation(records[0].pair.user_id if records else lme_user_id(q.question_id), records, history, (qa,))


def as_eval_conversation(conv: Conversation | EvalConversation) -> EvalConversation:
    return conv if isinstance(conv, EvalConversation) else from_locomo(conv)
