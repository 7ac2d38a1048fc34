"""One registry of datasets by name: ``DATASETS`` (a :class:`~memroute.registry.Registry`).

Every dataset takes the ``(DatasetConfig, work_dir)`` it is configured with and gives its
turn-pairs (what a bulk ingest stores); the benchmark datasets also give
:class:`~memroute.datasets.records.EvalConversation` s (one per memory user) and retrieval cases
with gold evidence. Loading happens before any pipeline starts, so a bad file fails with its
loader's error (file, record and field named) before a single row is embedded.

=============  ===========================================================================
name           users and pairs
=============  ===========================================================================
synthetic      generated LoCoMo-format conversations (written to ``work_dir``); user = sample
locomo         ``path`` (locomo10.json); user = sample id (``sample_ids``: ids, or ``[all]``; default conv-26)
longmemeval    ``path`` (a real LongMemEval file) or, without one, the generated set of
               ``size`` (small | default | s-like) written to ``work_dir``; user = question
traces         ``path`` (.jsonl / .parquet recorded traffic); user = "<tenant>:<user_id>";
               no questions, so no conversations and no retrieval cases
=============  ===========================================================================
"""

from __future__ import annotations

from pathlib import Path

from memroute.config import DatasetConfig
from memroute.datasets.cases import locomo_cases, longmemeval_cases
from memroute.datasets.conversations import from_locomo, from_longmemeval
from memroute.datasets.locomo import load_locomo, turn_pairs
from memroute.datasets.longmemeval import QUESTION_TYPES, lme_turn_pairs, load_longmemeval
from memroute.datasets.records import Conversation, EvalConversation, LMEQuestion, RetrievalCase
from memroute.datasets.traces import load_traces, trace_turn_pairs
from memroute.errors import ConfigError
from memroute.registry import Registry
from memroute.types import TurnPair

DEFAULT_LME_SIZE = "small"
Cases = tuple[list[TurnPair], list[RetrievalCase]]


class Dataset:
    """A named dataset. ``has_questions``: it gives conversations and retrieval cases (with gold
    evidence); without, only turn-pairs."""

    has_questions = True

    def turn_pairs(self, cfg: DatasetConfig, work_dir: Path) -> list[TurnPair]:
        raise NotImplementedError

    def conversations(self, cfg: DatasetConfig, work_dir: Path) -> list[EvalConversation]:
        raise NotImplementedError

    def cases(self, cfg: DatasetConfig, work_dir: Path) -> Cases:
        raise NotImplementedError


DATASETS: Registry[Dataset] = Registry("dataset")


def dataset_turn_pairs(cfg: DatasetConfig, work_dir: str | Path) -> list[TurnPair]:
    """Every turn-pair of the configured dataset, in dataset order."""
    return DATASETS.get(cfg.name, field="dataset.name").turn_pairs(cfg, Path(work_dir))


def _with_questions() -> list[str]:
    return [n for n in DATASETS.names() if DATASETS.get(n).has_questions]


def dataset_conversations(cfg: DatasetConfig, work_dir: str | Path) -> list[EvalConversation]:
    """The benchmark's memory users (LongMemEval: one per question)."""
    if cfg.name not in DATASETS or not DATASETS.get(cfg.name).has_questions:
        raise ConfigError(
            f"Unknown dataset {cfg.name!r}. Available: {', '.join(_with_questions())}", field="dataset.name"
        )
    return DATASETS.get(cfg.name).conversations(cfg, Path(work_dir))


def dataset_cases(cfg: DatasetConfig, work_dir: str | Path) -> Cases:
    """All turn-pairs and the questions with gold evidence, for the retrieval evaluation."""
    if cfg.name not in DATASETS or not DATASETS.get(cfg.name).has_questions:
        raise ConfigError(
            f"retrieval evaluation needs gold evidence: dataset {cfg.name!r} has none. "
            f"Available: {', '.join(_with_questions())}",
            field="dataset.name",
        )
    return DATASETS.get(cfg.name).cases(cfg, Path(work_dir))


class _LoCoMoFormat(Dataset):
    """LoCoMo-format conversations; the sample is the user, evidence keys are dia_ids."""

    def locomo(self, cfg: DatasetConfig, work_dir: Path) -> list[Conversation]:
        raise NotImplementedError

    def turn_pairs(self, cfg: DatasetConfig, work_dir: Path) -> list[TurnPair]:
        return [r.pair for conv in self.locomo(cfg, work_dir) for r in turn_pairs(conv)]

    def conversations(self, cfg: DatasetConfig, work_dir: Path) -> list[EvalConversation]:
        return [from_locomo(c) for c in self.locomo(cfg, work_dir)]

    def cases(self, cfg: DatasetConfig, work_dir: Path) -> Cases:
        return locomo_cases(self.locomo(cfg, work_dir))


