"""The per-user BM25 cache: each user's :class:`~memroute.retrieval.bm25.BM25Index` with the
memories (and, with ``retrieval.hot_vectors``, the vectors) it was built from, built lazily from
the store, extended in place by the retriever's own writes, LRU-bounded by users and bytes, and
dropped on invalidation or erasure.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from memroute.config.schema import RetrievalConfig
from memroute.errors import ConfigError
from memroute.namespace import SEPARATOR as TENANT_SEPARATOR
from memroute.retrieval.bm25 import DEFAULT_METHOD, BM25Index
from memroute.retrieval.hot_vectors import UserRows, UserVectors
from memroute.retrieval.temporal import takes_keyword
from memroute.types import Memory, validate_user_id

MEMORY_OBJECT_BYTES = 200  # a Memory dataclass instance, its small fields and its dict slot


@dataclass(frozen=True)
class MemoryIndex:
    """One user's BM25 index with the memories it was built from."""

    index: BM25Index
    memories: dict[int, Memory]
    vectors: UserVectors | None = None  # retrieval.hot_vectors: the dense leg in process

    def search(
        self, query: str, limit: int, *, time_window: tuple[int, int] | None = None
    ) -> list[tuple[Memory, float]]:
        """BM25 hits, best first; with ``time_window`` = (start, end) only memories whose
        session_time lies in it (inclusive), so the window does not cost top-k slots."""
        keep = None
        if time_window is not None:
            start, end = time_window
            keep = (self.session_times >= start) & (self.session_times <= end)
        return [(self.memories[i], s) for i, s in self.index.search(query, limit, keep=keep)]

    @cached_property
    def session_times(self) -> np.ndarray:
        """Session time of every document, in index order (built on the first filtered search)."""
        ids = self.index.doc_ids
        return np.fromiter((self.memories[int(i)].session_time for i in ids), dtype=np.int64, count=len(ids))

    def __len__(self) -> int:
        return len(self.memories)

    @cached_property
    def nbytes(self) -> int:
        """Approximate memory held: the index and the memories' texts and objects."""
        held = 0 if self.vectors is None else self.vectors.nbytes
        return held + self.index.nbytes() + sum(sys.getsizeof(m.text) + MEMORY_OBJECT_BYTES
                                                for m in self.memories.values())


# A user's memories, or (retrieval.hot_vectors) the memories with their vectors
Loader = Callable[[str], "Sequence[Memory] | UserRows"]


def _cap_bytes(mb: object) -> int:
    if isinstance(mb, bool) or not isinstance(mb, (int, float)) or not 0 <= mb <= 1_048_576:
        raise ConfigError(f"bm25_cache_mb must be a number of MB in [0, 1048576], got {mb!r}",
                          field="retrieval.bm25_cache_mb")
    return int(mb * 2**20)


@dataclass
class CacheStats:
    """What the per-user BM25 cache did (``/healthz``, the scale benchmark)."""

    users: int = 0  # indexes held now
    bytes: int = 0  # their approximate size (MemoryIndex.nbytes)
    max_bytes: int = 0  # the cap (0: none)
    hits: int = 0
    misses: int = 0  # an index built from the store
    evictions: int = 0  # indexes dropped for the user or byte cap (not erasure / invalidation)


