"""The width of an embedding model's vectors, read from its folder without loading it.

The driver of a bulk ingest must open the store (which needs the width) before the embedding
actors exist; loading torch and the model there just to learn one number would cost ~10 s and
hundreds of MB on a head node. The actors check the real width against this one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memroute.config import EmbedderConfig
from memroute.errors import AssetError, ConfigError


def model_folder(cfg: EmbedderConfig, cache_dir: str | None = None) -> Path:
    """``cfg.path`` or the verified asset folder of ``cfg.name`` (as :func:`build_encoder`)."""
    if cfg.path:
        return Path(cfg.path).expanduser()
    from memroute.assets.store import AssetStore

    return AssetStore(cache_dir).path(cfg.name)


def embedding_dim(cfg: EmbedderConfig, folder: Path) -> int:
    """Output width of the sentence-transformers model in ``folder`` after ``cfg.dim``."""
    modules = _read_json(folder / "modules.json")
    if not isinstance(modules, list):
        raise AssetError(f"{folder}/modules.json is not a list of modules", field="embedder.path")
    width: int | None = None
    for module in modules:
        kind = str(module.get("type", "")) if isinstance(module, dict) else ""
        sub = folder / str(module.get("path", "")) if isinstance(module, dict) else folder
        if kind.endswith(".Pooling"):
            width = _int_key(sub / "config.json", "word_embedding_dimension")
        elif kind.endswith(".Dense"):  # a projection after pooling sets the final width
            width = _int_key(sub / "config.json", "out_features")
    if width is None:
        raise AssetError(
            f"cannot tell the embedding width of {folder}: no Pooling module in modules.json",
            field="embedder.path",
        )
    if cfg.dim is None:
        return width
    if isinstance(cfg.dim, bool) or not isinstance(cfg.dim, int) or not 1 <= cfg.dim <= width:
        raise ConfigError(
            f"embedder.dim must be 1..{width} (the width of {folder.name}), got {cfg.dim!r}",
            field="embedder.dim",
        )
    return cfg.dim


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AssetError(
            f"{path.parent} is not a sentence-transformers model folder (no {path.name})",
            field="embedder.path",
        ) from None
    except json.JSONDecodeError as exc:
        raise AssetError(f"{path}: not valid JSON ({exc.msg})", field="embedder.path") from None


def _int_key(path: Path, key: str) -> int:
    data = _read_json(path)
    value = data.get(key) if isinstance(data, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise AssetError(f"{path}: {key} must be a positive integer", field="embedder.path")
    return value
