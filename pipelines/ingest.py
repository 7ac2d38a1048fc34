"""Ray Data bulk ingest: turn-pair rows -> embedding actor pool -> Milvus.

A thin adapter over :mod:`memroute.ingest`: the driver plans (drops pairs already stored, so a
re-run embeds and writes nothing), cuts the rows into blocks (one embedding call each),
``map_batches`` with :class:`EmbedBatch` embeds them on an actor pool (one encoder per actor,
CPUs or GPUs from the config), and the rows reach Milvus either from the driver
(``iter_batches``; a Milvus Lite file allows one writer) or from a pool of :class:`WriteBatch`
actors (a server takes parallel writers).

When the driver writes, it keeps the planned pairs and ships only ``id`` and ``text`` to the
actors, which send back ``id`` and ``vector``: the other columns would only travel there and
back to be validated again. Each block is written as soon as it arrives, so writes overlap the
encoding of the next blocks.

Ray itself is started by the caller (``jobs/ingest.py``): nothing here calls ``ray.init``
implicitly, so no Ray node can come up bound to anything but the configured address.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from memroute import build
from memroute.config import AssetsConfig, EmbedderConfig, IngestConfig, MemoryConfig
from memroute.errors import AssetError, ConfigError
from memroute.ingest import (
    ROW_FIELDS,
    IngestSummary,
    WriteOutcome,
    actor_threads,
    batch_to_pairs,
    check_fits,
    check_ingest_config,
    embedding_dim,
    longest_first,
    model_folder,
    num_blocks,
    pairs_for_ids,
    pairs_to_rows,
    plan_ingest,
    store_is_new,
    write_mode,
    write_pairs,
)
from memroute.types import TurnPair

log = logging.getLogger(__name__)

Batch = dict[str, np.ndarray]


# Columns the embedding actors get when the driver writes (it keeps the pairs themselves).
SLIM_FIELDS = ("id", "text")
# A writer actor whose process dies is restarted, and the blocks it held are retried on it, this
# many times (Ray Data's default is forever: a block that kills its writer would never end the
# job). The restarted writer upserts (WriteBatch), so a retry stores no pair twice.
WRITER_RESTARTS = 3


class EmbedBatch:
    """``map_batches`` callable class: one encoder per actor, built once; adds ``vector``.

    ``keep_columns=False`` returns only ``id`` and ``vector`` (the driver holds the rest).
    """

    def __init__(
        self,
        embedder: EmbedderConfig,
        assets: AssetsConfig,
        dim: int,
        torch_threads: int,
        keep_columns: bool = True,
    ) -> None:
        # num_threads sets torch's (process-wide) pool: one actor process, one thread budget;
        # the Rust tokenizer would otherwise add a thread per core to every actor.
        if torch_threads == 1:
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        cfg = replace(embedder, num_threads=torch_threads)
        self.encoder = build.encoder(cfg, build.asset_store(assets))
        if self.encoder.dim != dim:
            raise AssetError(
                f"the encoder {self.encoder.name!r} produces {self.encoder.dim}-dim vectors but "
                f"the store was opened for {dim} (read from the model folder)",
                field="embedder.dim",
            )

        self.keep_columns = keep_columns

    def __call__(self, batch: Batch) -> Batch:
        vectors = self.encoder.encode([str(t) for t in batch["text"]])
        if not self.keep_columns:
            return {"id": batch["id"], "vector": vectors}
        out = dict(batch)
        out["vector"] = vectors
        return out


class WriteBatch:
    """``map_batches`` callable class for Milvus servers: each actor holds one client and
    returns one row of counts per batch it wrote.

    A writer whose process died is restarted by Ray (:data:`WRITER_RESTARTS`), which retries
    the blocks it held on the new process: one of them may be half stored already. A restarted
    writer therefore upserts every block it gets (``known_new`` off), so a retried block stores
    each pair once; the plan's inserts are for writers that never died.
    """

    def __init__(self, memory: MemoryConfig, dim: int, batch_size: int, known_new: bool) -> None:
        import ray

        self.store = build.store(memory, dim)
        self.batch_size = batch_size
        restarted = bool(ray.get_runtime_context().was_current_actor_reconstructed)
        if restarted and known_new:
            log.warning("ingest writer restarted after its process died: it upserts its blocks "
                        "(a retried block may be stored in part)")
        self.known_new = known_new and not restarted

    def __call__(self, batch: Batch) -> Batch:
        pairs, out = batch_to_pairs(batch), WriteOutcome()
        for start in range(0, len(pairs), self.batch_size):
            stop = start + self.batch_size
            out.add(write_pairs(self.store, pairs[start:stop], batch["vector"][start:stop],
                                known_new=self.known_new))
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
    stored never starts it); without it, Ray must already be initialized. A store that does not
    exist yet (a new Milvus Lite file) holds nothing to skip: the plan only drops repeats, and
    the store is created in a thread while the actors start instead of before them.
    """
    check_ingest_config(cfg)
    started = time.perf_counter()
    dim = embedding_dim(cfg.embedder, model_folder(cfg.embedder, cfg.assets.cache_dir))
    new_store = store_is_new(cfg.memory.uri)
    lookups = cfg.skip_existing and not new_store
    with ExitStack() as stack:
        store = stack.enter_context(build.store(cfg.memory, dim)) if lookups else None
        # An empty store has nothing to skip: one count instead of a lookup per user.
        has_rows = store is not None and store.count() > 0
        plan = plan_ingest(pairs, store.existing_ids if has_rows else None)
        log.info(
            "ingest plan: %d read, %d new, %d already stored, %d duplicates, %d users",
            plan.read, len(plan.new), plan.skipped, plan.duplicates, plan.users,
        )
        result = PipelineResult(WriteOutcome(), 0.0, None)
        if plan.new:
            if ensure_ray is not None:
                # A new store opens only after this: ray.init forks, and forking while Milvus
                # Lite's gRPC threads run has killed Ray's dashboard here (SIGABRT).
                ensure_ray()
            opening: Future = Future()
            if store is None:  # nothing to look up: the store is created while actors start
                pool = stack.enter_context(ThreadPoolExecutor(1))
                opening = pool.submit(build.store, cfg.memory, dim)
                stack.callback(_close_when_opened, opening)
            else:
                opening.set_result(store)
            # The plan's pairs are known not to be stored when it looked them up (or the store
            # is new): they are inserted, which on a 2.3 server keeps a bulk load at full speed.
            result = run_pipeline(plan.new, cfg, dim=dim, store=opening.result,
                                  known_new=lookups or new_store)
            opening.result().flush()  # unflushed Milvus Lite searches are 20-50x slower
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
    pairs: Sequence[TurnPair], cfg: IngestConfig, *, dim: int, store: Callable[[], Any],
    known_new: bool = False,
) -> PipelineResult:
    """Embed ``pairs`` on the actor pool and write them; ``store()`` returns the driver's
    writer (waiting for it to open, if it is still opening), asked for at the first write.
    ``known_new``: no pair is stored yet, so the writes are inserts, not upserts."""
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
        planned = {p.id: p for p in pairs}
        stream = _write_stream(embedded(pairs, cfg, dim), cfg, dim, store, planned, known_new)
        for written, errors, messages in stream:
            if first is None:
                first = time.perf_counter() - started
            outcome.add(WriteOutcome(written, errors, messages))
            bar.update(written + errors)
    finally:
        bar.close()
    return PipelineResult(outcome, time.perf_counter() - started, first)


