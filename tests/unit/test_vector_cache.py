"""The on-disk vector cache: a second encoder over the same folder embeds nothing, parts written
by several encoders are all read, and a cut-off part is never read."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from memroute.embedding.vector_cache import CachedEncoder


class CountingEncoder:
    name, dim = "fake", 4

    def __init__(self) -> None:
        self.seen: list[str] = []

    def encode(self, texts):
        self.seen.extend(texts)
        out = np.array([[len(t), t.count("a"), 1.0, i] for i, t in enumerate(texts)], np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_cached_vectors_are_read_back_and_never_encoded_twice(tmp_path):
    inner = CountingEncoder()
    first = CachedEncoder(inner, tmp_path)
    texts = ["alpha", "banana", "alpha", "cherry"]
    a = first.encode(texts)
    assert inner.seen == ["alpha", "banana", "cherry"]  # one encode per distinct text
    assert np.allclose(a[0], a[2]) and a.dtype == np.float32 and a.shape == (4, 4)

    again = CountingEncoder()
    second = CachedEncoder(again, tmp_path)  # a re-run, another process: reads the parts
    assert len(second) == 3
    assert "banana" in second and "durian" not in second and 7 not in second
    b = second.encode(["cherry", "alpha", "durian"])
    assert again.seen == ["durian"]
    assert np.allclose(b[0], a[3]) and np.allclose(b[1], a[0])
    assert (second.hits, second.misses) == (2, 1)
    assert second.encode([]).shape == (0, 4)


def test_parts_of_several_writers_are_all_read_and_a_cut_part_is_ignored(tmp_path):
    one, two = CachedEncoder(CountingEncoder(), tmp_path), CachedEncoder(CountingEncoder(), tmp_path)
    one.encode(["x1", "x2"])
    two.encode(["y1"])
    (tmp_path / "fake-4" / ".part-cut.parquet.tmp").write_bytes(b"PAR1 cut off")
    reader = CachedEncoder(CountingEncoder(), tmp_path)
    assert len(reader) == 3
    reader.encode(["x1", "y1", "x2"])
    assert reader.inner.seen == []


def test_a_part_of_another_width_is_refused(tmp_path):
    CachedEncoder(CountingEncoder(), tmp_path).encode(["a"])
    narrow = CountingEncoder()
    narrow.dim = 3  # same name, other width: a folder of its own, so nothing mixes
    assert len(CachedEncoder(narrow, tmp_path)) == 0
    part = next((tmp_path / "fake-4").glob("part-*.parquet"))
    shutil.copy(part, tmp_path / "fake-3" / "part-copied.parquet")  # a misplaced part
    with pytest.raises(ValueError, match="4-dim"):
        CachedEncoder(narrow, tmp_path)
