"""Late-interaction rerank of the fused candidates with the same encoder's token vectors.

MaxSim (ColBERT-style): each query token takes its best cosine over a memory's tokens; the mean
over query tokens is the memory's score. The bi-encoder's pooled vector loses which word matched
which; token vectors keep it, and list questions ("what has Melanie painted?") gain most
(LoCoMo R@5 +0.014 on nine conversations, docs/BENCHMARKS.md). It costs one encoder pass over
the query and ``rerank_depth`` candidates per query (~+260 ms on 2 CPU cores), so it is off by default.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable, Protocol, runtime_checkable

import numpy as np

from memroute.registry import Registry


@runtime_checkable
class TokenEncoder(Protocol):
    def encode_tokens(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Per text a (tokens, width) float32 array of L2-normalized token vectors."""
        ...


def maxsim(query_tokens: np.ndarray, doc_tokens: np.ndarray) -> float:
    """Mean over query tokens of the best cosine among the document's tokens (0.0 if either is empty)."""
    if len(query_tokens) == 0 or len(doc_tokens) == 0:
        return 0.0
    return float((query_tokens @ doc_tokens.T).max(axis=1).mean())


def _zscore(values: np.ndarray) -> np.ndarray:
    sd = values.std()
    return (values - values.mean()) / sd if sd > 0 else np.zeros_like(values)


def blend_order(fused: Sequence[float], late: Sequence[float], weight: float) -> list[int]:
    """Positions of the candidates sorted by z(fused) + weight * z(late), best first.

    Both score lists are z-scored over the candidates, so ``weight`` means the same whatever the
    fusion's scale; ties keep the fused order.
    """
    if len(fused) != len(late):
        raise ValueError(f"{len(fused)} fused scores but {len(late)} rerank scores")
    if not len(fused):
        return []
    blended = _zscore(np.asarray(fused, float)) + weight * _zscore(np.asarray(late, float))
    return [int(i) for i in np.argsort(-blended, kind="stable")]


# (encoder, query, candidate texts, fused scores, weight) -> new order of the candidates
RerankFn = Callable[[TokenEncoder, str, Sequence[str], Sequence[float], float], list[int]]
RERANKERS: Registry[RerankFn] = Registry("rerank")


@RERANKERS.register("none")
def keep_order(encoder: TokenEncoder, query: str, texts: Sequence[str], fused: Sequence[float],
               weight: float) -> list[int]:
    """``retrieval.rerank=none``: the fused order (the retriever skips the call altogether)."""
    return list(range(len(texts)))


@RERANKERS.register("maxsim")
def maxsim_order(encoder: TokenEncoder, query: str, texts: Sequence[str], fused: Sequence[float],
                 weight: float) -> list[int]:
    """:func:`blend_order` with MaxSim scores of ``texts`` against ``query`` (one encoder call)."""
    if not texts:
        return []
    vectors = encoder.encode_tokens([query, *texts])
    late = [maxsim(vectors[0], doc) for doc in vectors[1:]]
    return blend_order(fused, late, weight)