class _Synthetic(_LoCoMoFormat):
    def locomo(self, cfg: DatasetConfig, work_dir: Path) -> list[Conversation]:
        from memroute.datasets.generate.synthetic import generate, write_json

        path = work_dir / f"synthetic_u{cfg.num_users}_s{cfg.sessions_per_user}_seed{cfg.seed}.json"
        write_json(generate(num_users=cfg.num_users, sessions_per_user=cfg.sessions_per_user, seed=cfg.seed), path)
        return load_locomo(path, categories=cfg.categories or None, limit=cfg.limit)  # type: ignore[arg-type]


class _LoCoMo(_LoCoMoFormat):
    def locomo(self, cfg: DatasetConfig, work_dir: Path) -> list[Conversation]:
        if not cfg.path:
            raise ConfigError("dataset.path is required for LoCoMo (path to locomo10.json)", field="dataset.path")
        path = _existing(cfg.path)
        return load_locomo(
            path, sample_ids=locomo_sample_ids(cfg.sample_ids),
            categories=cfg.categories or None,  # type: ignore[arg-type]
            limit=cfg.limit,
        )


def locomo_sample_ids(ids: list[str] | str) -> list[str] | None:
    """``dataset.sample_ids``: a list of conversation ids, or ``all`` (None: every conversation
    of the file). An empty list is refused rather than read as some default."""
    if ids == "all" or list(ids) == ["all"]:
        return None
    if not ids:
        raise ConfigError("dataset.sample_ids is empty: list conversation ids (e.g. [conv-26]) "
                          "or write dataset.sample_ids=[all] for every conversation",
                          field="dataset.sample_ids")
    return list(ids)


def longmemeval_path(cfg: DatasetConfig, work_dir: Path) -> Path:
    """The real file at ``cfg.path``, or the generated set of ``cfg.size`` (written on demand)."""
    if cfg.path:
        return _existing(cfg.path)
    from memroute.datasets.generate.longmemeval import SIZES, generate_longmemeval, write_json

    size = cfg.size or DEFAULT_LME_SIZE
    if size not in SIZES:
        raise ConfigError(
            f"Unknown LongMemEval size {size!r}. Available: {', '.join(SIZES)} "
            "(or set dataset.path to a real file)",
            field="dataset.size",
        )
    path = work_dir / f"longmemeval_{size}_seed{cfg.seed}.json"
    return write_json(generate_longmemeval(size=size, seed=cfg.seed), path)


class _LongMemEval(Dataset):
    """LongMemEval format: every question is its own user (its haystack)."""

    def questions(self, cfg: DatasetConfig, work_dir: Path) -> list[LMEQuestion]:
        types = cfg.question_types
        if types is not None:
            types = [types] if isinstance(types, str) else list(types)
            bad = [t for t in types if t not in QUESTION_TYPES]
            if bad or not types:
                raise ConfigError(f"dataset.question_types: unknown {bad or 'empty list'}. "
                                  f"Available: {', '.join(QUESTION_TYPES)}",
                                  field="dataset.question_types")
        return load_longmemeval(longmemeval_path(cfg, work_dir), question_types=types,
                                limit=cfg.limit)

    def turn_pairs(self, cfg: DatasetConfig, work_dir: Path) -> list[TurnPair]:
        return [r.pair for q in self.questions(cfg, work_dir) for r in lme_turn_pairs(q)]

    def conversations(self, cfg: DatasetConfig, work_dir: Path) -> list[EvalConversation]:
        return [from_longmemeval(q) for q in self.questions(cfg, work_dir)]

    def cases(self, cfg: DatasetConfig, work_dir: Path) -> Cases:
        return longmemeval_cases(self.questions(cfg, work_dir))


class _Traces(Dataset):
    """Recorded traffic: turn-pairs only (no questions, so no gold evidence)."""

    has_questions = False

    def turn_pairs(self, cfg: DatasetConfig, work_dir: Path) -> list[TurnPair]:
        if not cfg.path:
            raise ConfigError(
                "dataset.path is required for traces (a .jsonl or .parquet file)", field="dataset.path"
            )
        pairs = trace_turn_pairs(load_traces(_existing(cfg.path)))
        # Limit after numbering: a pair's turn_index (and so its id) never depends on the limit.
        return pairs if cfg.limit is None else pairs[: cfg.limit]


DATASETS.add("synthetic", _Synthetic())
DATASETS.add("locomo", _LoCoMo())
DATASETS.add("longmemeval", _LongMemEval())
DATASETS.add("traces", _Traces())


def _existing(path: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"dataset.path {str(p)!r} does not exist", field="dataset.path")
    return p
