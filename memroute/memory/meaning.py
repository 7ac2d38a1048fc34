"""Similarity of user-turn statements under an encoder: supersession's rule 5 (by meaning).

:func:`memroute.memory.supersession.marks_for` takes any ``similar(text, others)`` that returns
cosines; this is the one the write path, the pending view and the benches use. The texts repeat
(every change statement is compared with the same older turns), so vectors are kept in a bounded
LRU map and each call encodes only the texts it has not seen: one encoder call per update.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from memroute.embedding.base import Encoder

CACHE_TEXTS = 8192  # ~12 MB of MiniLM vectors


class StatementSimilarity:
    """``similar(text, others)``: the cosine of ``text`` to each of ``others``."""

    def __init__(self, encoder: Encoder, cache_texts: int = CACHE_TEXTS) -> None:
        self.encoder = encoder
        self.cache_texts = cache_texts
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self.encoded = 0  # texts sent to the encoder (the cache's misses)

    @classmethod
    def from_asset(cls, name: str = "minilm-l6") -> StatementSimilarity:
        """Over the named offline embedder (the benches; the served app passes its own)."""
        from memroute.assets.store import AssetStore
        from memroute.embedding.sentence_transformer import SentenceTransformerEncoder

        return cls(SentenceTransformerEncoder(AssetStore().path(name), name=name))

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if missing:
            rows = np.asarray(self.encoder.encode(missing), dtype=np.float32)
            self.encoded += len(missing)
            for text, row in zip(missing, rows):
                self._vectors[text] = row
        out = []
        for text in texts:
            self._vectors.move_to_end(text)
            out.append(self._vectors[text])
        while len(self._vectors) > self.cache_texts:
            self._vectors.popitem(last=False)
        return np.stack(out) if out else np.zeros((0, self.encoder.dim), np.float32)

    def __len__(self) -> int:
        return len(self._vectors)  # texts cached

    def clear(self) -> None:
        """Forget every cached vector (erasure: the texts are users' own words)."""
        self._vectors.clear()

    def __call__(self, text: str, others: Sequence[str]) -> np.ndarray:
        rows = self.vectors([text, *others])
        return rows[1:] @ rows[0]
