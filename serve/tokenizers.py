"""The tier's tokenizer, loaded in the ingress for exact, local token counts."""

from __future__ import annotations

from typing import Any

from memroute.config.schema import AssetsConfig, ModelConfig

LOCAL_ENGINES = ("vllm", "transformers")  # engines that load a model folder we can read too


def local_tokenizer(model: ModelConfig, assets: AssetsConfig) -> Any | None:
    """The Hugging Face tokenizer of the tier's model folder, or None (remote-only engines)."""
    if model.engine not in LOCAL_ENGINES:
        return None
    from transformers import AutoTokenizer

    from memroute.llm.assets import AssetStore
    from memroute.llm.factory import model_folder

    folder = model_folder(model, AssetStore(assets.cache_dir, pip=assets.pip))
    return AutoTokenizer.from_pretrained(str(folder))
