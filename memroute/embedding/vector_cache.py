"""An encoder that remembers: vectors cached on disk by text hash, so a re-run embeds nothing.

Embedding a million texts with MiniLM takes ~100 minutes on two cores; the scale benchmark and
bulk re-ingests of the same texts need those vectors again, not the time. ``embedder.vector_cache``
names a folder; vectors live in ``<folder>/<encoder name>-<dim>/part-*.parquet`` (columns ``key``:
the first 16 bytes of the text's SHA-256, ``vector``: float32 list). Each process loads every part
once (a dict of keys and one matrix: ~1.6 GB at 1M x 384) and writes what it encoded as a new part
of its own (a temporary name renamed into place), so several embedding actors share one cache
without locks. A cut-off part (a killed writer) is never visible: only renamed files are read.
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memroute.embedding.base import Encoder

log = logging.getLogger(__name__)

KEY_BYTES = 16


def text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()[:KEY_BYTES]


class CachedEncoder:
    """:class:`Encoder` over ``inner``: cached vectors are read, the rest encoded and cached."""

    def __init__(self, inner: Encoder, folder: str | os.PathLike[str]) -> None:
        self.inner = inner
        self.name, self.dim = inner.name, inner.dim
        self.folder = Path(folder).expanduser() / f"{inner.name}-{inner.dim}"
        self.folder.mkdir(parents=True, exist_ok=True)
        # key -> (block, row): blocks are never concatenated, so a write costs its own rows only
        self._rows: dict[bytes, tuple[int, int]] = {}
        self._blocks: list[np.ndarray] = []
        self.hits = self.misses = 0
        self._load()

    def _load(self) -> None:
        import pyarrow.parquet as pq

        for part in sorted(self.folder.glob("part-*.parquet")):
            table = pq.read_table(part)
            keys = table.column("key").to_pylist()
            flat = table.column("vector").combine_chunks().values.to_numpy(zero_copy_only=False)
            vectors = np.asarray(flat, dtype=np.float32).reshape(len(keys), -1)
            if vectors.shape[1] != self.dim:
                raise ValueError(f"{part} holds {vectors.shape[1]}-dim vectors, not {self.dim}")
            self._add(keys, vectors)
        log.info("vector cache %s: %d vectors", self.folder, len(self._rows))

    def _add(self, keys: Sequence[bytes], vectors: np.ndarray) -> None:
        block = len(self._blocks)
        self._blocks.append(vectors)
        for i, k in enumerate(keys):
            self._rows.setdefault(k, (block, i))

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, text: object) -> bool:
        return isinstance(text, str) and text_key(text) in self._rows

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        keys = [text_key(t) for t in texts]
        missing = {k: t for k, t in zip(keys, texts) if k not in self._rows}
        if missing:
            fresh = np.asarray(self.inner.encode(list(missing.values())), dtype=np.float32)
            self._write(list(missing), fresh)
            self._add(list(missing), fresh)
        self.misses += len(missing)
        self.hits += len(keys) - len(missing)
        if not keys:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self._blocks[b][r] for b, r in (self._rows[k] for k in keys)])

    def _write(self, keys: list[bytes], vectors: np.ndarray) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        flat = pa.array(vectors.reshape(-1), type=pa.float32())
        table = pa.table({"key": pa.array(keys, type=pa.binary(KEY_BYTES)),
                          "vector": pa.FixedSizeListArray.from_arrays(flat, self.dim)})
        name = f"part-{uuid.uuid4().hex}.parquet"
        tmp = self.folder / f".{name}.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, self.folder / name)  # whole parts only: a killed writer leaves a .tmp


__all__ = ["CachedEncoder", "text_key"]
