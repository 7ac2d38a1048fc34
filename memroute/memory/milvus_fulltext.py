"""Milvus' own BM25 (full-text search) for the Milvus memory store.

With ``memory.bm25_function`` the collection's ``text`` field is analyzed, a BM25 function
fills a ``sparse`` SPARSE_FLOAT_VECTOR field on every write, and a SPARSE_INVERTED_INDEX
(metric BM25) serves keyword search inside Milvus. Needs Milvus >= 2.5 or Milvus Lite 3.x
(Milvus 2.3/2.4 have no BM25 function).

Differences from the in-process index (memroute.retrieval.bm25), which the benchmark measures:
- The analyzer is Milvus' ``standard`` tokenizer + lowercase + the same stopword list: no word
  n-grams, no joined compound variants (``ZX-4471`` gives ``zx`` and ``4471``, not ``zx4471``).
- Term statistics (N, avgdl, df) are the collection's (every user's rows; Milvus Lite 3.2.2 even
  keeps them per segment), not the user's own; scoring is still restricted to the user's rows.
- k1 / b are index parameters, fixed when the collection is created (:data:`INDEX_PARAMS`).

Milvus Lite returns BM25 scores negated; Milvus servers return them positive. :func:`bm25_hits`
returns the magnitude, so scores are "higher is better" on both.
"""

from __future__ import annotations

import re
from typing import Any

from memroute.errors import ConfigError

FIELD = "memory.bm25_function"
SPARSE_FIELD = "sparse"
FUNCTION_NAME = "text_bm25"
# The RetrievalConfig defaults of the in-process index, so both legs score alike.
INDEX_PARAMS: dict[str, Any] = {"bm25_k1": 1.5, "bm25_b": 0.75}
MIN_VERSION = (2, 5)

Hit = tuple[dict[str, Any], Any, float]  # (entity, primary key, score)


def check_server_version(version: str) -> None:
    """Refuse servers older than Milvus 2.5 (no sparse vectors / BM25 function).

    Milvus Lite reports ``milvus_lite-3.2.2``, servers ``v2.5.4`` and the like; an unparseable
    version passes, and a failing create is reported by :func:`unsupported`.
    """
    m = re.search(r"(\d+)\.(\d+)", version or "")
    if m and (int(m[1]), int(m[2])) < MIN_VERSION:
        raise ConfigError(
            f"memory.bm25_function needs Milvus >= 2.5 or Milvus Lite 3.x (BM25 function and "
            f"sparse vectors); the server reports {version!r}. Set memory.bm25_function=false "
            "and retrieval.bm25_backend=inprocess",
            field=FIELD,
        )


def unsupported(exc: Exception, uri: str) -> ConfigError:
    """The error for a server that refused the BM25 schema."""
    return ConfigError(
        f"Milvus at {uri} refused the BM25 schema ({exc}); memory.bm25_function needs Milvus "
        ">= 2.5 or Milvus Lite 3.x. Set memory.bm25_function=false and "
        "retrieval.bm25_backend=inprocess",
        field=FIELD,
    )


def analyzer_params() -> dict[str, Any]:
    """Milvus' standard tokenizer, lowercased, without the in-process index's stopwords."""
    # Imported here: memroute.retrieval imports the memory package.
    from memroute.text.tokenize import STOPWORDS

    return {
        "tokenizer": "standard",
        "filter": ["lowercase", {"type": "stop", "stop_words": sorted(STOPWORDS)}],
    }


def text_field_params(enabled: bool) -> dict[str, Any]:
    """Extra ``add_field`` arguments of the ``text`` field."""
    return {"enable_analyzer": True, "analyzer_params": analyzer_params()} if enabled else {}


def add_bm25(schema: Any, index_params: Any) -> None:
    """Add the sparse field, the BM25 function text -> sparse and its index."""
    from pymilvus import DataType, Function, FunctionType

    schema.add_field(SPARSE_FIELD, DataType.SPARSE_FLOAT_VECTOR)
    schema.add_function(
        Function(
            name=FUNCTION_NAME,
            function_type=FunctionType.BM25,
            input_field_names=["text"],
            output_field_names=[SPARSE_FIELD],
        )
    )
    index_params.add_index(
        field_name=SPARSE_FIELD,
        index_type="SPARSE_INVERTED_INDEX",
        metric_type="BM25",
        params=dict(INDEX_PARAMS),
    )


