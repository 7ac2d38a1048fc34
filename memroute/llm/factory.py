"""Build a :class:`Backend` from a typed :class:`ModelConfig` (the one place engines are chosen)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from memroute.config.schema import ModelConfig
from memroute.errors import ConfigError
from memroute.llm.base import Backend
from memroute.registry import Registry

if TYPE_CHECKING:
    from memroute.assets.store import AssetStore

BackendBuilder = Callable[[ModelConfig, "AssetStore | None"], Backend]
ENGINES: Registry[BackendBuilder] = Registry("engine")


def build_backend(cfg: ModelConfig, assets: AssetStore | None = None) -> Backend:
    """The back end ``cfg.engine`` names, loaded from ``cfg.path`` or the asset ``cfg.asset``.

    Unknown engines raise ``ConfigError`` listing the available ones. ``cfg.engine_args`` go
    to the engine: vLLM takes any ``vllm.LLM`` argument (``gpu_memory_utilization``,
    ``tensor_parallel_size``, ``quantization``, ``enforce_eager``...); transformers takes
    ``num_threads`` and ``batch_generate``; openai_http takes ``timeout`` and
    ``max_concurrency``; mock takes ``answer``, ``memory_answer``, ``logprob``, ``margin``,
    ``rules`` and ``latency_s`` (:class:`~memroute.llm.mock_backend.MockBackend`).
    """
    return ENGINES.get(cfg.engine, field="model.engine")(cfg, assets)


def model_folder(cfg: ModelConfig, assets: AssetStore | None) -> Path:
    """``cfg.path`` when set, else the converted folder of the named asset."""
    if cfg.path:
        return Path(cfg.path).expanduser()
    if not cfg.asset:
        raise ConfigError(
            f"model {cfg.name!r} (engine {cfg.engine!r}) needs model.asset or model.path",
            field="model.asset",
        )
    if assets is None:
        from memroute.assets.store import AssetStore

        assets = AssetStore()
    return assets.hf_folder(cfg.asset)


def _engine_kwargs(cfg: ModelConfig, allowed: tuple[str, ...]) -> dict[str, Any]:
    unknown = sorted(set(cfg.engine_args) - set(allowed))
    if unknown:
        raise ConfigError(
            f"model.engine_args.{unknown[0]} is not an option of engine {cfg.engine!r}. "
            f"Available: {', '.join(allowed)}",
            field=f"model.engine_args.{unknown[0]}",
        )
    return dict(cfg.engine_args)


@ENGINES.register("transformers")
def _build_transformers(cfg: ModelConfig, assets: AssetStore | None) -> Backend:
    from memroute.llm.transformers_backend import TransformersBackend

    kwargs = _engine_kwargs(cfg, ("num_threads", "batch_generate"))
    return TransformersBackend(cfg.name, model_folder(cfg, assets), dtype=cfg.dtype, **kwargs)


@ENGINES.register("vllm")
def _build_vllm(cfg: ModelConfig, assets: AssetStore | None) -> Backend:
    from memroute.llm.vllm_backend import VLLMBackend

    # cfg.path may also be a hub id on a GPU machine that has it (Qwen/Qwen3-8B).
    path = cfg.path if cfg.path else model_folder(cfg, assets)
    return VLLMBackend(
        cfg.name,
        path,
        max_model_len=cfg.max_model_len,
        dtype=cfg.dtype,
        engine_args=dict(cfg.engine_args),
    )


@ENGINES.register("openai_http")
def _build_openai_http(cfg: ModelConfig, assets: AssetStore | None) -> Backend:
    from memroute.llm.openai_http import OpenAIHTTPBackend

    if not cfg.base_url:
        raise ConfigError(
            f"model {cfg.name!r} uses engine 'openai_http' but model.base_url is not set",
            field="model.base_url",
        )
    api_key = None
    if cfg.api_key_env:
        api_key = os.environ.get(cfg.api_key_env)
        if not api_key:
            raise ConfigError(
                f"environment variable {cfg.api_key_env!r} (model.api_key_env) is not set",
                field="model.api_key_env",
            )
    kwargs = _engine_kwargs(cfg, ("timeout", "max_concurrency"))
    return OpenAIHTTPBackend(
        cfg.name,
        cfg.base_url,
        served_model=cfg.served_model,
        api_key=api_key,
        # A local tokenizer saves a /tokenize round trip per count; only when a folder is given.
        tokenizer_path=cfg.path,
        **kwargs,
    )


MOCK_OPTIONS = ("answer", "memory_answer", "logprob", "margin", "rules", "latency_s", "down_when_exists",
                "tool_answer", "token_latency_s")


@ENGINES.register("mock")
def _build_mock(cfg: ModelConfig, assets: AssetStore | None) -> Backend:
    from memroute.llm.mock_backend import MockBackend

    kwargs = _engine_kwargs(cfg, MOCK_OPTIONS)
    # A tokenizer folder only when one is named: without it the mock counts with SimpleTokenizer.
    folder = model_folder(cfg, assets) if (cfg.path or cfg.asset) else None
    return MockBackend(cfg.name, folder, **kwargs)
