"""Typed configuration: one dataclass per Hydra config group.

Hydra composes YAML against these schemas (so a typo fails at compose time); jobs convert
the composed config once with :func:`memroute.config.to_object` and pass typed objects on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from memroute.config.fact_layer import FactLayerConfig
from memroute.config.router import RouterConfig
from memroute.config.summary import SummaryConfig, check_summary_config
from memroute.errors import ConfigError


@dataclass
class AssetsConfig:
    cache_dir: Optional[str] = None  # default: $MEMROUTE_CACHE_DIR or ~/.cache/memroute
    pip: Optional[str] = None  # pip command for downloading wheels (default: this interpreter -m pip)


@dataclass
class EmbedderConfig:
    name: str = "minilm-l6"  # an asset name, or any sentence-transformers folder via `path`
    path: Optional[str] = None  # explicit folder; overrides the asset lookup
    dim: Optional[int] = None  # Matryoshka truncation (None = full width)
    batch_size: int = 64
    device: str = "cpu"
    num_threads: Optional[int] = None
    # a folder: vectors cached by text hash (embedding/vector_cache.py), so re-runs embed nothing
    vector_cache: Optional[str] = None


@dataclass
class MemoryConfig:
    uri: str = ".memroute/milvus.db"  # Milvus Lite file, or http://host:19530 for a server
    token: str = ""
    collection: str = "memroute_turns"
    index_type: str = "FLAT"  # FLAT | IVF_FLAT | HNSW | AUTOINDEX
    metric: str = "COSINE"
    num_partitions: int = 16  # partition-key buckets
    # Milvus' own BM25: analyzed text + a BM25 function into a sparse field (Milvus >= 2.5, Lite 3)
    bm25_function: bool = False
    # Milvus calls fail after this instead of hanging with the server: reads (on the request
    # path: its answer then comes without memory, flagged) and upserts/flushes (the flusher's).
    timeout_s: float = 3.0
    write_timeout_s: float = 30.0
    # A server's request-path reads (searches, a user's rows): Strong waits for the next time
    # tick, ~200 ms a read; Session sees this process's writes at once (another replica's
    # through journal.visible_after_s). Strong | Session | Bounded | Eventually. Lite: unused.
    read_consistency: str = "Session"


# URI prefixes of a Milvus server; anything else is a Milvus Lite file path. The one test of it.
SERVER_URI_PREFIXES = ("http://", "https://", "tcp://", "grpc://", "unix:")


def is_server_uri(uri: str) -> bool:
    """True for a Milvus server (``http://host:19530``, ``unix:/run/milvus.sock``), False for a
    Milvus Lite file (``.memroute/milvus.db``)."""
    return uri.startswith(SERVER_URI_PREFIXES)


@dataclass
class RetrievalConfig:
    strategy: str = "hybrid"  # dense | bm25 | hybrid
    # weighted: best on LoCoMo with MiniLM (R@5 0.74 on 9 conversations vs rrf 0.67; docs/BENCHMARKS.md)
    fusion: str = "weighted"  # rrf | weighted | bm25_dominant
    top_k: int = 5
    candidate_k: int = 50  # per leg, before fusion
    rrf_k: int = 60
    # weighted: alpha * dense + (1 - alpha) * bm25, each leg normalized by score_norm over its
    # candidates. zscore (alpha 0.45): LoCoMo R@5 0.747 on 9 conversations and 0.88 on the generated
    # LongMemEval set, where minmax (alpha 0.4) gave 0.740 and 0.82 (docs/BENCHMARKS.md).
    alpha: float = 0.45
    score_norm: str = "zscore"  # zscore | minmax
    bm25_k1: float = 1.5
    bm25_b: float = 0.75
    bm25_backend: str = "inprocess"  # inprocess | milvus (needs memory.bm25_function)
    # inprocess: the per-user BM25 indexes' memory cap, least recently used evicted (0: none;
    # ~10 MB per 1,000 memories of 40 words, mostly the term sets); also bounded to 256 users
    bm25_cache_mb: float = 512.0
    # the dense leg in process: each cached user's vectors beside their BM25 index, read in the
    # same round trip, under the same cap (retrieval/hot_vectors.py); Milvus stays the truth
    hot_vectors: bool = False
    ngram: int = 1  # word n-grams added to BM25 tokens (1 = unigrams: better recall, stemmed)
    dominant_overlap: float = 0.5  # bm25_dominant: promote sparse hits above this query-term overlap
    stem: bool = True  # Snowball-stem BM25 words (query and memories alike)
    # Dense leg: leave out query words found in at least this share of the user's memories (the
    # speakers' names, the user's own handle); 1.0 keeps every word. Needs the in-process BM25 stats.
    query_focus: float = 0.5
    # Hybrid: a candidate gains context_weight x the best fused score of its neighbour turn-pairs
    # in the same session (evidence often spans adjacent pairs); 0 turns it off.
    context_weight: float = 0.5
    # Hybrid: rerank the fused top rerank_depth by z(fused) + rerank_weight * z(MaxSim of the
    # encoder's token vectors); "none" (default) or "maxsim" (+~260 ms per query on 2 CPU cores).
    rerank: str = "none"
    rerank_depth: int = 20
    rerank_weight: float = 0.7
    token_budget: int = 1024  # injected-memory tokens for escalation tiers
    probe_token_budget: int = 512  # injected-memory tokens for the first (probe) tier
    # Inside a conversation: auto adds the names a follow-up refers to ("when did she start?")
    # from the preceding user turn (LoCoMo follow-ups R@5 0.754 -> 0.761; docs/BENCHMARKS.md);
    # always: the preceding user turn (0.650: it imports the old topic); never: the turn alone.
    followup: str = "auto"
    # auto: a question's date expression ("in May 2023", "last month", "two weeks ago", relative to
    # the question time) restricts both legs to memories of that session time, topped up from the
    # unfiltered ranking when fewer than top_k lie in it (memroute.retrieval.temporal); off: never.
    temporal: str = "auto"
    # A stored turn-pair that changes a value the user stated before ("I changed my locker code,
    # it's QT-8812 now") marks the older pairs holding the old value superseded (never deleted;
    # memroute.memory.supersession: change cue + shared subject + a differing value of the same
    # kind). superseded: exclude (never retrieved) | rank_below (after every current memory).
    supersede: bool = True
    superseded: str = "exclude"
    # ...and by meaning: a change statement worded apart from the one it replaces (rule 5: the
    # embedder's most similar older statement, when it stands out; +1 encoder call per update)
    supersede_by_meaning: bool = True
    # A question none of whose memories reaches this cosine (hybrid: and none shares a word with
    # it) gets none; it is about nothing the user said ("What is 89 hours in minutes?"), and
    # memories in its prompt would be paid for and unread. A turn that asks nothing keeps them
    # (memroute/text/turn_kind.py). The scale is the encoder's.
    min_similarity: float = 0.0


@dataclass
class ModelConfig:
    name: str = "qwen2.5-0.5b"
    engine: str = "vllm"  # vllm | transformers | openai_http | mock
    asset: Optional[str] = None  # named offline asset (memroute.assets.store)
    path: Optional[str] = None  # explicit model folder / HF id on a machine that has it
    params_b: float = 0.5  # parameters in billions: EffCost's P
    price_as_params_b: Optional[float] = None  # price measured tokens as another model's P
    usd_per_m_input: float = 0.0
    usd_per_m_output: float = 0.0
    # share of an input token's price (EffCost and USD) a prefix-cache hit saves: 0 = none,
    # 0.9 = cached input at a tenth of the price (production price lists: 0.5-0.9)
    cached_input_discount: float = 0.0
    max_model_len: int = 4096
    dtype: str = "auto"  # vLLM: on a CPU bfloat16 only with native bf16 (AVX512-BF16/AMX), else float32
    base_url: Optional[str] = None  # openai_http
    api_key_env: Optional[str] = None  # openai_http: env var holding the key
    served_model: Optional[str] = None  # openai_http: model name on the server
    engine_args: dict[str, Any] = field(default_factory=dict)  # passed to the engine as is
    # Architecture facts for the accelerator fit check (config/accelerator_fit.py), from the
    # model's published config.json; None: that model is not checked.
    num_layers: Optional[int] = None  # noqa: UP045
    num_kv_heads: Optional[int] = None  # noqa: UP045  GQA: fewer than the attention heads
    head_dim: Optional[int] = None  # noqa: UP045
    weight_bits: Optional[int] = None  # noqa: UP045  16 bf16, 8 fp8, 4 AWQ/GPTQ int4
    # Parameters the weights hold when params_b is EffCost's rounded P (Qwen3-8B: P 8, 8.2B
    # weights); None: params_b. Only the fit check reads it, so prices stay as they were.
    weight_params_b: Optional[float] = None  # noqa: UP045


def ordered_cascade(cascade: dict[str, ModelConfig], *, field: str = "cascade") -> list[ModelConfig]:
    """Cascade slots "0", "1", ... in order, cheapest first; one definition for the benchmark, the
    Serve app and the replay. Empty, non-numeric or gapped keys fail naming ``field``."""
    if not cascade:
        raise ConfigError(f"the cascade is empty: set model@{field}.0 (and .1, ...)", field=field)
    try:
        keys = sorted(cascade, key=int)
    except ValueError:
        raise ConfigError(f"{field} keys must be 0, 1, ...; got {sorted(cascade)}", field=field) from None
    if [int(k) for k in keys] != list(range(len(keys))):
        raise ConfigError(f"{field} keys must be 0..{len(keys) - 1} without gaps; got {keys}", field=field)
    return [cascade[k] for k in keys]


@dataclass
class PartsConfig:
    """What the benchmark, the Serve app and the replay are built from (``build.py``): one
    schema they inherit, so the keys stay flat (``router.tau=0.7``, ``model@cascade.0=...``)
    and :func:`check_parts` refuses a bad part the same way in all three."""

    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    cascade: dict[str, ModelConfig] = field(default_factory=dict)  # "0", "1", ... cheapest first
    router: RouterConfig = field(default_factory=RouterConfig)
    assets: AssetsConfig = field(default_factory=AssetsConfig)


def check_parts(cfg: PartsConfig) -> list[ModelConfig]:
    """Refuse shared parts that cannot work anywhere, naming the field, before anything loads;
    returns the cascade in order. Names looked up in registries (fusion, confidence, ...) are
    checked by the layer that owns the registry, when the part is built; model folders, which
    exist on one machine only, by :func:`check_model_paths` where this machine loads them."""
    models = ordered_cascade(cfg.cascade)
    for i, m in enumerate(models):
        _number(m.params_b, f"cascade.{i}.params_b", low=0.0, low_open=True)
        if m.price_as_params_b is not None:
            _number(m.price_as_params_b, f"cascade.{i}.price_as_params_b", low=0.0, low_open=True)
        _number(m.max_model_len, f"cascade.{i}.max_model_len", low=1, integer=True)
        _number(m.cached_input_discount, f"cascade.{i}.cached_input_discount", low=0.0, high=1.0)
    e, mem, r, rt = cfg.embedder, cfg.memory, cfg.retrieval, cfg.router
    _number(e.batch_size, "embedder.batch_size", low=1, integer=True)
    for name in ("dim", "num_threads"):
        if getattr(e, name) is not None:
            _number(getattr(e, name), f"embedder.{name}", low=1, integer=True)
    _number(mem.num_partitions, "memory.num_partitions", low=1, integer=True)
    _number(mem.timeout_s, "memory.timeout_s", low=0.0, low_open=True)
    _number(mem.write_timeout_s, "memory.write_timeout_s", low=0.0, low_open=True)
    for name in ("top_k", "candidate_k", "ngram", "rerank_depth"):
        _number(getattr(r, name), f"retrieval.{name}", low=1, integer=True)
    for name in ("rrf_k", "token_budget", "probe_token_budget"):
        _number(getattr(r, name), f"retrieval.{name}", low=0, integer=True)
    for name in ("bm25_k1", "bm25_cache_mb", "context_weight", "rerank_weight"):
        _number(getattr(r, name), f"retrieval.{name}", low=0.0)
    for name in ("alpha", "bm25_b", "dominant_overlap", "query_focus", "min_similarity"):
        _number(getattr(r, name), f"retrieval.{name}", low=0.0, high=1.0)
    # The retriever would refuse it too, but only once the store is open.
    if r.bm25_backend == "milvus" and not mem.bm25_function:
        raise ConfigError("retrieval.bm25_backend=milvus needs memory.bm25_function=true "
                          "(e.g. memory=lite_bm25)", field="retrieval.bm25_backend")
    _number(rt.tau, "router.tau", low=0.0, high=1.0)
    if rt.calibrator_threshold is not None:
        _number(rt.calibrator_threshold, "router.calibrator_threshold", low=0.0, high=1.0)
    if rt.statement_tau is not None:
        _number(rt.statement_tau, "router.statement_tau", low=0.0, high=1.0)
    # Eq. 1 divides by |l_min| and maps l_min to 0: a floor at or above 0 is no floor.
    _number(rt.l_min, "router.l_min", high=0.0, high_open=True)
    _number(rt.max_tokens, "router.max_tokens", low=1, integer=True)
    return models


def _number(v: Any, name: str, *, low: float | None = None, high: float | None = None,
            low_open: bool = False, high_open: bool = False, integer: bool = False) -> None:
    """``v`` a number (an integer if asked) within the bounds, else ConfigError naming ``name``."""
    ok = not isinstance(v, bool) and isinstance(v, int if integer else (int, float))
    if ok and low is not None:
        ok = v > low if low_open else v >= low
    if ok and high is not None:
        ok = v < high if high_open else v <= high
    if ok:
        return
    if low is not None and high is not None:
        bounds = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    elif low is not None:
        bounds = f"{'>' if low_open else '>='} {low:g}"
    else:
        bounds = f"{'<' if high_open else '<='} {high:g}"
    kind = "an integer" if integer else "a number"
    raise ConfigError(f"{name} must be {kind} {bounds}, got {v!r}", field=name)


def check_model_paths(cfg: PartsConfig) -> None:
    """Model folders given as filesystem paths exist here, before anything tries to load them
    (a bare ``org/name`` may be a hub id on a machine that has it, so only paths are checked).
    For the jobs that load the parts on this machine (benchmark, Serve app), not the replay:
    its config is also written off the machine that loads (the RayJob's ``/weights``), and an
    http target loads nothing."""
    from pathlib import Path

    named = [("embedder.path", cfg.embedder.path)]
    named += [(f"cascade.{i}.path", m.path) for i, m in enumerate(ordered_cascade(cfg.cascade))]
    for name, path in named:
        if path and path.startswith(("/", ".", "~")) and not Path(path).expanduser().exists():
            raise ConfigError(f"{name} {path!r} does not exist", field=name)


@dataclass
class TrackingConfig:
    enabled: bool = True
    tracking_uri: str = "sqlite:///.memroute/mlflow.db"
    artifact_location: str = ".memroute/mlartifacts"
    experiment: str = "memroute"
    # Set by the sweep callback (jobs/sweep_callback.py) on every trial: the trial's run is nested
    # under this run of the sweep. None: a top-level run.
    parent_run_id: Optional[str] = None


@dataclass
class DatasetConfig:
    name: str = "synthetic"  # synthetic | locomo | longmemeval | traces
    path: Optional[str] = None  # locomo: path to locomo10.json
    sample_ids: list[str] = field(default_factory=lambda: ["conv-26"])  # locomo: ids, or [all]
    categories: list[int] = field(default_factory=lambda: [1, 2, 3, 4])
    limit: Optional[int] = None  # run only the first N questions
    seed: int = 0
    num_users: int = 4  # synthetic generator
    sessions_per_user: int = 6
    size: Optional[str] = None  # longmemeval without a path: generated small | default | s-like
    # longmemeval: keep only these question types (e.g. [knowledge-update]); None: all six
    question_types: Optional[list[str]] = None


@dataclass
class BenchmarkConfig(PartsConfig):
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    conditions: list[str] = field(
        default_factory=lambda: [
            "cold_small",
            "cold_compound",
            "warm_memory_only",
            "warm_compound",
            "cold_large",
            "full_context_large",
        ]
    )
    output_dir: str = ".memroute/runs"
    batch_size: int = 16  # questions generated together per tier
    # the *_facts conditions: fact extraction over each user's conversation (config/fact_layer.py)
    fact_layer: FactLayerConfig = field(default_factory=FactLayerConfig)
    summary: SummaryConfig = field(default_factory=SummaryConfig)  # the *_summary conditions


def check_benchmark_config(cfg: BenchmarkConfig) -> BenchmarkConfig:
    """Refuse what cannot run, naming the field, before the dataset or any model loads."""
    check_parts(cfg)
    check_model_paths(cfg)
    _number(cfg.batch_size, "batch_size", low=1, integer=True)
    check_summary_config(cfg.summary, len(cfg.cascade))
    if not cfg.conditions:
        raise ConfigError("conditions is empty: name at least one (warm_compound, ...)",
                          field="conditions")
    return cfg


@dataclass
class RayConfig:
    """Where Ray runs. Local (no address): a single loopback node started by the job."""

    # None: start a local node; "auto" or "ray://head:10001": join a running cluster
    address: Optional[str] = None
    num_cpus: Optional[int] = None  # local node only (None: all cores)
    num_gpus: Optional[int] = None  # local node only (None: detected)
    object_store_memory: Optional[int] = None  # bytes, local node only (None: Ray's default)
    include_dashboard: bool = False
    data_progress_bars: bool = False  # Ray Data's own bars (the job draws one driver-side bar)
    # Workers' output (engine start-up warnings, weight-loading bars) stays in Ray's session logs
    # unless this is on; the job prints where they are. Errors still reach the job.
    log_to_driver: bool = False
    log_level: str = "ERROR"  # Ray's and Ray Serve's own log lines in this process (INFO: all)


@dataclass
class EmbedStageConfig:
    """The embedding actor pool (Ray Data ``map_batches`` with a callable class)."""

    concurrency: int = 2  # actors, each holding one encoder
    batch_size: int = 256  # rows per actor call (the input is cut into blocks of at most this)
    num_cpus: float = 0.75  # per actor; actors + writers must fit the cluster's CPUs
    num_gpus: float = 0.0  # per actor (set embedder.device=cuda with it)
    torch_threads: Optional[int] = None  # per actor (None: its whole CPUs, at least 1)


@dataclass
class WriteStageConfig:
    """How embedded rows reach Milvus."""

    # auto | driver | actors (auto: the driver for a Milvus Lite file, writer actors for a server)
    mode: str = "auto"
    batch_size: int = 500  # rows per upsert, at most (each embedded block is written on arrival)
    concurrency: int = 2  # writer actors (mode actors)
    num_cpus: float = 0.25  # per writer actor


@dataclass
class IngestConfig:
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    assets: AssetsConfig = field(default_factory=AssetsConfig)
    embed: EmbedStageConfig = field(default_factory=EmbedStageConfig)
    write: WriteStageConfig = field(default_factory=WriteStageConfig)
    work_dir: str = ".memroute/ingest"  # generated datasets are written here
    num_blocks: Optional[int] = None  # Ray Data blocks of the input (None: one per embed batch)
    skip_existing: bool = True  # look up ids already stored and skip them (a re-run embeds nothing)
    max_errors: int = 0  # rows the store may refuse before the job exits non-zero
    progress: bool = True
