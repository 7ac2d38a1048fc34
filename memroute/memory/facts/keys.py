"""Open-vocabulary fact keys: a key the extractor proposes is normalised, checked, and mapped
to the user's own key for the same fact type (``extraction.keys=open``).

With a fixed schema the model must file every fact under one of a few keys, and a fact with
no key of its own lands on the nearest one: the replay's rabbit "Wombat" became ``user.name``
and was then superseded by the parrot "Dumpling". With open keys the model proposes a key
(``pet.rabbit.name``) and a value-free description of the fact ("the name of the user's pet
rabbit"), and:

- :func:`normalize_key` lowercases it, turns spaces and dashes into ``_`` and checks the
  shape (dotted segments of ``a-z 0-9 _``, at most :data:`MAX_OPEN_KEY_CHARS` characters and
  :data:`MAX_KEY_SEGMENTS` segments); a key that cannot be made valid is refused with the
  reason (:class:`KeyRejected`), and the extractor drops that one fact and counts it;
- :class:`KeyCanonicalizer` maps it to the user's most similar existing key when the cosine
  of their texts (:func:`key_text`: the key's words and the description, one embedding each)
  is at least ``extraction.key_match_threshold``, else it stays a new key. So
  ``rabbit_name`` and ``pet.rabbit.name`` merge, while ``pet.rabbit.name`` and
  ``pet.parrot.name`` stay two keys (the threshold is measured: bench/bench_key_match.py).
  An exact match needs no encoder; without one only exact matches merge.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memroute.embedding.base import Encoder
from memroute.errors import ConfigError, MemrouteError

MAX_OPEN_KEY_CHARS = 64  # a proposed key is a short path, not a sentence
MAX_KEY_SEGMENTS = 4  # pet.rabbit.name; deeper paths are descriptions in disguise
MAX_KEY_DESCRIPTION_CHARS = 160
KEY_PATTERN = r"^[a-z0-9_]+(\.[a-z0-9_]+){0,3}$"  # the constrained output's key (4 segments)
_SEPARATORS = re.compile(r"[\s\-/]+")
_AROUND_DOTS = re.compile(r"_*\._*")
_UNDERSCORES = re.compile(r"_{2,}")
_BAD_CHARS = re.compile(r"[^a-z0-9_.]")


class KeyRejected(MemrouteError):
    """A proposed key that cannot be made a valid fact key; ``reason`` says why."""

    status = 422
    code = "key_rejected"


def normalize_key(raw: object) -> str:
    """``raw`` as a fact key (``"Pet Rabbit-Name"`` -> ``"pet_rabbit_name"``), or
    :class:`KeyRejected` naming what is wrong with it."""
    if not isinstance(raw, str):
        raise KeyRejected(f"key must be a string, got {type(raw).__name__}", field="key")
    key = _SEPARATORS.sub("_", raw.strip().lower())
    key = _UNDERSCORES.sub("_", _AROUND_DOTS.sub(".", key)).strip("_")
    shown = raw[:40]
    if not key:
        raise KeyRejected("key is empty", field="key")
    bad = sorted(set(_BAD_CHARS.findall(key)))
    if bad:
        raise KeyRejected(f"key {shown!r} has characters outside a-z 0-9 _ . "
                          f"({' '.join(repr(c) for c in bad[:5])})", field="key")
    segments = key.split(".")
    if any(not s for s in segments):
        raise KeyRejected(f"key {shown!r} has an empty segment (a leading, trailing or "
                          "doubled dot)", field="key")
    if len(key) > MAX_OPEN_KEY_CHARS:
        raise KeyRejected(f"key {shown!r} has {len(key)} characters; at most "
                          f"{MAX_OPEN_KEY_CHARS}", field="key")
    if len(segments) > MAX_KEY_SEGMENTS:
        raise KeyRejected(f"key {shown!r} has {len(segments)} segments; at most "
                          f"{MAX_KEY_SEGMENTS}", field="key")
    return key


def key_words(key: str) -> str:
    """The key as words: ``pet.rabbit.name`` -> ``pet rabbit name``."""
    return " ".join(key.replace(".", " ").replace("_", " ").split())


def key_text(key: str, description: str = "") -> str:
    """What is embedded for a key: its words, and the value-free description when known."""
    words = key_words(key)
    description = " ".join(description.split())
    return f"{words}: {description}" if description else words


@dataclass(frozen=True)
class KnownKey:
    """One of the user's keys: its category in the store and its description ("" if none)."""

    key: str
    category: str
    description: str = ""


