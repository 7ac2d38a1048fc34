"""The tier's tokenizer, loaded in the ingress for exact, local token counts."""

from __future__ import annotations

from typing import Any

from memroute.config.schema import AssetsConfig, ModelConfig

LOCAL_ENGINES = ("vllm", "transformers", "mock")  # engines whose tokenizer we can load too


def local_tokenizer(model: ModelConfig, assets: AssetsConfig) -> Any | None:
    """The Hugging Face tokenizer of the tier's model folder, or None (remote-only engines).

    A mock tier without a tokenizer folder counts with :class:`SimpleTokenizer`: the ingress gets
    one too, so its counts are the engine's without a round trip per memory line.
    """
    if model.engine not in LOCAL_ENGINES:
        return None
    if model.engine == "mock" and not (model.path or model.asset):
        from memroute.llm.simple_tokenizer import SimpleTokenizer

        return SimpleTokenizer()
    from transformers import AutoTokenizer

    from memroute.assets.store import AssetStore
    from memroute.llm.factory import model_folder

    folder = model_folder(model, AssetStore(assets.cache_dir, pip=assets.pip))
    return AutoTokenizer.from_pretrained(str(folder))
