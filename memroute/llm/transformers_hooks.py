"""What the transformers back end hands to ``model.generate`` and reads back from it.

The penalties' logits processor, the streamer that feeds a queue, the stopping criterion of a
closed stream, and the per-step log-probs of the output logits: torch-level plumbing, kept apart
from :class:`~memroute.llm.transformers_backend.TransformersBackend`'s request handling. Torch is
imported inside each call, so importing this module loads no engine.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from typing import Any


class PenaltyProcessor:
    """OpenAI's presence / frequency penalties as a ``LogitsProcessor``:
    ``logit[t] -= presence * (count_t > 0) + frequency * count_t``, where ``count_t`` counts
    ``t`` among the tokens generated so far in that row (``input_ids[:, prompt_width:]``)."""

    def __init__(self, prompt_width: int, presence: float, frequency: float) -> None:
        self.prompt_width = prompt_width
        self.presence = float(presence)
        self.frequency = float(frequency)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        generated = input_ids[:, self.prompt_width :]
        if generated.shape[1] == 0:
            return scores
        counts = torch.zeros_like(scores)
        counts.scatter_add_(1, generated, torch.ones_like(generated, dtype=scores.dtype))
        return scores - self.presence * (counts > 0).to(scores.dtype) - self.frequency * counts


class QueueStreamer:
    """A ``generate`` streamer that hands each step's token ids to a queue (prompt skipped)."""

    def __init__(self, out: queue.Queue) -> None:
        self.out = out
        self.prompt_seen = False

    def put(self, value: Any) -> None:
        if not self.prompt_seen:  # generate() first puts the prompt
            self.prompt_seen = True
            return
        self.out.put([int(t) for t in value.reshape(-1).tolist()])

    def end(self) -> None:
        pass


class Cancelled:
    """A stopping criterion that ends generation once ``event`` is set (a closed stream)."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, input_ids: Any, scores: Any, **_: Any) -> Any:
        import torch

        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool)


def step_logprobs(
    logits: Sequence[Any], gen: Any, k: int = 2
) -> tuple[list[list[float]], list[list[float]], list[list[list[tuple[int, float]]]]]:
    """Per row: log p of the generated token, of the best other token, and the top-``k``
    ``(token id, log p)`` at every step (``k >= 2``).

    One step at a time, so memory stays at batch x vocabulary (not x steps).
    """
    import torch

    rows = gen.shape[0]
    chosen: list[list[float]] = [[] for _ in range(rows)]
    alts: list[list[float]] = [[] for _ in range(rows)]
    tops: list[list[list[tuple[int, float]]]] = [[] for _ in range(rows)]
    for t, step in enumerate(logits):
        logp = torch.log_softmax(step.float(), dim=-1)  # [B, V]
        token = gen[:, t]
        picked, tokens = logp.gather(1, token[:, None])[:, 0].tolist(), token.tolist()
        top = logp.topk(max(2, k), dim=-1)
        top_v, top_i = top.values.tolist(), top.indices.tolist()
        for b in range(rows):
            chosen[b].append(picked[b])
            # the alternative is the top-2 unless the chosen token is not the top-1
            alts[b].append(top_v[b][1] if top_i[b][0] == tokens[b] else top_v[b][0])
            tops[b].append(list(zip(top_i[b], top_v[b])))
    return chosen, alts, tops
