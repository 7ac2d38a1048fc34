"""StatementSimilarity: cosines under an encoder, each text encoded once while it is cached."""

from __future__ import annotations

import numpy as np
import pytest

from memroute.memory.meaning import StatementSimilarity


class CountingEncoder:
    """Letter-count vectors, L2-normalised; records every batch it is asked to encode."""

    name, dim = "letters", 26

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def encode(self, texts):
        self.batches.append(list(texts))
        rows = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            for ch in t.lower():
                if "a" <= ch <= "z":
                    rows[i, ord(ch) - 97] += 1
        return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-9)


def test_cosines_and_one_encoder_call_for_the_new_texts_only():
    enc = CountingEncoder()
    similar = StatementSimilarity(enc)
    got = similar("abc", ["abc", "xyz", "abd"])
    assert got[0] == pytest.approx(1.0) and got[1] == pytest.approx(0.0)
    assert got[2] == pytest.approx(2 / 3)
    assert enc.batches == [["abc", "xyz", "abd"]]
    similar("xyz", ["abc", "new"])  # only "new" is encoded
    assert enc.batches[-1] == ["new"] and similar.encoded == 4


def test_the_cache_is_bounded_least_recently_used_first():
    enc = CountingEncoder()
    similar = StatementSimilarity(enc, cache_texts=2)
    similar("aa", ["bb"])
    similar("aa", ["cc"])  # "bb" is the least recently used: dropped
    similar("bb", ["aa"])
    assert enc.batches[-1] == ["bb"]


def test_clear_forgets_every_vector():
    enc = CountingEncoder()
    similar = StatementSimilarity(enc)
    similar("my locker code", ["ZX-4471"])
    similar.clear()  # erasure: the retriever calls it after a user's or tenant's delete
    similar("my locker code", [])
    assert enc.batches[-1] == ["my locker code"]
