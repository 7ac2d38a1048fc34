"""A sentence-transformers encoder with optional Matryoshka truncation.

``sentence_transformers`` (and torch) take 7-10 s to import, so they are imported when an
encoder is built, never when this module is imported.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memroute.errors import AssetError, ConfigError, InvalidRequest


class SentenceTransformerEncoder:
    """Embeds texts as float32 rows of width ``dim``, each L2-normalized.

    ``dim`` below the model width keeps the first ``dim`` components and renormalizes
    (Matryoshka truncation); only meaningful for models trained that way (EmbeddingGemma),
    for others it is a plain, lossy projection.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        dim: int | None = None,
        batch_size: int = 64,
        device: str = "cpu",
        num_threads: int | None = None,
        name: str | None = None,
    ) -> None:
        folder = Path(path).expanduser()
        if not (folder / "modules.json").is_file():
            raise AssetError(
                f"{folder} is not a sentence-transformers model folder (no modules.json); "
                "set embedder.path to one, or fetch the asset with `python -m jobs.assets fetch "
                "minilm-l6`",
                field="embedder.path",
            )
        if batch_size < 1:
            raise ConfigError("batch_size must be >= 1", field="embedder.batch_size")
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
            raise ConfigError(
                f"dim must be a positive integer or null, got {dim!r}", field="embedder.dim"
            )
        if num_threads is not None:
            if num_threads < 1:
                raise ConfigError("num_threads must be >= 1", field="embedder.num_threads")
            import torch

            # Process-wide: torch has one intra-op thread pool per process.
            torch.set_num_threads(num_threads)

        from sentence_transformers import SentenceTransformer

        self._model = SentenceTransformer(str(folder), device=device, local_files_only=True)
        width = _model_width(self._model)
        if dim is not None and dim > width:
            raise ConfigError(
                f"dim {dim} is larger than the width {width} of the model at {folder}",
                field="embedder.dim",
            )
        self.name = name or folder.name
        self.path = folder
        self.width = width
        self.dim = dim or width
        self.batch_size = batch_size

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, each row L2-normalized (an all-zero row stays zero)."""
        items = _checked_texts(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        emb = self._model.encode(
            items,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=False,
            show_progress_bar=False,
        )
        emb = np.asarray(emb, dtype=np.float32)[:, : self.dim]
        norms = np.linalg.norm(emb, axis=1, keepdims=True)
        return np.ascontiguousarray(emb / np.maximum(norms, 1e-12), dtype=np.float32)

    def encode_tokens(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Per text a (tokens, width) float32 array of L2-normalized token vectors, without the
        [CLS] / [SEP] markers (late-interaction rerank, :mod:`memroute.retrieval.rerank`).
        Always the full width: Matryoshka truncation applies to pooled vectors only."""
        items = _checked_texts(texts)
        if not items:
            return []
        out = self._model.encode(
            items,
            batch_size=self.batch_size,
            output_value="token_embeddings",
            convert_to_numpy=False,  # one tensor per text, padding already stripped
            show_progress_bar=False,
        )
        result = []
        for t in out:
            tokens = t.detach().float().cpu().numpy()[1:-1]
            norms = np.linalg.norm(tokens, axis=1, keepdims=True)
            result.append(np.ascontiguousarray(tokens / np.maximum(norms, 1e-12), dtype=np.float32))
        return result

    def __repr__(self) -> str:
        return f"SentenceTransformerEncoder(name={self.name!r}, dim={self.dim}, width={self.width})"


def _checked_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise InvalidRequest("encode expects a list of texts, got one string", field="texts")
    items = list(texts)
    for i, t in enumerate(items):
        if not isinstance(t, str):
            raise InvalidRequest(f"texts[{i}] must be a string, got {type(t).__name__}", field="texts")
    return items


def _model_width(model: object) -> int:
    # sentence-transformers 6 renamed get_sentence_embedding_dimension (the old name warns).
    getter = getattr(model, "get_embedding_dimension", None) or getattr(
        model, "get_sentence_embedding_dimension"
    )
    width = getter()
    if not width:
        raise AssetError("the sentence-transformers model does not report its embedding width")
    return int(width)
