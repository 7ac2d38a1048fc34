"""Encoder protocol: the same code embeds memories and queries."""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class Encoder(Protocol):
    name: str
    dim: int  # output width after Matryoshka truncation

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Return float32 array (len(texts), dim), each row L2-normalized."""
        ...