@dataclass(frozen=True)
class Resolution:
    """Where a proposed key went: ``key`` is the canonical key; ``known`` the user's key it
    matched (``None``: a new key); ``similarity`` the cosine of an embedding match."""

    proposed: str
    key: str
    known: KnownKey | None
    similarity: float | None = None

    @property
    def merged(self) -> bool:
        """A different spelling mapped onto an existing key."""
        return self.known is not None and self.key != self.proposed


class KeyCanonicalizer:
    """Maps proposed keys to a user's existing keys (see the module doc); thread-safe. Vectors
    of key texts are kept (least recently used, ``cache_size`` texts): a user's keys are
    embedded once, not on every extraction."""

    def __init__(self, encoder: Encoder | None, threshold: float, *,
                 cache_size: int = 4096) -> None:
        number = isinstance(threshold, (int, float)) and not isinstance(threshold, bool)
        if not number or not 0.0 < threshold <= 1.0:
            raise ConfigError(f"key_match_threshold must be a number in (0, 1], got "
                              f"{threshold!r}", field="extraction.key_match_threshold")
        self.encoder = encoder
        self.threshold = float(threshold)
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = max(0, int(cache_size))
        self._lock = threading.Lock()

    def _vectors(self, texts: Sequence[str]) -> np.ndarray:
        assert self.encoder is not None
        with self._lock:
            have = {t: self._cache[t] for t in texts if t in self._cache}
            for t in have:
                self._cache.move_to_end(t)
        todo = list(dict.fromkeys(t for t in texts if t not in have))
        if todo:
            fresh = np.asarray(self.encoder.encode(todo), dtype=np.float32)
            with self._lock:
                for t, v in zip(todo, fresh, strict=True):
                    have[t] = v
                    self._cache[t] = v
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return np.stack([have[t] for t in texts]).astype(np.float32)

    def resolve(self, proposals: Sequence[tuple[str, str]], known: Sequence[KnownKey]
                ) -> list[Resolution]:
        """One :class:`Resolution` per ``(key, description)`` proposal (keys normalised
        already), in order. A proposal kept as new joins the candidates of the next ones, so
        two spellings in one output merge too."""
        candidates = list(known)
        by_key = {k.key: k for k in candidates}
        out: list[Resolution] = []
        vecs = None
        if self.encoder is not None and proposals:
            texts = [key_text(k, d) for k, d in proposals]
            texts += [key_text(k.key, k.description) for k in candidates]
            vecs = self._vectors(texts)
        n = len(proposals)
        cand_rows = list(range(n, n + len(candidates)))  # candidates' rows in vecs
        for i, (key, description) in enumerate(proposals):
            if key in by_key:
                out.append(Resolution(key, key, by_key[key]))
                continue
            if vecs is not None and cand_rows:
                sims = vecs[cand_rows] @ vecs[i]
                best = int(np.argmax(sims))
                if float(sims[best]) >= self.threshold:
                    match = candidates[best]
                    out.append(Resolution(key, match.key, match, float(sims[best])))
                    continue
            new = KnownKey(key, "", description)
            candidates.append(new)
            by_key[key] = new
            cand_rows.append(i)
            out.append(Resolution(key, key, None))
        return out


__all__ = [
    "KEY_PATTERN",
    "MAX_KEY_DESCRIPTION_CHARS",
    "MAX_KEY_SEGMENTS",
    "MAX_OPEN_KEY_CHARS",
    "KeyCanonicalizer",
    "KeyRejected",
    "KnownKey",
    "Resolution",
    "key_text",
    "key_words",
    "normalize_key",
]
