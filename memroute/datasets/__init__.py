"""The dataset layer: record types, loaders, seeded generators and one registry by dataset name.

It depends on nothing above it (no eval, ingest, retrieval or models): only ``memroute.types``,
``memroute.errors``, ``memroute.registry`` and ``memroute.config``.

* :mod:`.records` -- the record types (LoCoMo, LongMemEval, traces, and the
  :class:`EvalConversation` / :class:`RetrievalCase` evaluation consumes);
* :mod:`.locomo`, :mod:`.longmemeval`, :mod:`.traces`, :mod:`.replay_trace` -- the loaders
  (:class:`DatasetError` names the file, record and field of a bad input);
* :mod:`.generate` -- the seeded generators (synthetic LoCoMo-format, LongMemEval-format, replay
  traces);
* :mod:`.conversations`, :mod:`.cases` -- datasets as benchmark users and retrieval cases;
* :mod:`.registry` -- ``DATASETS``: name -> dataset (turn-pairs, conversations, cases).
"""

from __future__ import annotations

from memroute.datasets.cases import locomo_cases, longmemeval_cases
from memroute.datasets.conversations import as_eval_conversation, from_locomo, from_longmemeval
from memroute.datasets.locomo import (
    CATEGORY_NAMES,
    evidence_pair_ids,
    load_locomo,
    parse_locomo_date,
    turn_pairs,
)
from memroute.datasets.longmemeval import (
    QUESTION_TYPES,
    gold_pair_ids,
    gold_session_ids,
    lme_turn_pairs,
    lme_user_id,
    load_longmemeval,
    parse_lme_date,
)
from memroute.datasets.parsing import DatasetError
from memroute.datasets.records import (
    QA,
    Conversation,
    EvalConversation,
    HistorySession,
    HistoryTurn,
    LMEPairRecord,
    LMEQuestion,
    LMETurn,
    PairRecord,
    RetrievalCase,
    Session,
    TraceRecord,
    Turn,
)
from memroute.datasets.registry import (
    DATASETS,
    Dataset,
    dataset_cases,
    dataset_conversations,
    dataset_turn_pairs,
    longmemeval_path,
)
from memroute.datasets.replay_trace import (
    import_openai_chat_log,
    iter_trace,
    load_trace,
    write_trace,
)
from memroute.datasets.traces import load_traces, trace_turn_pairs, trace_user_id

__all__ = [
    "CATEGORY_NAMES",
    "DATASETS",
    "QA",
    "QUESTION_TYPES",
    "Conversation",
    "Dataset",
    "DatasetError",
    "EvalConversation",
    "HistorySession",
    "HistoryTurn",
    "LMEPairRecord",
    "LMEQuestion",
    "LMETurn",
    "PairRecord",
    "RetrievalCase",
    "Session",
    "TraceRecord",
    "Turn",
    "as_eval_conversation",
    "dataset_cases",
    "dataset_conversations",
    "dataset_turn_pairs",
    "evidence_pair_ids",
    "from_locomo",
    "from_longmemeval",
    "gold_pair_ids",
    "gold_session_ids",
    "import_openai_chat_log",
    "iter_trace",
    "lme_turn_pairs",
    "lme_user_id",
    "load_locomo",
    "load_longmemeval",
    "load_trace",
    "load_traces",
    "locomo_cases",
    "longmemeval_cases",
    "longmemeval_path",
    "parse_lme_date",
    "parse_locomo_date",
    "trace_turn_pairs",
    "trace_user_id",
    "turn_pairs",
    "write_trace",
]
