"""Ingest settings checked before any work starts, and the resources the pipeline asks for.

On a small cluster an actor pool that asks for more CPUs than exist does not fail: Ray Data
waits for them forever. So the demand is computed here and compared with the cluster's.
"""

from __future__ import annotations

import math

from memroute.config import IngestConfig
from memroute.errors import ConfigError
from memroute.config.schema import is_server_uri

WRITE_MODES = ("auto", "driver", "actors")
MAX_BLOCKS = 1000


def check_ingest_config(cfg: IngestConfig) -> None:
    """Raise :class:`ConfigError` naming the first bad setting."""
    e, w = cfg.embed, cfg.write
    _at_least(e.concurrency, 1, "embed.concurrency")
    _at_least(e.batch_size, 1, "embed.batch_size")
    _at_least(e.num_cpus, 0, "embed.num_cpus")
    _at_least(e.num_gpus, 0, "embed.num_gpus")
    if e.torch_threads is not None:
        _at_least(e.torch_threads, 1, "embed.torch_threads")
    if w.mode not in WRITE_MODES:
        raise ConfigError(
            f"Unknown write.mode {w.mode!r}. Available: {', '.join(WRITE_MODES)}",
            field="write.mode",
        )
    _at_least(w.batch_size, 1, "write.batch_size")
    _at_least(w.concurrency, 1, "write.concurrency")
    _at_least(w.num_cpus, 0, "write.num_cpus")
    if cfg.num_blocks is not None:
        _at_least(cfg.num_blocks, 1, "num_blocks")
    _at_least(cfg.max_errors, 0, "max_errors")
    if cfg.ray.num_cpus is not None:
        _at_least(cfg.ray.num_cpus, 1, "ray.num_cpus")
    if e.num_gpus > 0 and cfg.embedder.device == "cpu":
        raise ConfigError(
            "embed.num_gpus > 0 but embedder.device is 'cpu': set embedder.device=cuda",
            field="embedder.device",
        )
    if w.mode == "actors" and not is_server_uri(cfg.memory.uri):
        raise ConfigError(
            f"write.mode=actors needs a Milvus server URI, but memory.uri {cfg.memory.uri!r} is a "
            "Milvus Lite file, which one process at a time may open: use write.mode=driver (or "
            "auto), or serve the file with `milvus-lite server --host 127.0.0.1`",
            field="write.mode",
        )


def write_mode(cfg: IngestConfig) -> str:
    """``driver`` (one writer: the only choice for a Milvus Lite file) or ``actors``."""
    if cfg.write.mode != "auto":
        return cfg.write.mode
    return "actors" if is_server_uri(cfg.memory.uri) else "driver"


def resource_demand(cfg: IngestConfig) -> tuple[float, float]:
    """(CPUs, GPUs) the actor pools hold while the pipeline runs."""
    cpus = cfg.embed.concurrency * cfg.embed.num_cpus
    if write_mode(cfg) == "actors":
        cpus += cfg.write.concurrency * cfg.write.num_cpus
    return cpus, cfg.embed.concurrency * cfg.embed.num_gpus


def check_fits(cfg: IngestConfig, cpus: float, gpus: float) -> None:
    """Raise :class:`ConfigError` if the actor pools cannot all be placed on ``cpus``/``gpus``."""
    need_cpus, need_gpus = resource_demand(cfg)
    eps = 1e-9
    if need_cpus > cpus + eps:
        raise ConfigError(
            f"the ingest actors need {need_cpus:g} CPUs (embed {cfg.embed.concurrency} x "
            f"{cfg.embed.num_cpus:g}"
            + (
                f" + write {cfg.write.concurrency} x {cfg.write.num_cpus:g}"
                if write_mode(cfg) == "actors"
                else ""
            )
            + f") but Ray has {cpus:g}: lower embed.concurrency / embed.num_cpus "
            "(Ray Data would wait for them forever)",
            field="embed.concurrency",
        )
    if need_gpus > gpus + eps:
        raise ConfigError(
            f"the embedding actors need {need_gpus:g} GPUs ({cfg.embed.concurrency} x "
            f"{cfg.embed.num_gpus:g}) but Ray has {gpus:g}: lower embed.num_gpus or "
            "embed.concurrency",
            field="embed.num_gpus",
        )


def actor_threads(cfg: IngestConfig) -> int:
    """torch threads per embedding actor: the configured number, else its whole CPUs (>= 1)."""
    if cfg.embed.torch_threads is not None:
        return cfg.embed.torch_threads
    return max(1, math.floor(cfg.embed.num_cpus))


def num_blocks(cfg: IngestConfig, rows: int) -> int:
    """Input blocks, each one embedding call: the configured number, else one per
    ``embed.batch_size`` rows (at least one per actor, so none idles). Ray's default for
    ``from_items`` is ~200 tiny blocks, which costs seconds of scheduling for a few hundred
    rows; blocks of ``batch_size`` rows handed to ``map_batches(batch_size=...)`` are worse:
    a block a row short of a batch waits for the next one, so calls carry two blocks and the
    first rows come back twice as late."""
    if rows < 1:
        return 1
    if cfg.num_blocks is not None:
        return min(cfg.num_blocks, rows)
    wanted = max(cfg.embed.concurrency, math.ceil(rows / cfg.embed.batch_size))
    return max(1, min(wanted, rows, MAX_BLOCKS))


def _at_least(value: float, minimum: float, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
        raise ConfigError(f"{field} must be >= {minimum}, got {value!r}", field=field)
