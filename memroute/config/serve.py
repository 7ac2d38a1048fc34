"""Typed configuration of the routed endpoint (``serve/``, ``python -m jobs.serve``).

The cascade is the benchmark's: ``cascade``, keyed "0", "1", ... cheapest first, each slot a
``ModelConfig`` filled from the model group (``model@cascade.0: smollm2-135m``). How each tier is
hosted (replica CPUs/GPUs, autoscaling, batching) is ``deploy``, keyed the same way; a slot with
no ``deploy`` entry gets the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from memroute.config.accelerator_fit import AcceleratorConfig, check_accelerator_fit
from memroute.config.api import ApiConfig, check_api_config
from memroute.config.extraction import ExtractionConfig, check_extraction_config
from memroute.config.facts import FactsConfig, check_facts_config
from memroute.config.journal import JournalConfig, check_journal_config
from memroute.config.schema import (
    ModelConfig,
    PartsConfig,
    RayConfig,
    check_model_paths,
    check_parts,
    is_server_uri,
    ordered_cascade,
)
from memroute.config.search import SearchConfig, check_search_config
from memroute.config.units import UnitsConfig, check_units_config
from memroute.errors import ConfigError


@dataclass
class AutoscalingConfig:
    """Ray Serve ``autoscaling_config`` of one deployment."""

    min_replicas: int = 1
    max_replicas: int = 1
    target_ongoing_requests: float = 2.0
    upscale_delay_s: float = 3.0
    downscale_delay_s: float = 60.0
    look_back_period_s: float = 30.0  # the window the ongoing requests are averaged over

    def to_ray(self) -> dict[str, Any]:
        return {
            "min_replicas": self.min_replicas,
            "max_replicas": self.max_replicas,
            "target_ongoing_requests": self.target_ongoing_requests,
            "upscale_delay_s": self.upscale_delay_s,
            "downscale_delay_s": self.downscale_delay_s,
            "look_back_period_s": self.look_back_period_s,
        }


@dataclass
class TierDeployConfig:
    """How one cascade tier is hosted: the resources of each replica, autoscaling and batching."""

    num_cpus: float = 1.0
    num_gpus: float = 0.0  # fractional on a shared GPU (0.15 + 0.8 for an 8B and a 235B-AWQ)
    autoscaling: AutoscalingConfig = field(default_factory=AutoscalingConfig)
    max_ongoing_requests: int = 32
    # Concurrent calls are merged into one engine batch (Serve's dynamic batching).
    max_batch_size: int = 16
    batch_wait_timeout_s: float = 0.01


@dataclass
class IngressConfig:
    """The FastAPI router deployment: embeds, retrieves, journals and drives the cascade."""

    num_cpus: float = 1.0
    autoscaling: AutoscalingConfig = field(default_factory=AutoscalingConfig)
    max_ongoing_requests: int = 64
    # Requests arriving together are routed as one batch (one embedding call, one engine call per tier).
    max_batch_size: int = 16
    batch_wait_timeout_s: float = 0.005
    # Batches routed at once. 1 keeps batches large (best on few cores); more lets a tier see
    # several calls in flight, which is what its autoscaler counts (max_ongoing_requests must
    # be >= max_batch_size * max_concurrent_batches).
    max_concurrent_batches: int = 1
    store_flush_interval_s: float = 1.0  # Milvus flush after journal writes (searches stay fast)
    # A tier call (one engine batch) that takes longer counts as the tier being down for it:
    # the request escalates past it. Generous: a CPU engine's batch of long answers is slow.
    tier_timeout_s: float = 300.0


@dataclass
class ShadowConfig:
    """A live confidently-wrong estimate (memroute/serving/shadow.py): on this share of the
    requests a cheaper tier answered, the last tier answers the same prompt off the request path,
    and an F1 between the two answers under ``disagree_below`` counts as confidently wrong."""

    share: float = 0.0  # 0: off. Each sample costs one last-tier call.
    disagree_below: float = 0.5
    queue_size: int = 64  # samples waiting for the last tier; more are dropped, never waited for
    seed: int = 0


@dataclass
class HttpConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    allow_public_bind: bool = False  # listening beyond loopback must be asked for explicitly


@dataclass
class ServeConfig(PartsConfig):
    """The parts (embedder, memory, retrieval, cascade, router, assets) as the benchmark's,
    plus how they are hosted and what the endpoint adds around them."""

    name: str = "memroute"
    route_prefix: str = "/"
    http: HttpConfig = field(default_factory=HttpConfig)
    ingress: IngressConfig = field(default_factory=IngressConfig)
    shadow: ShadowConfig = field(default_factory=ShadowConfig)
    deploy: dict[str, TierDeployConfig] = field(default_factory=dict)  # hosting of cascade slots
    accelerator: AcceleratorConfig = field(default_factory=AcceleratorConfig)  # GPU presets set it
    journal: JournalConfig = field(default_factory=JournalConfig)
    # url "" (the default): a SQLite file beside the journal (served_facts_config)
    facts: FactsConfig = field(default_factory=lambda: FactsConfig(url=""))
    # facts from conversation, by the first tier, in the background (memory/facts/lane.py)
    extraction: ExtractionConfig = field(default_factory=ExtractionConfig)
    # atomic context units from extraction, in Milvus beside the turn-pairs (memory/units.py)
    units: UnitsConfig = field(default_factory=UnitsConfig)
    # POST /v1/memory/search: facts, units and turns in one ranking (memory/search.py)
    search: SearchConfig = field(default_factory=SearchConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    blocking: bool = True  # jobs.serve: keep serving until Ctrl-C (False: deploy and return)


@dataclass(frozen=True)
class ServedTier:
    """A cascade slot as the Serve app hosts it: the model and its deployment settings."""

    index: int
    model: ModelConfig
    deploy: TierDeployConfig


def served_tiers(cfg: ServeConfig) -> list[ServedTier]:
    """The cascade in order, each model with its ``deploy`` entry (defaults where there is none)."""
    models = ordered_cascade(cfg.cascade)
    unknown = sorted(set(cfg.deploy) - {str(i) for i in range(len(models))})
    if unknown:
        raise ConfigError(
            f"deploy.{unknown[0]} has no cascade slot (cascade has {len(models)} tiers: "
            f"0..{len(models) - 1})",
            field=f"deploy.{unknown[0]}",
        )
    return [ServedTier(i, m, cfg.deploy.get(str(i), TierDeployConfig())) for i, m in enumerate(models)]


def with_absolute_paths(cfg: ServeConfig) -> ServeConfig:
    """Relative file paths (journal, Milvus Lite) made absolute where the config is written:
    Ray replicas do not share the driver's working directory."""
    from dataclasses import replace
    from pathlib import Path

    def absolute(path: str) -> str:
        return str(Path(path).expanduser().resolve())

    memory = cfg.memory if is_server_uri(cfg.memory.uri) else replace(cfg.memory, uri=absolute(cfg.memory.uri))
    return replace(cfg, memory=memory, journal=replace(cfg.journal, path=absolute(cfg.journal.path)))


