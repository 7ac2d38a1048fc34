"""The composition root: typed configs -> the running parts.

Every entry point (benchmark, retrieval evaluation, ingest, the serving core, Serve deployments,
benches) builds its parts here, so there is one answer to "how is a retriever / a tier / the
journal made from config". Each builder imports its part lazily: importing this module loads no
model, opens no client and starts nothing.

    assets = build.asset_store(cfg.assets)
    memory = build.memory(cfg.embedder, cfg.memory, cfg.retrieval, assets)   # encoder, store, retriever
    memory = build.memory(..., units=cfg.units)                               # + the unit index
    tiers = build.tiers(ordered_cascade(cfg.cascade), assets)                 # back end + pricing each
    router = build.router(tiers, cfg.router, cfg.retrieval, memory.retriever)
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from memroute.config.schema import (
    AssetsConfig,
    EmbedderConfig,
    MemoryConfig,
    ModelConfig,
    RetrievalConfig,
    RouterConfig,
)

if TYPE_CHECKING:
    from memroute.accounting.cost import Pricing
    from memroute.assets.store import AssetStore
    from memroute.config.facts import FactsConfig
    from memroute.config.journal import JournalConfig
    from memroute.config.search import SearchConfig
    from memroute.config.units import UnitsConfig
    from memroute.embedding.base import Encoder
    from memroute.journal.idempotency import IdempotencyStore
    from memroute.journal.protocol import TurnJournal
    from memroute.llm.base import Backend
    from memroute.memory.facts import FactStore
    from memroute.memory.milvus_store import MilvusMemoryStore
    from memroute.memory.search import ActiveFacts, MemorySearch, TurnRetriever
    from memroute.memory.units import UnitIndex
    from memroute.retrieval.bm25_cache import BM25Cache
    from memroute.retrieval.retriever import HybridRetriever
    from memroute.routing.calibrator import Calibrator
    from memroute.routing.facts_block import FactsSource
    from memroute.routing.router import MemoryRetriever, Router, Tier
    from memroute.types import Memory


def asset_store(cfg: AssetsConfig) -> AssetStore:
    from memroute.assets.store import AssetStore

    return AssetStore(cfg.cache_dir, pip=cfg.pip)


def encoder(cfg: EmbedderConfig, assets: AssetStore) -> Encoder:
    from memroute.embedding import build_encoder

    return build_encoder(cfg, assets)


def store(cfg: MemoryConfig, dim: int) -> MilvusMemoryStore:
    """A Milvus store: Lite file or server, as ``cfg.uri`` says (``is_server_uri``)."""
    from memroute.memory.milvus_store import MilvusMemoryStore

    return MilvusMemoryStore(cfg, dim)


def retriever(
    enc: Encoder, st: MilvusMemoryStore, cfg: RetrievalConfig, *, bm25_cache: BM25Cache | None = None
) -> HybridRetriever:
    from memroute.retrieval.retriever import HybridRetriever

    return HybridRetriever(enc, st, cfg, bm25_cache=bm25_cache)


@dataclass
class MemoryParts:
    """The memory side of any flow: one encoder, one store, one retriever over them, and the
    atomic context units when asked for (the served app)."""

    encoder: Encoder
    store: MilvusMemoryStore
    retriever: HybridRetriever
    units: UnitIndex | None = None

    def close(self) -> None:
        self.store.close()
        if self.units is not None:
            self.units.close()


def memory(
    embedder: EmbedderConfig,
    memory_cfg: MemoryConfig,
    retrieval: RetrievalConfig,
    assets: AssetStore,
    *,
    enc: Encoder | None = None,
    units: UnitsConfig | None = None,
) -> MemoryParts:
    """Encoder (unless one is given: several stores may share it), store and retriever; with
    ``units`` (enabled), the unit index beside them."""
    enc = enc if enc is not None else encoder(embedder, assets)
    st = store(memory_cfg, enc.dim)
    try:
        index = (unit_index(units, memory_cfg, retrieval, enc)
                 if units is not None and units.enabled else None)
    except BaseException:
        st.close()
        raise
    return MemoryParts(enc, st, retriever(enc, st, retrieval), index)


def unit_index(
    cfg: UnitsConfig, memory_cfg: MemoryConfig, retrieval: RetrievalConfig, enc: Encoder
) -> UnitIndex:
    """The atomic context units: their own collection (``<memory.collection><suffix>``) in the
    same Milvus, and a hybrid retriever over it. Units are sentences, not turns of a session:
    no session context, no focus on words every memory shares, no reranking."""
    from dataclasses import replace

    from memroute.config.units import check_units_config
    from memroute.memory.units import UnitIndex

    check_units_config(cfg)
    st = store(replace(memory_cfg, collection=memory_cfg.collection + cfg.collection_suffix),
               enc.dim)
    try:
        r = retriever(enc, st, replace(retrieval, context_weight=0.0, query_focus=1.0,
                                        rerank="none"))
    except BaseException:
        st.close()
        raise
    return UnitIndex(enc, st, cfg, retriever=r)


def turn_corpus(turns: object, st: MilvusMemoryStore) -> Callable[[str], Sequence[Memory]]:
    """A user's stored turn-pairs for the memory search's keyword fallback: the retriever's
    in-process BM25 corpus when it has one (kept in step with its writes; built from the store
    on first use), else ``st.list_user`` (a store read: ~0.25 s for 1,000 rows on Milvus Lite)."""
    cfg, bm25 = getattr(turns, "cfg", None), getattr(turns, "bm25", None)
    if bm25 is not None and getattr(cfg, "bm25_backend", None) == "inprocess":
        return lambda uid: list(bm25.get(uid).memories.values())
    return st.list_user


def memory_search(
    cfg: SearchConfig,
    facts: ActiveFacts,
    turns: TurnRetriever,
    retrieval: RetrievalConfig,
    *,
    enc: Encoder | None = None,
    units: UnitIndex | None = None,
    raw_turns: Callable[[str], Sequence[Memory]] | None = None,
) -> MemorySearch:
    """Search over facts, units and turn-pairs; the facts' BM25 is the retrieval config's."""
    from functools import partial

    from memroute.memory.search import MemorySearch
    from memroute.retrieval.bm25 import BM25Index

    lexical = partial(BM25Index, k1=retrieval.bm25_k1, b=retrieval.bm25_b, ngram=retrieval.ngram,
                      stem=retrieval.stem)
    return MemorySearch(facts, turns, cfg, lexical_index=lexical, encoder=enc, units=units,
                        raw_turns=raw_turns)


def backend(cfg: ModelConfig, assets: AssetStore | None) -> Backend:
    from memroute.llm.factory import build_backend

    return build_backend(cfg, assets)


def pricing(cfg: ModelConfig) -> Pricing:
    """EffCost's P is the tier's real size; dollar prices come along for the projections."""
    from memroute.accounting.cost import Pricing

    return Pricing(cfg.params_b, cfg.usd_per_m_input, cfg.usd_per_m_output,
                   cfg.cached_input_discount)


def tier(cfg: ModelConfig, engine: Backend) -> Tier:
    from memroute.routing.router import Tier

    return Tier(cfg.name, engine, pricing(cfg), context_tokens=cfg.max_model_len)


class UnusedBackend:
    """Stands in for a tier nobody will call, so its model is never loaded."""

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id

    def _unused(self, *args: object, **kwargs: object) -> NoReturn:
        raise RuntimeError(f"tier {self.model_id!r} was not loaded: no selected condition uses it")

    generate = generate_many = stream = count_tokens = count_text_tokens = _unused

    def close(self) -> None:
        pass


def tiers(
    models: Sequence[ModelConfig],
    assets: AssetStore | None,
    *,
    backends: Sequence[Backend] | None = None,
    load: Container[int] | None = None,
    on_ready: Callable[[int, ModelConfig, float | None], None] | None = None,
) -> list[Tier]:
    """One :class:`Tier` per cascade slot. ``backends`` given (Serve handles, fakes): wrapped as
    they are; else each model is loaded, except slots not in ``load`` (an :class:`UnusedBackend`).
    ``on_ready(index, model, seconds_or_None)`` reports each slot (None: not loaded)."""
    import time

    if backends is not None and len(backends) != len(models):
        raise ValueError(f"{len(models)} tiers configured but {len(backends)} back ends given")
    out: list[Tier] = []
    try:
        for i, m in enumerate(models):
            if backends is not None:
                engine: Backend = backends[i]
            elif load is not None and i not in load:
                engine = UnusedBackend(m.name)
                if on_ready is not None:
                    on_ready(i, m, None)
            else:
                t0 = time.time()
                engine = backend(m, assets)
                if on_ready is not None:
                    on_ready(i, m, time.time() - t0)
            out.append(tier(m, engine))
    except BaseException:
        for t in out:  # a later tier failed to load: free the engines already up
            t.backend.close()
        raise
    return out


def say_ready(index: int, model: ModelConfig, seconds: float | None) -> None:
    """The jobs' ``on_ready``: one line per cascade slot as it loads (or is skipped)."""
    if seconds is None:
        print(f"tier {index}: {model.name} not loaded (no selected condition uses it)")
    else:
        print(f"tier {index}: {model.name} ({model.engine}) ready in {seconds:.0f}s")


