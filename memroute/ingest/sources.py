"""Dataset config -> the turn-pairs a bulk ingest stores.

Loading happens before any pipeline starts, so a bad file fails with its loader's error (file,
record and field named) before a single row is embedded.

=============  ===========================================================================
name           users and pairs
=============  ===========================================================================
synthetic      generated LoCoMo-format conversations (written to ``work_dir``); user = sample
locomo         ``path`` (locomo10.json); user = sample id (``sample_ids``, as the benchmark)
longmemeval    ``path`` (a real LongMemEval file) or, without one, the generated set of
               ``size`` (small | default | s-like) written to ``work_dir``; user = question
traces         ``path`` (.jsonl / .parquet recorded traffic); user = "<tenant>:<user_id>"
=============  ===========================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from memroute.config import DatasetConfig
from memroute.errors import ConfigError
from memroute.registry import Registry
from memroute.types import TurnPair

Loader = Callable[[DatasetConfig, Path], list[TurnPair]]
DATASETS: Registry[Loader] = Registry("dataset")
DEFAULT_LME_SIZE = "small"


def dataset_turn_pairs(cfg: DatasetConfig, work_dir: str | Path) -> list[TurnPair]:
    """Every turn-pair of the configured dataset, in dataset order."""
    return DATASETS.get(cfg.name, field="dataset.name")(cfg, Path(work_dir))


@DATASETS.register("synthetic")
@DATASETS.register("locomo")
def _conversation_pairs(cfg: DatasetConfig, work_dir: Path) -> list[TurnPair]:
    from memroute.eval.datasets import turn_pairs
    from memroute.eval.load import load_conversations

    return [r.pair for conv in load_conversations(cfg, work_dir) for r in turn_pairs(conv)]


def longmemeval_path(cfg: DatasetConfig, work_dir: Path) -> Path:
    """The real file at ``cfg.path``, or the generated set of ``cfg.size`` (written on demand)."""
    if cfg.path:
        return _existing(cfg.path)
    from memroute.eval.longmemeval_synth import SIZES, generate_longmemeval, write_json

    size = cfg.size or DEFAULT_LME_SIZE
    if size not in SIZES:
        raise ConfigError(
            f"Unknown LongMemEval size {size!r}. Available: {', '.join(SIZES)} "
            "(or set dataset.path to a real file)",
            field="dataset.size",
        )
    path = work_dir / f"longmemeval_{size}_seed{cfg.seed}.json"
    return write_json(generate_longmemeval(size=size, seed=cfg.seed), path)


@DATASETS.register("longmemeval")
def _longmemeval_pairs(cfg: DatasetConfig, work_dir: Path) -> list[TurnPair]:
    from memroute.eval.datasets import lme_turn_pairs, load_longmemeval

    questions = load_longmemeval(longmemeval_path(cfg, work_dir), limit=cfg.limit)
    return [r.pair for q in questions for r in lme_turn_pairs(q)]


@DATASETS.register("traces")
def _trace_pairs(cfg: DatasetConfig, work_dir: Path) -> list[TurnPair]:
    from memroute.eval.datasets import load_traces, trace_turn_pairs

    if not cfg.path:
        raise ConfigError(
            "dataset.path is required for traces (a .jsonl or .parquet file)", field="dataset.path"
        )
    pairs = trace_turn_pairs(load_traces(_existing(cfg.path)))
    # Limit after numbering: a pair's turn_index (and so its id) never depends on the limit.
    return pairs if cfg.limit is None else pairs[: cfg.limit]


def _existing(path: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"dataset.path {str(p)!r} does not exist", field="dataset.path")
    return p

