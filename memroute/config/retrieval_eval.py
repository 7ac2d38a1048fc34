"""Schema of the retrieval evaluation job (conf/retrieval_eval.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from memroute.config.schema import (
    AssetsConfig,
    DatasetConfig,
    EmbedderConfig,
    MemoryConfig,
    RetrievalConfig,
    TrackingConfig,
)


@dataclass
class RetrievalEvalConfig:
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    assets: AssetsConfig = field(default_factory=AssetsConfig)
    strategies: list[str] = field(
        default_factory=lambda: ["dense", "bm25", "hybrid-rrf", "hybrid-weighted", "hybrid-bm25_dominant"]
    )
    # Matryoshka widths to test; null = the encoder's full width. Widths >= the model's are skipped.
    dims: list[Optional[int]] = field(default_factory=lambda: [None, 256, 128])
    ks: list[int] = field(default_factory=lambda: [1, 5, 10])
    output_dir: str = ".memroute/retrieval_eval"
    # Atomic units beside the turn-pairs: a units.jsonl a benchmark run's fact layer wrote
    # (python -m jobs.benchmark conditions=[warm_memory_units] ...: <run>/units.jsonl). Each
    # strategy is then scored again as "<strategy>-units" (a dash: MLflow metric names take no "+") (memroute/retrieval/with_units.py).
    units_from: Optional[str] = None  # noqa: UP045 - OmegaConf reads Optional
    unit_k: int = 5  # units asked for per question
