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
