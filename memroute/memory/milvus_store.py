"""Turn-pair memories in Milvus: a Milvus Lite file by default, a server by URI.

One collection holds every user; ``user_id`` is the partition key, and every read carries a
user filter built by :mod:`memroute.memory.filters` (validated id, template parameters or a
checked literal), so a request can only ever see its own user's rows.

This class is the :class:`~memroute.memory.base.MemoryStore` API over one collection; setting it
up is :mod:`.milvus_collection`, the write path :mod:`.milvus_writes`, rows and reads' helpers
:mod:`.milvus_rows`, Milvus' full-text search :mod:`.milvus_fulltext`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from memroute.config.schema import MemoryConfig, is_server_uri
from memroute.errors import BackendError, InvalidRequest
from memroute.memory import filters, milvus_collection, milvus_fulltext, milvus_writes
from memroute.memory.base import UserRows
from memroute.memory.milvus_builds import upsert_keeps_partition_key
from memroute.memory.milvus_collection import LEGACY_FIELDS, OUTPUT_FIELDS, search_params
from memroute.memory.milvus_rows import (MAX_TEXT, READ_BATCH, ReadBreaker, delete_count,
                                         query_pages, read_consistency, reloading,
                                         tenant_scan_filter)
from memroute.memory.milvus_rows import check_varchar as _check_varchar
from memroute.memory.milvus_rows import is_int as _is_int
from memroute.memory.milvus_rows import memory_from_row as _memory
from memroute.memory.milvus_rows import quiet_pymilvus as _quiet_pymilvus
from memroute.memory.milvus_writes import WRITE_BATCH, check_vectors, pair_rows, write_rows
from memroute.types import Memory, TurnPair, chronological_key, validate_user_id

log = logging.getLogger(__name__)


MAX_SEARCH_LIMIT = 16384  # Milvus' top-k ceiling
QUERY_WINDOW = 16384  # rows one plain query may return (Milvus' offset + limit ceiling)


class MilvusMemoryStore:
    """:class:`~memroute.memory.base.MemoryStore` on pymilvus' ``MilvusClient``."""

    def __init__(self, cfg: MemoryConfig, dim: int) -> None:
        index_type, metric = milvus_collection.check_settings(cfg, dim)
        self._consistency = read_consistency(cfg.read_consistency, is_server_uri(cfg.uri))

        self.cfg = cfg
        self.dim = dim
        self.collection = cfg.collection
        self._index_type = index_type
        self._metric = metric
        self.bm25_function = bool(cfg.bm25_function)  # Milvus' own BM25 (search_bm25)
        # Every call fails after its timeout instead of hanging with the server; writes (the
        # flusher's: off the request path, retried) may take longer than reads.
        self._timeout_s, self._write_timeout_s = cfg.timeout_s, cfg.write_timeout_s
        self._breaker = ReadBreaker(pause_s=cfg.timeout_s)
        self.uri = milvus_collection.resolved_uri(cfg)
        self._client = milvus_collection.open_client(cfg, self.uri)
        self._closed = False
        # Collections made before supersession lack its two fields: they keep working, unmarked.
        self.supersession, self._fields = True, OUTPUT_FIELDS
        try:
            self._upsert_ok = upsert_keeps_partition_key(self._client.get_server_version())
            if self._client.has_collection(self.collection):
                if not milvus_collection.check_existing(
                        self._client, self.collection, dim=dim,
                        bm25_function=self.bm25_function, uri=self.uri):
                    self.supersession, self._fields = False, LEGACY_FIELDS
            else:
                milvus_collection.create(self._client, cfg, dim=dim, index_type=index_type,
                                         metric=metric, bm25_function=self.bm25_function,
                                         uri=self.uri)
            # Reopened collections are not searchable until loaded.
            self._client.load_collection(self.collection)
            self._templates = milvus_collection.supports_filter_templates(self._client,
                                                                          self.collection)
        except Exception:
            self.close()
            raise
        log.debug(
            "opened %s collection=%s dim=%d filter_templates=%s",
            self.uri, self.collection, dim, self._templates,
        )

    # ---------------------------------------------------------------- filters
    def _filter_kwargs(self, flt: filters.Filter) -> dict[str, Any]:
        expr, params = flt
        if self._templates:
            return {"filter": expr, "filter_params": params}
        return {"filter": filters.render(expr, params)}

    # ----------------------------------------------------------------- writes
    def upsert(self, pairs: Sequence[TurnPair], vectors: np.ndarray, *,
               known_new: bool = False) -> int:
        """Insert or replace turn-pairs (deterministic ids). Returns the number of rows written.

        ``known_new``: the caller has checked that no id is stored (a bulk ingest's plan), so
        the rows are inserted, not upserted: an upsert deletes first, and on a 2.3 server
        deletes spread over many users stall a bulk load (milvus_writes.py). Validates every
        row before writing any and flushes after a bulk load (unflushed Milvus Lite searches
        are 20-50x slower).
        """
        self._check_open()
        vecs = check_vectors(vectors, len(pairs), self.dim, field="vectors")
        batch = pair_rows(pairs, vecs, supersession=self.supersession)
        write_rows(self._client, self.collection, batch, timeout=self._write_timeout_s,
                   mode="insert" if known_new else "upsert" if self._upsert_ok else "replace")
        if len(batch) >= WRITE_BATCH:
            self.flush()
        return len(batch)

    def mark_superseded(self, user_id: str, marks: Mapping[int, tuple[int, int]]) -> int:
        """Mark ``user_id``'s rows ``{id: (superseded_by, valid_until)}`` as superseded; nothing
        is deleted (the rows are rewritten with the marks: Milvus has no partial update before
        2.6). Returns the rows marked; ids not stored are skipped."""
        self._check_open()
        validate_user_id(user_id)
        if not marks or not self.supersession:
            return 0
        return milvus_writes.mark_superseded(
            self._client, self.collection, user_id, marks, fields=self._fields,
            filter_kwargs=self._filter_kwargs, timeout=self._timeout_s,
            write_timeout=self._write_timeout_s,
            mode="upsert" if self._upsert_ok else "replace")

    def ping(self) -> None:
        """Raise unless the store answers (a cheap call: health checks, the flusher's probe)."""
        self._check_open()
        t = self._timeout_s
        if not self._client.has_collection(self.collection, timeout=t):
            raise RuntimeError(f"the collection {self.collection!r} is gone")
        state = str(self._client.get_load_state(self.collection, timeout=t).get("state", ""))
        if "NotLoad" in state:  # released by a server restart: searchable again once loaded
            log.warning("collection %s was released (%s); loading it again", self.collection, state)
            self._client.load_collection(self.collection)
        self._breaker.reset()  # it answers: reads need not wait out the pause

    def flush(self) -> None:
        self._check_open()
        self._client.flush(self.collection, timeout=self._write_timeout_s)

    # ------------------------------------------------------------------ reads
    def search(self, user_id: str, vector: np.ndarray, limit: int, *,
               time_window: tuple[int, int] | None = None) -> list[tuple[Memory, float]]:
        """Dense search within ``user_id``'s rows: (memory, cosine similarity), best first;
        ``time_window`` = (start, end) keeps the rows whose session_time lies in it (inclusive)."""
        self._check_open()
        flt = filters.user_time_filter(user_id, time_window)
        if not _is_int(limit) or not 1 <= limit <= MAX_SEARCH_LIMIT:
            raise InvalidRequest(
                f"limit must be an integer in 1..{MAX_SEARCH_LIMIT}", field="limit"
            )
        vec = check_vectors(vector, 1, self.dim, field="vector")[0]
        res = self._read(lambda: self._client.search(
            self.collection,
            data=[vec.tolist()],
            anns_field="vector",
            limit=limit,
            output_fields=self._fields,
            search_params={"metric_type": self._metric,
                           "params": search_params(self._index_type, limit)},
            timeout=self._timeout_s,
            **self._filter_kwargs(flt), **self._consistency,
        ))
        hits = [(_memory(h["entity"], h["id"]), float(h["distance"])) for h in res[0]]
        hits.sort(key=lambda mh: -mh[1])  # servers return best first; make it a guarantee
        return hits

    def search_bm25(self, user_id: str, query: str, limit: int, *,
                    time_window: tuple[int, int] | None = None) -> list[tuple[Memory, float]]:
        """Milvus' BM25 within ``user_id``'s rows (and ``time_window``, as :meth:`search`):
        (memory, BM25 score > 0), best first."""
        flt = self._fulltext_request(user_id, query, limit, time_window)
        hits = self._read(lambda: milvus_fulltext.bm25_hits(
            self._client, self.collection, query, limit,
            {**self._filter_kwargs(flt), **self._consistency}, self._fields,
            timeout_s=self._timeout_s,
        ))
        return [(_memory(entity, pk), score) for entity, pk, score in hits]

    def hybrid_search_builtin(
        self, user_id: str, vector: np.ndarray, query: str, limit: int, candidate_k: int,
        rrf_k: int,
    ) -> list[tuple[Memory, float]]:
        """Milvus' own ``hybrid_search`` (dense + BM25, ``RRFRanker(rrf_k)``) within ``user_id``'s
        rows: (memory, RRF score), best first. The baseline the benchmark compares against."""
        flt = self._fulltext_request(user_id, query, limit)
        if not _is_int(candidate_k) or not 1 <= candidate_k <= MAX_SEARCH_LIMIT:
            raise InvalidRequest(
                f"candidate_k must be an integer in 1..{MAX_SEARCH_LIMIT}", field="candidate_k"
            )
        vec = check_vectors(vector, 1, self.dim, field="vector")[0]
        hits = milvus_fulltext.hybrid_hits(
            self._client, self.collection, vector=vec.tolist(), query=query, limit=limit,
            candidate_k=candidate_k, rrf_k=rrf_k,
            dense_params={"metric_type": self._metric,
                          "params": search_params(self._index_type, candidate_k)},
            filter_kwargs=self._filter_kwargs(flt), output_fields=self._fields,
        )
        return [(_memory(entity, pk), score) for entity, pk, score in hits]

    def _fulltext_request(self, user_id: str, query: str, limit: int,
                          time_window: tuple[int, int] | None = None) -> filters.Filter:
        """Checks shared by the BM25 searches; returns the user (and time) filter."""
        self._check_open()
        milvus_fulltext.require(self.bm25_function, self.collection)
        flt = filters.user_time_filter(user_id, time_window)
        if not _is_int(limit) or not 1 <= limit <= MAX_SEARCH_LIMIT:
            raise InvalidRequest(
                f"limit must be an integer in 1..{MAX_SEARCH_LIMIT}", field="limit"
            )
        if not isinstance(query, str) or not query.strip():
            raise InvalidRequest("query must be a non-empty string", field="query")
        _check_varchar(query, MAX_TEXT, "query")
        return flt

    def list_user(self, user_id: str, *, fresh: bool = False) -> list[Memory]:
        """Every memory of one user, oldest session first (paged: users may exceed 16384 rows).
        ``fresh``: a Strong read on a server, which sees every write acknowledged before it, by
        any client (a Session read may miss another replica's latest write for a moment)."""
        rows = [_memory(r, r["id"]) for r in self._read(lambda: self._user_rows(user_id,
                                                                               fresh=fresh))]
        return sorted(rows, key=lambda m: (*chronological_key(m), m.id))

    def _read(self, call: Any) -> Any:
        """A read on the request path (see milvus_rows.reloading and ReadBreaker)."""
        return reloading(self._client, self.collection, call, self._breaker)

    def _user_rows(self, user_id: str, fields: list[str] | None = None, *,
                   fresh: bool = False) -> list[dict]:
        """One plain query while the user has fewer than QUERY_WINDOW rows (it honours the
        timeout, and the consistency: pymilvus' query_iterator retries a server that does not
        answer for a minute and opens with a Strong query), the paged iterator beyond."""
        self._check_open()
        fields = fields or self._fields
        consistency = {"consistency_level": "Strong"} if fresh and self._consistency else \
            self._consistency
        res = self._client.query(self.collection, output_fields=fields, limit=QUERY_WINDOW,
                                 timeout=self._timeout_s,
                                 **self._filter_kwargs(filters.user_filter(user_id)),
                                 **consistency)
        if len(res) < QUERY_WINDOW:
            return list(res)
        return list(self._pages(self._iter_kwargs(user_id), READ_BATCH, fields))

    def list_user_vectors(self, user_id: str, *, fresh: bool = False) -> UserRows:
        """The user's memories with their vectors, row for row, in one read (the retriever's
        in-process dense leg, ``retrieval.hot_vectors``); ``fresh`` as in :meth:`list_user`."""
        rows = self._read(lambda: self._user_rows(user_id, [*self._fields, "vector"],
                                                  fresh=fresh))
        vectors = np.asarray([r["vector"] for r in rows], dtype=np.float32).reshape(len(rows), self.dim)
        return UserRows([_memory(r, r["id"]) for r in rows], vectors)

    def iter_user(self, user_id: str, *, batch_size: int = READ_BATCH) -> Iterator[Memory]:
        """Stream one user's memories page by page (validates the id before returning)."""
        self._check_open()
        return (_memory(r, r["id"]) for r in self._pages(self._iter_kwargs(user_id), batch_size))

    def _iter_kwargs(self, user_id: str) -> dict[str, Any]:
        expr, params = filters.user_filter(user_id)
        if self._templates:  # query_iterator forwards extra kwargs to every page's query
            return {"filter": expr, "expr_params": params}
        return {"filter": filters.render(expr, params)}

    def _pages(self, kwargs: dict[str, Any], batch_size: int,
               fields: list[str] | None = None) -> Iterator[dict]:
        return query_pages(self._client, self.collection, batch_size=batch_size,
                           fields=fields or self._fields,
                           timeout_s=self._timeout_s, **kwargs)

    def index_progress(self) -> tuple[int, int, bool]:
        """(indexed rows, pending rows, finished) of the vector index: a server indexes sealed
        segments in the background and brute-forces the rest, so bulk loads wait for it."""
        self._check_open()
        info = self._client.describe_index(self.collection, "vector")
        return (int(info.get("indexed_rows", 0)), int(info.get("pending_index_rows", 0)),
                info.get("state") == "Finished")

    def count(self, user_id: str | None = None) -> int:
        self._check_open()
        if user_id is None:
            kwargs: dict[str, Any] = {"filter": ""}
        else:
            kwargs = self._filter_kwargs(filters.user_filter(user_id))
        res = self._read(lambda: self._client.query(
            self.collection, output_fields=["count(*)"], timeout=self._timeout_s, **kwargs))
        return int(res[0]["count(*)"]) if res else 0

    def existing_ids(self, user_id: str, ids: Sequence[int]) -> set[int]:
        """Which of ``ids`` are stored among ``user_id``'s rows (lookups in pages of
        :data:`READ_BATCH`; bulk ingest uses it to skip what an earlier run wrote)."""
        self._check_open()
        validate_user_id(user_id)  # also when ``ids`` is empty
        wanted = list(dict.fromkeys(ids))
        found: set[int] = set()
        for start in range(0, len(wanted), READ_BATCH):
            chunk = wanted[start : start + READ_BATCH]
            flt = filters.ids_filter(user_id, chunk)  # validates the user and every id
            res = self._client.query(
                self.collection, output_fields=["id"], limit=len(chunk), timeout=self._timeout_s,
                **self._filter_kwargs(flt),
            )
            found.update(int(r["id"]) for r in res)
        return found

    # ---------------------------------------------------------------- erasure
    def delete_user(self, user_id: str) -> int:
        """Delete every row of ``user_id`` (exact ``user_id ==`` filter); returns rows deleted,
        0 when there were none (so a second call is a no-op). Call :meth:`flush` after."""
        self._check_open()
        flt = filters.user_filter(user_id)
        return delete_count(self._client.delete(self.collection, **self._filter_kwargs(flt)))

    def delete_ids(self, user_id: str, ids: Sequence[int]) -> int:
        """Delete the given primary keys among ``user_id``'s rows; returns rows deleted."""
        self._check_open()
        validate_user_id(user_id)
        wanted, deleted = list(dict.fromkeys(ids)), 0
        for start in range(0, len(wanted), READ_BATCH):
            flt = filters.ids_filter(user_id, wanted[start : start + READ_BATCH])
            deleted += delete_count(self._client.delete(self.collection, **self._filter_kwargs(flt)))
        return deleted

    def tenant_users(self, tenant: str) -> set[str]:
        """The user ids with rows in the store that belong to ``tenant`` (``tenant:...``)."""
        self._check_open()
        expr, prefix = tenant_scan_filter(tenant)
        with _quiet_pymilvus(logging.ERROR):
            it = self._client.query_iterator(
                self.collection, batch_size=READ_BATCH, output_fields=["user_id"], filter=expr
            )
        users: set[str] = set()
        try:
            while page := it.next():
                users.update(u for r in page if (u := r["user_id"]).startswith(prefix))
        finally:
            it.close()
        return users

    def delete_tenant(self, tenant: str) -> int:
        """Delete every row of every user of ``tenant``; returns rows deleted. The users are
        found by a ``like "tenant:%"`` scan checked by exact prefix, then deleted one by one
        with the exact user filter, so no other tenant's row can match."""
        return sum(self.delete_user(uid) for uid in sorted(self.tenant_users(tenant)))

    # -------------------------------------------------------------- lifecycle
    def close(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        self._client.close()

    def __enter__(self) -> MilvusMemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise BackendError("the memory store is closed")
