"""The presets as Serve applications, for ``serve build`` (it needs an Application, not a builder):

    serve build serve.presets:gpu -o rayservice-serve-config.yaml      # also: cpu, cpu_tiny, external

Built on attribute access (PEP 562), so importing this module composes nothing. ``serve run`` and a
RayService's ``serveConfigV2`` can use the builder directly: ``serve.app:build_app`` with ``args``.
"""

from __future__ import annotations

from typing import Any

PRESETS = {"cpu": "cpu", "cpu_tiny": "cpu-tiny", "gpu": "gpu", "external": "external"}


def __getattr__(name: str) -> Any:
    if name not in PRESETS:
        raise AttributeError(f"module 'serve.presets' has no preset {name!r}; available: {', '.join(PRESETS)}")
    from serve.app import build_app

    return build_app({"preset": PRESETS[name]})
