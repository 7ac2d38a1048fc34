"""Ray Data bulk ingest: turn-pair rows -> embedding actor pool -> Milvus.

A thin adapter over :mod:`memroute.ingest`: the driver plans (drops pairs already stored, so a
re-run embeds and writes nothing), ``from_items`` makes the rows a dataset, ``map_batches`` with
:class:`EmbedBatch` embeds them on an actor pool (one encoder per actor, CPUs or GPUs from the
config), and the rows reach Milvus either from the driver (``iter_batches``; a Milvus Lite file
allows one writer) or from a pool of :class:`WriteBatch` actors (a server takes parallel writers).

Ray itself is started by the caller (``jobs/ingest.py``): nothing here calls ``ray.init``
implicitly, so no Ray node can come up bound to anything but the configured address.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from memroute.config import AssetsConfig, EmbedderConfig, IngestConfig, MemoryConfig
from memroute.errors import AssetError, ConfigError
from memroute.ingest import (
    IngestSummary,
    WriteOutcome,
    actor_threads,
    batch_to_pairs,
    check_fits,
    check_ingest_config,
    embedding_dim,
    model_folder,
    num_blocks,
    pairs_to_rows,
    plan_ingest,
    write_mode,
    write_pairs,
)
from memroute.types import TurnPair

log = logging.getLogger(__name__)

Batch = dict[str, np.ndarray]


class EmbedBatch:
    """``map_batches`` callable class: one encoder per actor, built once; adds ``vector``."""

    def __init__(
        self, embedder: EmbedderConfig, assets: AssetsConfig, dim: int, torch_threads: int
    ) -> None:
        from memroute.embedding import build_encoder
        from memroute.llm.assets import AssetStore

        # num_threads sets torch's (process-wide) pool: one actor process, one thread budget.
        cfg = replace(embedder, num_threads=torch_threads)
        self.encoder = build_encoder(cfg, AssetStore(assets.cache_dir, pip=assets.pip))
        if self.encoder.dim != dim:
            raise AssetError(
                f"the encoder {self.encoder.name!r} produces {self.encoder.dim}-dim vectors but "
                f"the store was opened for {dim} (read from the model folder)",
                field="embedder.dim",
            )

    def __call__(self, batch: Batch) -> Batch:
        out = dict(batch)
        out["vector"] = self.encoder.encode([str(t) for t in batch["text"]])
        return out


class WriteBatch:
    """``map_batches`` callable class for Milvus servers: each actor holds one client and
    returns one row of counts per batch it wrote."""

    def __init__(self, memory: MemoryConfig, dim: int) -> None:
        from memroute.memory import MilvusMemoryStore

        self.store = MilvusMemoryStore(memory, dim)

    def __call__(self, batch: Batch) -> Batch:
        out = write_pairs(self.store, batch_to_pairs(batch), batch["vector"])
        return {
            "written": np.array([out.written], dtype=np.int64),
            "errors": np.array([out.errors], dtype=np.int64),
            "messages": np.array(["\n".join(out.messages)], dtype=object),
        }


@dataclass
class PipelineResult:
    outcome: WriteOutcome
    seconds: float
    first_batch_seconds: float | None


def ingest_pairs(
    pairs: Sequence[TurnPair],
    cfg: IngestConfig,
    *,
    ensure_ray: Callable[[], None] | None = None,
) -> IngestSummary:
    """Store ``pairs`` (embedded) in the configured Milvus; returns the counts.

    ``ensure_ray`` starts Ray when there is something to embed (a re-run that finds every pair
    stored never starts it); without it, Ray must already be initialized.
    """
    from memroute.memory import MilvusMemoryStore

    check_ingest_config(cfg)
    started = time.perf_counter()
    dim = embedding_dim(cfg.embedder, model_folder(cfg.embedder, cfg.assets.cache_dir))
    with MilvusMemoryStore(cfg.memory, dim) as store:
        plan = plan_ingest(pairs, store.existing_ids if cfg.skip_existing else None)
        log.info(
            "ingest plan: %d read, %d new, %d already stored, %d duplicates, %d users",
            plan.read, len(plan.new), plan.skipped, plan.duplicates, plan.users,
        )
        result = PipelineResult(WriteOutcome(), 0.0, None)
        if plan.new:
            if ensure_ray is not None:
                ensure_ray()
            result = run_pipeline(plan.new, cfg, dim=dim, store=store)
            store.flush()  # unflushed Milvus Lite searches are 20-50x slower
    return IngestSummary(
        dataset=cfg.dataset.name,
        read=plan.read,
        written=result.outcome.written,
        skipped=plan.skipped,
        duplicates=plan.duplicates,
        errors=result.outcome.errors,
        users=plan.users,
        seconds=time.perf_counter() - started,
        pipeline_seconds=result.seconds,
        first_batch_seconds=result.first_batch_seconds,
        error_messages=result.outcome.messages,
    )


def run_pipeline(
    pairs: Sequence[TurnPair], cfg: IngestConfig, *, dim: int, store: Any
) -> PipelineResult:
    """Embed ``pairs`` on the actor pool and write them (``store`` is the driver's writer)."""
    import ray
    from tqdm.auto import tqdm

    if not ray.is_initialized():
        raise RuntimeError(
            "Ray is not initialized: start it first (jobs/ingest.py does, on 127.0.0.1 by "
            "default); Ray Data would otherwise start a node on its own settings"
        )
    _check_cluster_fits(cfg)
    ray.data.DataContext.get_current().enable_progress_bars = cfg.ray.data_progress_bars

    started = time.perf_counter()
    first: float | None = None
    outcome = WriteOutcome()
    bar = tqdm(total=len(pairs), unit="rows", desc="ingest", disable=not cfg.progress)
    try:
        for written, errors, messages in _write_stream(embedded(pairs, cfg, dim), cfg, dim, store):
            if first is None:
                first = time.perf_counter() - started
            outcome.add(WriteOutcome(written, errors, messages))
            bar.update(written + errors)
    finally:
        bar.close()
    return PipelineResult(outcome, time.perf_counter() - started, first)


def embedded(pairs: Sequence[TurnPair], cfg: IngestConfig, dim: int) -> Any:
    """The lazy dataset of rows with their ``vector`` column (read -> embed)."""
    import ray

    rows = pairs_to_rows(pairs)
    ds = ray.data.from_items(rows, override_num_blocks=num_blocks(cfg, len(rows)))
    return ds.map_batches(
        EmbedBatch,
        fn_constructor_kwargs={
            "embedder": cfg.embedder,
            "assets": cfg.assets,
            "dim": dim,
            "torch_threads": actor_threads(cfg),
        },
        batch_size=cfg.embed.batch_size,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=cfg.embed.concurrency),
        num_cpus=cfg.embed.num_cpus,
        num_gpus=cfg.embed.num_gpus,
    )


