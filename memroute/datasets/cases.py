"""Retrieval-evaluation cases: each question with its gold turn-pairs and gold sessions, as the
LongMemEval and LoCoMo papers score retrieval (the scoring itself is
:mod:`memroute.eval.retrieval_eval`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from memroute.datasets.locomo import evidence_pair_ids, turn_pairs
from memroute.datasets.longmemeval import gold_pair_ids, gold_session_ids, lme_turn_pairs
from memroute.datasets.records import Conversation, LMEQuestion, RetrievalCase
from memroute.types import TurnPair


def locomo_cases(conversations: Iterable[Conversation]) -> tuple[list[TurnPair], list[RetrievalCase]]:
    """Each conversation is one user; ``evidence`` dia_ids are the gold (questions without any skipped)."""
    pairs: list[TurnPair] = []
    cases: list[RetrievalCase] = []
    for conv in conversations:
        records = turn_pairs(conv)
        pairs.extend(r.pair for r in records)
        session_of = {r.pair.id: r.pair.session_id for r in records}
        # LoCoMo's questions come after the conversation: asked on its last session's date
        asked = max((r.pair.session_time for r in records), default=None)
        for qa in conv.qa:
            gold = evidence_pair_ids(qa, records)
            if gold:
                sessions = tuple(dict.fromkeys(session_of[g] for g in gold))
                cases.append(RetrievalCase(conv.sample_id, qa.question, f"cat{qa.category}", gold,
                                           sessions, question_time=asked))
    return pairs, cases


def longmemeval_cases(
    questions: Iterable[LMEQuestion], *, user_of: Callable[[int, LMEQuestion], str] | None = None
) -> tuple[list[TurnPair], list[RetrievalCase]]:
    """Each question's haystack is its own user (or, with ``user_of(position, question)``, that
    user's: several haystacks can share one); abstention questions have no gold and are skipped."""
    pairs: list[TurnPair] = []
    cases: list[RetrievalCase] = []
    for i, q in enumerate(questions):
        records = lme_turn_pairs(q) if user_of is None else lme_turn_pairs(q, user_id=user_of(i, q))
        pairs.extend(r.pair for r in records)
        gold = gold_pair_ids(q, records)
        if q.is_abstention or not gold:
            continue
        user = records[0].pair.user_id if records else q.question_id
        # Pair session ids may carry a "#2" suffix for repeated sessions: score on the pair's own id.
        by_id = {r.pair.id: r.pair.session_id for r in records}
        sessions = tuple(dict.fromkeys(by_id[g] for g in gold)) or tuple(gold_session_ids(q))
        cases.append(RetrievalCase(user, q.question, q.question_type, gold, sessions,
                                   question_time=q.question_date))
    return pairs, cases
