"""Text encoders: the Encoder protocol and the sentence-transformers implementation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memroute.config.schema import EmbedderConfig
from memroute.embedding.base import Encoder
from memroute.embedding.sentence_transformer import SentenceTransformerEncoder

if TYPE_CHECKING:
    from memroute.assets.store import AssetStore

__all__ = ["Encoder", "SentenceTransformerEncoder", "build_encoder"]


def build_encoder(cfg: EmbedderConfig, assets: AssetStore | None = None) -> Encoder:
    """The configured encoder: ``cfg.path`` if given, else the asset named ``cfg.name``; behind
    a vector cache when ``cfg.vector_cache`` names a folder."""
    if cfg.path:
        path = cfg.path
    else:
        if assets is None:
            from memroute.assets.store import AssetStore

            assets = AssetStore()
        path = assets.path(cfg.name)
    encoder = SentenceTransformerEncoder(
        path,
        dim=cfg.dim,
        batch_size=cfg.batch_size,
        device=cfg.device,
        num_threads=cfg.num_threads,
        name=cfg.name,
    )
    if cfg.vector_cache:
        from memroute.embedding.vector_cache import CachedEncoder

        return CachedEncoder(encoder, cfg.vector_cache)
    return encoder