def _write_stream(
    ds: Any, cfg: IngestConfig, dim: int, store: Any
) -> Iterator[tuple[int, int, list[str]]]:
    """(written, errors, messages) per written batch, from the driver or from writer actors."""
    if write_mode(cfg) == "driver":
        for batch in ds.iter_batches(batch_size=cfg.write.batch_size, batch_format="numpy"):
            out = write_pairs(store, batch_to_pairs(batch), batch["vector"])
            yield out.written, out.errors, out.messages
        return
    import ray

    counts = ds.map_batches(
        WriteBatch,
        fn_constructor_kwargs={"memory": cfg.memory, "dim": dim},
        batch_size=cfg.write.batch_size,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=cfg.write.concurrency),
        num_cpus=cfg.write.num_cpus,
    )
    for batch in counts.iter_batches(batch_size=None, batch_format="numpy"):
        for written, errors, messages in zip(batch["written"], batch["errors"], batch["messages"]):
            yield int(written), int(errors), [m for m in str(messages).split("\n") if m]


def _check_cluster_fits(cfg: IngestConfig) -> None:
    import ray

    total = ray.cluster_resources()
    try:
        check_fits(cfg, total.get("CPU", 0.0), total.get("GPU", 0.0))
    except ConfigError as exc:
        if cfg.ray.address is None:  # a local node never grows: waiting would hang forever
            raise
        log.warning("%s (waiting for the cluster to scale up)", exc.message)
