"""The Milvus store's collection: its settings checked, the client opened, the collection created
with its vector index (and Milvus' BM25 function), a reopened one checked against the encoder
and the schema, and what the server supports (filter templates, search parameters)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from memroute.config.schema import MemoryConfig, is_server_uri
from memroute.errors import BackendError, ConfigError
from memroute.memory import filters, milvus_fulltext
from memroute.memory.milvus_rows import client_options, quiet_pymilvus, turn_pair_schema

log = logging.getLogger(__name__)

INDEX_PARAMS: dict[str, dict[str, Any]] = {
    "FLAT": {},
    "IVF_FLAT": {"nlist": 128},
    "HNSW": {"M": 16, "efConstruction": 200},
    "AUTOINDEX": {},
}
# Scores are cosine similarities; IP equals cosine on the encoder's L2-normalized vectors.
METRICS = ("COSINE", "IP")
LEGACY_FIELDS = ["id", "user_id", "text", "session_id", "turn_index", "session_time",
                 "source_model", "created_at"]
SUPERSESSION_FIELDS = ["superseded_by", "valid_until"]
OUTPUT_FIELDS = [*LEGACY_FIELDS, *SUPERSESSION_FIELDS]


def check_settings(cfg: MemoryConfig, dim: int) -> tuple[str, str]:
    """``(index_type, metric)`` upper-cased, once every setting the collection needs is valid."""
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise ConfigError(
            f"embedding dim must be a positive integer, got {dim!r}", field="embedder.dim"
        )
    index_type = cfg.index_type.upper()
    if index_type not in INDEX_PARAMS:
        raise ConfigError(
            f"Unknown index_type {cfg.index_type!r}. Available: {', '.join(INDEX_PARAMS)}",
            field="memory.index_type",
        )
    metric = cfg.metric.upper()
    if metric not in METRICS:
        raise ConfigError(
            f"metric {cfg.metric!r} is not supported: scores are cosine similarities, "
            f"use one of {', '.join(METRICS)}",
            field="memory.metric",
        )
    if cfg.num_partitions < 1:
        raise ConfigError("num_partitions must be >= 1", field="memory.num_partitions")
    if not cfg.collection:
        raise ConfigError("collection must not be empty", field="memory.collection")
    return index_type, metric


def resolved_uri(cfg: MemoryConfig) -> str:
    """A server URI as given; a Lite file as an absolute path, its folder created."""
    if is_server_uri(cfg.uri):
        return cfg.uri
    path = Path(cfg.uri).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return str(path)


def open_client(cfg: MemoryConfig, uri: str) -> Any:
    """A ``MilvusClient`` on ``uri`` (:func:`resolved_uri`); a failure names ``memory.uri``."""
    from pymilvus import MilvusClient
    from pymilvus.exceptions import MilvusException

    try:
        return MilvusClient(uri=uri, token=cfg.token, timeout=cfg.timeout_s,
                            **client_options(uri))
    except MilvusException as exc:
        hint = (
            ""
            if is_server_uri(cfg.uri)
            else " A Milvus Lite file can be open in one process only; for several processes "
            "run `milvus-lite server --data-dir DIR --host 127.0.0.1` and use its http:// URI."
        )
        raise BackendError(
            f"cannot open Milvus at {uri}: {exc.message}.{hint}", field="memory.uri"
        ) from exc


def create(client: Any, cfg: MemoryConfig, *, dim: int, index_type: str, metric: str,
           bm25_function: bool, uri: str) -> None:
    """Create ``cfg.collection``: the turn-pair schema, its vector index, and with
    ``bm25_function`` Milvus' own BM25 (refused, naming the setting, where unsupported)."""
    from pymilvus.exceptions import MilvusException

    if bm25_function:
        milvus_fulltext.check_server_version(client.get_server_version())
    schema = turn_pair_schema(dim, milvus_fulltext.text_field_params(bm25_function))
    index = client.prepare_index_params()
    index.add_index(
        field_name="vector",
        index_type=index_type,
        metric_type=metric,
        params=INDEX_PARAMS[index_type],
    )
    if bm25_function:
        milvus_fulltext.add_bm25(schema, index)
    try:
        client.create_collection(
            cfg.collection,
            schema=schema,
            index_params=index,
            num_partitions=cfg.num_partitions,
            # A turn-pair written by one request must be visible to the next one.
            consistency_level="Strong",
        )
    except MilvusException as exc:
        if bm25_function:  # a server without sparse vectors / BM25 functions
            raise milvus_fulltext.unsupported(exc, uri) from exc
        raise


def check_existing(client: Any, collection: str, *, dim: int, bm25_function: bool,
                   uri: str) -> bool:
    """Refuse a reopened collection that is not memroute's or holds other vectors; False (with
    a warning) if it predates supersession's fields: it keeps working, unmarked."""
    desc = client.describe_collection(collection)
    fields = {f["name"]: f for f in desc.get("fields", [])}
    missing = [n for n in [*LEGACY_FIELDS, "vector"] if n not in fields]
    if missing:
        raise ConfigError(
            f"collection {collection!r} at {uri} is not a memroute collection "
            f"(missing fields {missing}); choose another memory.collection",
            field="memory.collection",
        )
    stored_dim = int(fields["vector"].get("params", {}).get("dim", -1))
    if stored_dim != dim:
        raise ConfigError(
            f"collection {collection!r} at {uri} stores {stored_dim}-dim vectors but "
            f"the encoder produces {dim}: use the embedder it was built with "
            "(embedder.name / embedder.dim) or another memory.collection",
            field="embedder.dim",
        )
    milvus_fulltext.check_schema(desc, bm25_function, collection, uri)
    if any(n not in fields for n in SUPERSESSION_FIELDS):
        log.warning("collection %s at %s predates supersession (no %s): superseded pairs "
                    "are not marked there; re-ingest into a new memory.collection for it",
                    collection, uri, " / ".join(SUPERSESSION_FIELDS))
        return False
    return True


def supports_filter_templates(client: Any, collection: str) -> bool:
    """True if the server honours ``filter_params`` (Milvus >= 2.5); Lite 3.2.2 does not."""
    from pymilvus.exceptions import MilvusException

    expr, params = filters.user_filter("probe")
    with quiet_pymilvus():
        try:
            client.query(
                collection,
                filter=expr,
                filter_params=params,
                output_fields=["id"],
                limit=1,
            )
        except MilvusException:
            return False
    return True


def search_params(index_type: str, limit: int) -> dict[str, Any]:
    """The index's search parameters for a search of ``limit`` results."""
    if index_type == "HNSW":
        return {"ef": max(64, limit)}
    if index_type == "IVF_FLAT":
        return {"nprobe": 16}
    return {}
