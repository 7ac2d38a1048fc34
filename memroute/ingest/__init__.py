"""Bulk ingest, the pure-Python parts: dataset -> turn-pair rows, what is new, batched writes.

The Ray Data pipeline (``pipelines/ingest.py``) is a thin adapter over these.
"""

from __future__ import annotations

from memroute.ingest.checks import (
    actor_threads,
    check_fits,
    check_ingest_config,
    num_blocks,
    resource_demand,
    write_mode,
)
from memroute.ingest.model_dim import embedding_dim, model_folder
from memroute.ingest.plan import IngestPlan, plan_ingest, store_is_new
from memroute.ingest.rows import (
    ROW_FIELDS,
    batch_to_pairs,
    longest_first,
    pair_to_row,
    pairs_for_ids,
    pairs_to_rows,
    row_to_pair,
)
from memroute.ingest.summary import IngestSummary
from memroute.ingest.writes import WriteOutcome, write_pairs

__all__ = [
    "ROW_FIELDS",
    "IngestPlan",
    "IngestSummary",
    "WriteOutcome",
    "actor_threads",
    "batch_to_pairs",
    "check_fits",
    "check_ingest_config",
    "embedding_dim",
    "longest_first",
    "model_folder",
    "num_blocks",
    "pair_to_row",
    "pairs_for_ids",
    "pairs_to_rows",
    "plan_ingest",
    "resource_demand",
    "row_to_pair",
    "store_is_new",
    "write_mode",
    "write_pairs",
]