def embedded(pairs: Sequence[TurnPair], cfg: IngestConfig, dim: int) -> Any:
    """The lazy dataset of rows with their ``vector`` column (blocks -> embed).

    Writes from the driver need only ``id`` and ``vector`` back; writer actors get every column.
    """
    import ray

    keep = write_mode(cfg) != "driver"
    # Similar lengths per block pad less; rows are matched to their pair by id, not position.
    rows = pairs_to_rows(longest_first(pairs), ROW_FIELDS if keep else SLIM_FIELDS)
    # from_items cuts even blocks and reads their metadata in the driver (from_arrow would run
    # a remote task per block for it: more worker processes while the actors start). Each
    # block is one embedding call: batch_size=None below hands it to an actor whole (an int
    # batch_size bundles a block a row short of it with the next one, so calls would carry
    # two blocks and the first rows would come back twice as late).
    ds = ray.data.from_items(rows, override_num_blocks=num_blocks(cfg, len(rows)))
    return ds.map_batches(
        EmbedBatch,
        fn_constructor_kwargs={
            "embedder": cfg.embedder,
            "assets": cfg.assets,
            "dim": dim,
            "torch_threads": actor_threads(cfg),
            "keep_columns": keep,
        },
        batch_size=None,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=cfg.embed.concurrency),
        num_cpus=cfg.embed.num_cpus,
        num_gpus=cfg.embed.num_gpus,
    )


def _write_stream(
    ds: Any,
    cfg: IngestConfig,
    dim: int,
    store: Callable[[], Any],
    planned: Mapping[int, TurnPair],
    known_new: bool,
) -> Iterator[tuple[int, int, list[str]]]:
    """(written, errors, messages) per written batch, from the driver or from writer actors.

    Embedded blocks are taken as they arrive (``batch_size=None``), each written in upserts of
    at most ``write.batch_size`` rows: no block waits for the next to fill a write batch.
    """
    if write_mode(cfg) == "driver":
        step = cfg.write.batch_size
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            ids, vectors = batch["id"], batch["vector"]
            for start in range(0, len(ids), step):
                pairs = pairs_for_ids(ids[start : start + step], planned)
                out = write_pairs(store(), pairs, vectors[start : start + step],
                                  known_new=known_new)
                yield out.written, out.errors, out.messages
        return
    import ray

    counts = ds.map_batches(
        WriteBatch,
        fn_constructor_kwargs={
            "memory": cfg.memory,
            "dim": dim,
            "batch_size": cfg.write.batch_size,
            "known_new": known_new,
        },
        batch_size=None,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=cfg.write.concurrency),
        num_cpus=cfg.write.num_cpus,
        max_restarts=WRITER_RESTARTS,
        max_task_retries=WRITER_RESTARTS,
    )
    for batch in counts.iter_batches(batch_size=None, batch_format="numpy"):
        for written, errors, messages in zip(batch["written"], batch["errors"], batch["messages"]):
            yield int(written), int(errors), [m for m in str(messages).split("\n") if m]


def _close_when_opened(opening: Future) -> None:
    if opening.exception() is None:  # waits for the open; a failed open has nothing to close
        opening.result().close()


def _check_cluster_fits(cfg: IngestConfig) -> None:
    import ray

    total = ray.cluster_resources()
    try:
        check_fits(cfg, total.get("CPU", 0.0), total.get("GPU", 0.0))
    except ConfigError as exc:
        if cfg.ray.address is None:  # a local node never grows: waiting would hang forever
            raise
        log.warning("%s (waiting for the cluster to scale up)", exc.message)