def router(
    tier_list: Sequence[Tier],
    cfg: RouterConfig,
    retrieval: RetrievalConfig,
    memory_retriever: MemoryRetriever | None,
    *,
    facts: FactsSource | None = None,
) -> Router:
    """``facts``: the users' current facts (a fact store) injected before the turn-pairs;
    ``router.calibrator`` set: its artifact is loaded (:func:`calibrator`) and decides acceptance."""
    from memroute.routing.router import Router

    return Router(list(tier_list), cfg, retrieval, memory_retriever, facts=facts,
                  calibrator=calibrator(cfg))


def calibrator(cfg: RouterConfig) -> Calibrator | None:
    """The fitted calibrator ``router.calibrator`` names (None: not set). A missing file, or
    one of another artifact version or feature set, is a ConfigError naming the field."""
    if not cfg.calibrator:
        return None
    from memroute.routing.calibrator import load

    return load(cfg.calibrator, field="router.calibrator")


def facts(cfg: FactsConfig) -> FactStore:
    """The fact store; a SQLite file's path made absolute, as the journal's is."""
    from dataclasses import replace

    from memroute.config.facts import SQLITE_PREFIXES
    from memroute.memory.facts import FactStore

    for prefix in SQLITE_PREFIXES:
        if cfg.url.startswith(prefix):
            path = Path(cfg.url[len(prefix):]).expanduser().resolve()
            path.parent.mkdir(parents=True, exist_ok=True)
            cfg = replace(cfg, url=f"{prefix}{path}")
    return FactStore.from_config(cfg)


def journal_target(cfg: JournalConfig) -> str:
    """Where the journal lives: ``journal.url`` (PostgreSQL, shared by every replica) when set,
    else the SQLite file, its path made absolute (a Ray replica's working directory differs)."""
    return cfg.url or str(Path(cfg.path).expanduser().resolve())


def journal(cfg: JournalConfig) -> TurnJournal:
    """The durable journal at :func:`journal_target`."""
    from memroute.journal.store import open_journal

    return open_journal(journal_target(cfg))


def idempotency(cfg: JournalConfig) -> IdempotencyStore:
    """``Idempotency-Key`` answers, in the journal's database (a retry that lands on another
    replica finds the first answer in the shared one)."""
    from memroute.journal.idempotency import IdempotencyStore

    return IdempotencyStore(journal_target(cfg), ttl_s=cfg.idempotency_ttl_s,
                            lease_s=cfg.idempotency_lease_s)
