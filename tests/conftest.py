"""Shared fixtures: expensive real parts (assets, encoder, tiny models) are built once per session."""

from __future__ import annotations

import os

import pytest

# Offline and loopback-only in every test process (the Makefile sets these too).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


@pytest.fixture(scope="session")
def assets():
    from memroute.assets.store import AssetStore

    return AssetStore()


@pytest.fixture(scope="session")
def encoder(assets):
    from memroute.config import EmbedderConfig
    from memroute.embedding import build_encoder

    return build_encoder(EmbedderConfig(), assets)


@pytest.fixture(scope="session")
def tiny_hf(assets):
    """SmolLM2-135M on the transformers engine (fast to load, no vLLM)."""
    from memroute.config import ModelConfig
    from memroute.llm.factory import build_backend

    backend = build_backend(
        ModelConfig(name="smollm2-135m-hf", engine="transformers", asset="smollm2-135m", params_b=0.135, dtype="float32"),
        assets,
    )
    yield backend
    backend.close()
