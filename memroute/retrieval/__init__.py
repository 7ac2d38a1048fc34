"""Retrieval of a user's memories: BM25 (per user), dense (store), fusion, the hybrid retriever."""

from __future__ import annotations

from memroute.retrieval.bm25 import BM25Index
from memroute.retrieval.bm25_cache import BM25Cache, MemoryIndex
from memroute.retrieval.fusion import FUSIONS, FusedHit, fuse, get_fusion
from memroute.retrieval.retriever import STRATEGIES, HybridRetriever

__all__ = [
    "BM25Cache",
    "BM25Index",
    "FUSIONS",
    "FusedHit",
    "HybridRetriever",
    "MemoryIndex",
    "STRATEGIES",
    "fuse",
    "get_fusion",
]