class BM25Cache:
    """Per-user :class:`MemoryIndex`, built lazily from ``loader(user_id)`` and LRU-bounded.

    The retriever invalidates a user whenever it writes that user's memories; the next search
    rebuilds from the store. Writes made elsewhere (another process, a batch ingest) are only
    seen after :meth:`invalidate` / :meth:`clear`. The first rebuild after :meth:`invalidate`
    asks a loader that takes ``fresh`` for a read that sees every write acknowledged before it
    (a Milvus server's Strong read: another replica's write may not be visible yet to a Session
    read, and a rebuild that missed it would be kept). Thread-safe: an index built while the
    user was invalidated is returned to its caller but not cached.
    """

    def __init__(
        self,
        loader: Loader,
        *,
        k1: float = 1.5,
        b: float = 0.75,
        ngram: int = 2,
        method: str = DEFAULT_METHOD,
        stem: bool = False,
        max_users: int = 256,
        max_bytes: int = 0,
    ) -> None:
        if max_users < 1:
            raise ConfigError("max_users must be >= 1", field="bm25.max_users")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ConfigError("max_bytes must be an integer >= 0 (0: no byte cap)",
                              field="retrieval.bm25_cache_mb")
        self._loader = loader
        self._takes_fresh = takes_keyword(loader, "fresh")
        self._reread: set[str] = set()  # invalidated users: the next load reads fresh
        self.k1, self.b, self.ngram, self.method, self.stem = k1, b, ngram, method, stem
        self._build([])  # validates the parameters now rather than on the first search
        self.max_users = max_users
        self.max_bytes = max_bytes
        self._bytes = 0  # sum of the cached entries' nbytes
        self._hits = self._evictions = 0
        self._entries: OrderedDict[str, MemoryIndex] = OrderedDict()
        self._generation: dict[str, int] = {}  # bumped by invalidate(uid)
        self._tenant_generation: dict[str, int] = {}  # bumped by forget_tenant(tenant)
        self._epoch = 0  # bumped by clear()
        self._lock = threading.Lock()
        self.builds = 0  # indexes built so far (observability, tests)

    @classmethod
    def from_config(
        cls, loader: Loader, cfg: RetrievalConfig, *, method: str = DEFAULT_METHOD,
        max_users: int = 256,
    ) -> BM25Cache:
        return cls(
            loader, k1=cfg.bm25_k1, b=cfg.bm25_b, ngram=cfg.ngram, method=method,
            stem=cfg.stem, max_users=max_users, max_bytes=_cap_bytes(cfg.bm25_cache_mb),
        )

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(len(self._entries), self._bytes, self.max_bytes, self._hits,
                              self.builds, self._evictions)

    def _put(self, uid: str, entry: MemoryIndex) -> None:
        """Cache ``entry`` as the newest, then evict the least recently used past either cap
        (the newest always stays: one user larger than the cap is still served from memory
        until the next user comes). Caller holds the lock."""
        old = self._entries.pop(uid, None)
        if old is not None:
            self._bytes -= old.nbytes
        self._entries[uid] = entry
        self._bytes += entry.nbytes
        while len(self._entries) > 1 and (
                len(self._entries) > self.max_users
                or (self.max_bytes and self._bytes > self.max_bytes)):
            _, gone = self._entries.popitem(last=False)
            self._bytes -= gone.nbytes
            self._evictions += 1

    def _drop(self, uid: str) -> bool:
        """Forget ``uid``'s entry (invalidation, erasure). Caller holds the lock."""
        gone = self._entries.pop(uid, None)
        if gone is not None:
            self._bytes -= gone.nbytes
        return gone is not None

    def get(self, user_id: str) -> MemoryIndex:
        uid = validate_user_id(user_id)
        with self._lock:
            entry = self._entries.get(uid)
            if entry is not None:
                self._entries.move_to_end(uid)
                self._hits += 1
                return entry
            stamp = self._stamp(uid)
            fresh = self._takes_fresh and uid in self._reread
        # outside the lock: a store round trip
        loaded = self._loader(uid, fresh=True) if fresh else self._loader(uid)  # type: ignore[call-arg]
        if fresh:
            with self._lock:
                if self._stamp(uid) == stamp:  # not invalidated again meanwhile
                    self._reread.discard(uid)
        if isinstance(loaded, UserRows):
            entry = self._build(list(loaded.memories), loaded.vectors)
        else:
            entry = self._build(list(loaded))
        entry.nbytes  # noqa: B018 - sized here, outside the lock
        with self._lock:
            self.builds += 1
            # Cache it only if no invalidation happened while it was being built.
            if self._stamp(uid) == stamp:
                self._put(uid, entry)
        return entry

    def _build(self, memories: Sequence[Memory], vectors: np.ndarray | None = None,
               *, hot: UserVectors | None = None) -> MemoryIndex:
        index = BM25Index(
            ((m.id, m.text) for m in memories),
            k1=self.k1, b=self.b, ngram=self.ngram, method=self.method, stem=self.stem,
        )
        if hot is None and vectors is not None:
            hot = UserVectors.of(memories, vectors)
        return MemoryIndex(index, {m.id: m for m in memories}, hot)

    def peek(self, user_id: str) -> MemoryIndex | None:
        """The cached entry of ``user_id``, or None, without loading it (no LRU bump)."""
        with self._lock:
            return self._entries.get(user_id)

    def extend(self, memories: Iterable[Memory], vectors: np.ndarray | None = None) -> None:
        """Add freshly written memories to the users' cached indexes (a rebuild from the cached
        rows, ~60 ms for 1,000 memories) instead of dropping them: re-reading a user's rows from
        Milvus Lite costs seconds. Users without a cached index are only invalidated. An index
        holding vectors keeps them only if ``vectors`` (row for row) come with the memories."""
        items = list(memories)
        by_user: dict[str, list[int]] = {}
        for i, m in enumerate(items):
            by_user.setdefault(m.user_id, []).append(i)
        for uid, rows in by_user.items():
            new = [items[i] for i in rows]
            with self._lock:
                # Bumped first: a build from the store that started before this write is stale.
                self._generation[uid] = self._generation.get(uid, 0) + 1
                stamp = self._stamp(uid)
                entry = self._entries.get(uid)
                self._drop(uid)
            if entry is None:
                continue
            merged = {**entry.memories, **{m.id: m for m in new}}
            hot = None
            if entry.vectors is not None and vectors is not None:
                hot = entry.vectors.merged(new, np.asarray(vectors)[rows])
            rebuilt = self._build(list(merged.values()), hot=hot)
            rebuilt.nbytes  # noqa: B018 - sized here, outside the lock
            with self._lock:
                if self._stamp(uid) == stamp:
                    self._put(uid, rebuilt)

    def invalidate(self, user_id: str) -> None:
        with self._lock:
            self._drop(user_id)
            self._generation[user_id] = self._generation.get(user_id, 0) + 1
            self._reread.add(user_id)

    def _stamp(self, uid: str) -> tuple[int, int, int]:
        """What must not change while an index of ``uid`` is built (caller holds the lock)."""
        tenant = uid.partition(TENANT_SEPARATOR)[0]
        return self._epoch, self._generation.get(uid, 0), self._tenant_generation.get(tenant, 0)

    def forget_user(self, user_id: str) -> bool:
        """Erasure: drop ``user_id``'s index (and the memories it holds); an index being built
        from the store meanwhile is not cached. True if one was cached."""
        uid = validate_user_id(user_id)
        with self._lock:
            found = self._drop(uid)
            self._generation[uid] = self._generation.get(uid, 0) + 1
            self._reread.discard(uid)
        return found

    def forget_tenant(self, tenant: str) -> int:
        """Erasure: drop the index of every user ``tenant:...``; returns how many were cached."""
        prefix = f"{tenant}{TENANT_SEPARATOR}"
        with self._lock:
            self._tenant_generation[tenant] = self._tenant_generation.get(tenant, 0) + 1
            gone = [uid for uid in self._entries if uid.startswith(prefix)]
            for uid in gone:
                self._drop(uid)
        return len(gone)

    def invalidate_many(self, user_ids: Iterable[str]) -> None:
        for uid in set(user_ids):
            self.invalidate(uid)

    def clear(self) -> None:
        with self._lock:
            self._epoch += 1
            self._entries.clear()
            self._bytes = 0

    def __contains__(self, user_id: object) -> bool:
        with self._lock:
            return user_id in self._entries
