"""Benchmark datasets as typed records (LoCoMo format; the synthetic set is written in it too)."""

from __future__ import annotations

from memroute.errors import MemrouteError


class DatasetError(MemrouteError):
    """A dataset file is missing or malformed; the message names the file, sample and field."""

    status = 400
    code = "dataset_error"


# Imported after DatasetError on purpose: the loaders import it from this package.
from memroute.eval.datasets.locomo import (  # noqa: E402
    CATEGORY_NAMES,
    QA,
    Conversation,
    PairRecord,
    Session,
    Turn,
    evidence_pair_ids,
    load_locomo,
    parse_locomo_date,
    turn_pairs,
)

__all__ = [
    "CATEGORY_NAMES",
    "QA",
    "Conversation",
    "DatasetError",
    "PairRecord",
    "Session",
    "Turn",
    "evidence_pair_ids",
    "load_locomo",
    "parse_locomo_date",
    "turn_pairs",
]

# LongMemEval (one user per question) and recorded traffic.
from memroute.eval.datasets.longmemeval import (  # noqa: E402
    QUESTION_TYPES,
    LMEPairRecord,
    LMEQuestion,
    LMETurn,
    gold_pair_ids,
    gold_session_ids,
    lme_turn_pairs,
    lme_user_id,
    load_longmemeval,
    parse_lme_date,
)
from memroute.eval.datasets.traces import (  # noqa: E402
    TraceRecord,
    load_traces,
    trace_turn_pairs,
    trace_user_id,
)

__all__ += [
    "QUESTION_TYPES",
    "LMEPairRecord",
    "LMEQuestion",
    "LMETurn",
    "TraceRecord",
    "gold_pair_ids",
    "gold_session_ids",
    "lme_turn_pairs",
    "lme_user_id",
    "load_longmemeval",
    "load_traces",
    "parse_lme_date",
    "trace_turn_pairs",
    "trace_user_id",
]
