"""How many of a prompt's tokens a prefix cache would have served, counted from token ids.

For engines that report no prefix-cache hits themselves (transformers, the mock engine, an
OpenAI-compatible server without ``prompt_tokens_details``), :class:`PrefixCounter` counts them
the way vLLM's automatic prefix caching finds them: the prompt is cut into full blocks of
``block_size`` tokens, each block identified by its tokens *and* every token before it (a
chained hash), and a prompt reuses the leading blocks some earlier prompt computed. The blocks
are LRU-bounded like the engine's KV pool. The count is what a prefix-caching engine would skip
at prefill; it is not a claim that this engine skipped it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

BLOCK_SIZE = 16  # vLLM's default KV block size
MAX_BLOCKS = 65_536  # ~1M tokens of KV: a small GPU's pool for an 8B model, order of magnitude


class PrefixCounter:
    """Counts prefix-cache hits over the prompts it has seen (thread-safe)."""

    def __init__(self, block_size: int = BLOCK_SIZE, max_blocks: int = MAX_BLOCKS) -> None:
        if block_size < 1 or max_blocks < 1:
            raise ValueError("block_size and max_blocks must be >= 1")
        self.block_size = block_size
        self.max_blocks = max_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self._lock = threading.Lock()

    def _chain(self, ids: Sequence[int]) -> list[int]:
        """The chained hash of every full block of ``ids``, in order."""
        out, parent = [], 0
        n = len(ids) - len(ids) % self.block_size
        for start in range(0, n, self.block_size):
            parent = hash((parent, tuple(ids[start:start + self.block_size])))
            out.append(parent)
        return out

    def cached(self, ids: Sequence[int]) -> int:
        """Tokens of ``ids`` served from the cache (its leading full blocks seen before); the
        prompt's blocks are cached afterwards. The last token is always computed (the engine
        needs its logits), as in vLLM."""
        chain = self._chain(list(ids)[:-1] if ids else ())
        hit = 0
        with self._lock:
            for h in chain:
                if h not in self._blocks:
                    break
                hit += 1
            for h in chain:
                self._blocks[h] = None
                self._blocks.move_to_end(h)
            while len(self._blocks) > self.max_blocks:
                self._blocks.popitem(last=False)
        return hit * self.block_size