def served_facts_config(cfg: ServeConfig) -> FactsConfig:
    """``cfg.facts`` with its URL resolved: empty means ``facts.sqlite3`` beside the journal
    (the embedded default: one directory holds the app's durable state)."""
    if cfg.facts.url:
        return cfg.facts
    from pathlib import Path

    return replace(cfg.facts, url=f"sqlite:///{Path(cfg.journal.path).parent / 'facts.sqlite3'}")


def check_serve_config(cfg: ServeConfig) -> ServeConfig:
    """Refuse configurations that cannot work, naming the field, before anything starts."""
    check_parts(cfg)
    tiers = served_tiers(cfg)
    check_api_config(cfg.api)
    check_journal_config(cfg.journal)
    check_facts_config(served_facts_config(cfg))
    check_extraction_config(cfg.extraction)
    if cfg.extraction.enabled and cfg.extraction.tier >= len(tiers):
        raise ConfigError(f"extraction.tier {cfg.extraction.tier} is not a tier of the "
                          f"{len(tiers)}-tier cascade", field="extraction.tier")
    check_units_config(cfg.units)
    check_search_config(cfg.search)
    if cfg.http.host not in ("127.0.0.1", "localhost", "::1") and not cfg.http.allow_public_bind:
        raise ConfigError(
            f"http.host {cfg.http.host!r} is not a loopback address; set http.allow_public_bind=true "
            "to listen on other interfaces on purpose",
            field="http.host",
        )
    if not 0 < cfg.http.port < 65536:
        raise ConfigError(f"http.port must be 1-65535, got {cfg.http.port}", field="http.port")
    # Milvus Lite is a file one process may open: a single ingress replica is the only writer.
    if not is_server_uri(cfg.memory.uri) and cfg.ingress.autoscaling.max_replicas > 1:
        raise ConfigError(
            "Milvus Lite (a local file) allows one process: keep ingress.autoscaling.max_replicas=1 "
            "or point memory.uri at a Milvus server",
            field="ingress.autoscaling.max_replicas",
        )
    # Several replicas keep their cached memories true through the shared journal
    # (JournaledRetriever._revalidate); separate SQLite journals could not see each other.
    if (cfg.retrieval.hot_vectors and cfg.ingress.autoscaling.max_replicas > 1
            and not cfg.journal.url):
        raise ConfigError(
            "retrieval.hot_vectors with several ingress replicas needs the shared journal "
            "(journal.url=postgresql://...): a replica learns of another's writes from it",
            field="retrieval.hot_vectors",
        )
    check_model_paths(cfg)  # each replica loads its folder: refused once here, not in each
    for tier in tiers:
        d, where = tier.deploy, f"deploy.{tier.index}"
        _check_autoscaling(d.autoscaling, f"{where}.autoscaling")
        if d.num_cpus < 0 or d.num_gpus < 0:
            raise ConfigError("num_cpus and num_gpus must be >= 0", field=f"{where}.num_cpus")
        if d.max_batch_size < 1:
            raise ConfigError("max_batch_size must be >= 1", field=f"{where}.max_batch_size")
    check_accelerator_fit(cfg.accelerator, tiers)  # after num_gpus >= 0 is known
    _check_autoscaling(cfg.ingress.autoscaling, "ingress.autoscaling")
    sh = cfg.shadow
    if not 0.0 <= sh.share <= 1.0:
        raise ConfigError(f"shadow.share must be in [0, 1], got {sh.share}", field="shadow.share")
    if not 0.0 < sh.disagree_below <= 1.0:
        raise ConfigError(f"shadow.disagree_below must be in (0, 1], got {sh.disagree_below}",
                          field="shadow.disagree_below")
    if sh.queue_size < 1:
        raise ConfigError("shadow.queue_size must be >= 1", field="shadow.queue_size")
    ing = cfg.ingress
    if ing.max_batch_size < 1:
        raise ConfigError("max_batch_size must be >= 1", field="ingress.max_batch_size")
    if ing.max_concurrent_batches < 1:
        raise ConfigError("max_concurrent_batches must be >= 1", field="ingress.max_concurrent_batches")
    if not ing.tier_timeout_s > 0:
        raise ConfigError(f"ingress.tier_timeout_s must be > 0, got {ing.tier_timeout_s}",
                          field="ingress.tier_timeout_s")
    if ing.max_ongoing_requests < ing.max_batch_size * ing.max_concurrent_batches:
        raise ConfigError(
            f"ingress.max_ongoing_requests ({ing.max_ongoing_requests}) must be >= max_batch_size x "
            f"max_concurrent_batches ({ing.max_batch_size} x {ing.max_concurrent_batches}), or batches never fill",
            field="ingress.max_ongoing_requests",
        )
    return cfg


def _check_autoscaling(a: AutoscalingConfig, field_name: str) -> None:
    if a.min_replicas < 0 or a.max_replicas < max(1, a.min_replicas):
        raise ConfigError(
            f"need 0 <= min_replicas <= max_replicas and max_replicas >= 1, got {a.min_replicas}/{a.max_replicas}",
            field=f"{field_name}.max_replicas",
        )
    if a.target_ongoing_requests <= 0:
        raise ConfigError("target_ongoing_requests must be > 0", field=f"{field_name}.target_ongoing_requests")
    if a.look_back_period_s <= 0:
        raise ConfigError("look_back_period_s must be > 0", field=f"{field_name}.look_back_period_s")

