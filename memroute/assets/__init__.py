"""Offline model assets: pinned PyPI wheels -> verified files in a local cache (:mod:`.store`).

Below both the LLM back ends and the encoder, which load their models from it. Importing the
package loads nothing: ``AssetStore`` is resolved on first use (PEP 562)."""

from __future__ import annotations

from typing import Any

__all__ = ["ASSETS", "AssetStore", "get_spec"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'memroute.assets' has no attribute {name!r}")
    from memroute.assets import store

    return getattr(store, name)