def has_bm25(desc: dict[str, Any]) -> bool:
    """Whether a ``describe_collection`` result has a BM25 function writing :data:`SPARSE_FIELD`."""
    from pymilvus import DataType, FunctionType

    fields = {f["name"]: f for f in desc.get("fields", [])}
    sparse = fields.get(SPARSE_FIELD)
    if sparse is None or int(sparse.get("type", -1)) != int(DataType.SPARSE_FLOAT_VECTOR):
        return False
    for fn in desc.get("functions", []) or []:
        try:
            bm25 = int(fn.get("type", -1)) == int(FunctionType.BM25)
        except (TypeError, ValueError):
            bm25 = str(fn.get("type", "")).upper().endswith("BM25")
        # Lite renders the names as a string "['sparse']", servers as a list.
        if bm25 and SPARSE_FIELD in str(fn.get("output_field_names", "")):
            return True
    return False


def check_schema(desc: dict[str, Any], enabled: bool, collection: str, uri: str) -> None:
    """An existing collection must match ``memory.bm25_function`` (the config describes it)."""
    present = has_bm25(desc)
    if enabled and not present:
        raise ConfigError(
            f"collection {collection!r} at {uri} was created without Milvus BM25 (no BM25 "
            f"function into a {SPARSE_FIELD!r} field) but memory.bm25_function=true: set it to "
            "false, or choose another memory.collection (a new one is created with BM25)",
            field=FIELD,
        )
    if present and not enabled:
        raise ConfigError(
            f"collection {collection!r} at {uri} was created with Milvus BM25 but "
            "memory.bm25_function=false: set memory.bm25_function=true, or choose another "
            "memory.collection",
            field=FIELD,
        )


def require(enabled: bool, collection: str) -> None:
    if not enabled:
        raise ConfigError(
            f"collection {collection!r} is opened without Milvus BM25: set "
            "memory.bm25_function=true (on a new collection) to search it by keywords",
            field=FIELD,
        )


def bm25_hits(
    client: Any,
    collection: str,
    query: str,
    limit: int,
    filter_kwargs: dict[str, Any],
    output_fields: list[str],
    timeout_s: float | None = None,
) -> list[Hit]:
    """BM25 search in Milvus, best first; only hits scoring above 0."""
    res = client.search(
        collection,
        data=[query],
        anns_field=SPARSE_FIELD,
        limit=limit,
        output_fields=output_fields,
        search_params={"metric_type": "BM25"},
        timeout=timeout_s,
        **filter_kwargs,
    )
    hits = [(h["entity"], h["id"], abs(float(h["distance"]))) for h in res[0]]
    hits = [h for h in hits if h[2] > 0]
    hits.sort(key=lambda h: -h[2])
    return hits


def hybrid_hits(
    client: Any,
    collection: str,
    *,
    vector: list[float],
    query: str,
    limit: int,
    candidate_k: int,
    rrf_k: int,
    dense_params: dict[str, Any],
    filter_kwargs: dict[str, Any],
    output_fields: list[str],
) -> list[Hit]:
    """Milvus' built-in ``hybrid_search``: dense + BM25 requests (each ``candidate_k``, both
    filtered to the user), fused server-side by ``RRFRanker(rrf_k)``; RRF scores, best first."""
    from pymilvus import AnnSearchRequest, RRFRanker

    flt = {"filter": filter_kwargs["filter"], "expr_params": filter_kwargs.get("filter_params")}
    reqs = [
        AnnSearchRequest(
            data=[vector], anns_field="vector", param=dense_params, limit=candidate_k, **flt
        ),
        AnnSearchRequest(
            data=[query], anns_field=SPARSE_FIELD, param={"metric_type": "BM25"},
            limit=candidate_k, **flt,
        ),
    ]
    res = client.hybrid_search(
        collection, reqs, RRFRanker(rrf_k), limit=limit, output_fields=output_fields
    )
    return [(h["entity"], h["id"], float(h["distance"])) for h in res[0]]
