"""Model back ends: the Backend protocol, three engines, a mock, and the factory that picks one.

Exports are resolved lazily (PEP 562): importing ``memroute.llm`` loads no engine, torch or vllm.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "Backend": "memroute.llm.base",
    "build_backend": "memroute.llm.factory",
    "ENGINES": "memroute.llm.factory",
    "TransformersBackend": "memroute.llm.transformers_backend",
    "VLLMBackend": "memroute.llm.vllm_backend",
    "OpenAIHTTPBackend": "memroute.llm.openai_http",
    "MockBackend": "memroute.llm.mock_backend",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'memroute.llm' has no attribute {name!r}")
    return getattr(import_module(module), name)
