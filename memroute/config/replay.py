"""Schema of the replay job (conf/replay.yaml): a recorded trace through memroute and baselines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from memroute.config.extraction import ExtractionConfig, check_extraction_config
from memroute.config.schema import PartsConfig, RayConfig, TrackingConfig, check_parts
from memroute.config.summary import SummaryConfig, check_summary_config
from memroute.errors import ConfigError

DEFAULT_STRATEGIES = ["memroute", "always_large", "always_small", "cascade_no_memory", "semantic_cache"]


@dataclass
class ReplayConfig(PartsConfig):
    """The benchmark's parts (embedder, memory, retrieval, cascade, router, assets), inherited,
    driven by a trace instead of a dataset."""

    trace: Optional[str] = None  # a trace file (docs/TRACES.md): .jsonl or .parquet
    target: str = "inprocess"  # inprocess | http://127.0.0.1:8000 (a running memroute endpoint)
    strategies: list[str] = field(default_factory=lambda: list(DEFAULT_STRATEGIES))
    concurrency: int = 8  # users in flight at once (a user's requests stay in order)
    limit: Optional[int] = None  # replay only the first N requests
    window: int = 200  # report window, in requests
    # Each request carries its session's earlier turns (the questions and the strategy's own
    # answers) as chat history, as a chat client sends them; off: the question alone. Not kept
    # across a resumed run.
    session_history: bool = False
    cache_threshold: float = 0.9  # semantic_cache: cosine at or above which a past answer is reused
    # memroute, in-process: every tier also answers alone on this share of the requests that have
    # a reference (shadow.jsonl), for `python -m jobs.calibrate` and the confidently-wrong rate.
    shadow_share: float = 0.0
    run_id: Optional[str] = None  # resume this run (its folder under output_dir)
    # Start memroute's memory from recorded history: a trace of answered turns (the ingest job's
    # `traces` format), bulk-loaded by the Ray Data ingest pipeline before the replay.
    warm_from: Optional[str] = None
    output_dir: str = ".memroute/replays"
    api_key_env: str = "MEMROUTE_API_KEY"  # http target: env var holding the API key
    http_timeout_s: float = 300.0
    # http target: users sharded across this many Ray tasks (many clients against an autoscaled
    # Serve app; its replica counts are sampled into replicas.csv). 1: threads in this process.
    shards: int = 1
    # sharded replay: keep sampling the replicas up to this long after the last answer, until
    # every deployment is back at its starting count (to see the scale-down too).
    watch_after_s: float = 0.0
    ray: RayConfig = field(default_factory=RayConfig)
    volumes: dict[str, int] = field(default_factory=dict)  # monthly projection; empty: defaults
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    # memroute_facts: the served fact extraction (threshold, schema, keys), by extraction.tier
    extraction: ExtractionConfig = field(default_factory=ExtractionConfig)
    # memroute_summary: the compacting summary tree instead of the turn-pairs (config/summary.py)
    summary: SummaryConfig = field(default_factory=SummaryConfig)


def check_replay_config(cfg: ReplayConfig) -> ReplayConfig:
    """Refuse what cannot run, naming the field, before any model loads."""
    check_parts(cfg)
    if not cfg.trace and not cfg.run_id:
        raise ConfigError("set trace=<file> (a .jsonl or .parquet trace), or run_id=<run> to resume",
                          field="trace")
    if not (cfg.target == "inprocess" or cfg.target.startswith(("http://", "https://"))):
        raise ConfigError(f"target must be inprocess or an http(s):// URL, got {cfg.target!r}",
                          field="target")
    for name, value, low in (("concurrency", cfg.concurrency, 1), ("window", cfg.window, 1),
                             ("shards", cfg.shards, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}", field=name)
    if cfg.watch_after_s < 0:
        raise ConfigError(f"watch_after_s must be >= 0, got {cfg.watch_after_s}", field="watch_after_s")
    if cfg.limit is not None and cfg.limit < 1:
        raise ConfigError(f"limit must be >= 1, got {cfg.limit}", field="limit")
    if not 0.0 < cfg.cache_threshold <= 1.0:
        raise ConfigError(f"cache_threshold must be in (0, 1], got {cfg.cache_threshold}",
                          field="cache_threshold")
    if not 0.0 <= cfg.shadow_share <= 1.0:
        raise ConfigError(f"shadow_share must be in [0, 1], got {cfg.shadow_share}", field="shadow_share")
    if cfg.shadow_share and cfg.target != "inprocess":
        raise ConfigError("shadow_share needs target=inprocess (every tier is called directly)",
                          field="shadow_share")
    if not cfg.strategies:
        raise ConfigError("strategies is empty: name at least one (memroute, always_large, ...)",
                          field="strategies")
    check_extraction_config(cfg.extraction)
    if "memroute_facts" in cfg.strategies and cfg.extraction.tier >= len(cfg.cascade):
        raise ConfigError(f"extraction.tier {cfg.extraction.tier} is not a tier of the "
                          f"{len(cfg.cascade)}-tier cascade", field="extraction.tier")
    if "memroute_summary" in cfg.strategies:
        check_summary_config(cfg.summary, len(cfg.cascade))
    if cfg.target != "inprocess" and cfg.strategies != ["memroute"]:
        raise ConfigError("an http target replays the endpoint itself: set strategies=[memroute] "
                          "(baselines run in-process)", field="strategies")
    if cfg.shards > 1 and cfg.target == "inprocess":
        raise ConfigError("shards > 1 shards an http replay across Ray tasks: set target=http://...",
                          field="shards")
    if cfg.warm_from and (cfg.target != "inprocess" or "memroute" not in cfg.strategies):
        raise ConfigError("warm_from loads memroute's in-process memory: needs target=inprocess "
                          "and memroute among the strategies", field="warm_from")
    for name, n in cfg.volumes.items():
        if n < 0:
            raise ConfigError(f"volumes.{name} must be >= 0, got {n}", field=f"volumes.{name}")
    return cfg
