"""The replay's ``memroute_facts`` strategy: memroute with the fact layer, as the served app runs it.

The served app extracts facts from stored turn-pairs in a background lane
(:mod:`memroute.memory.facts.lane`) and the router injects each user's current facts.
The replay does the same with one difference: the lane's runs are waited for before the next
wave, so a replay is reproducible (in production a fact lands a few seconds after its turn).
Everything else is the served code: the extraction queue and its token threshold
(``extraction.threshold_tokens``), the per-user lock, supersession, the facts block.

The fact store is a SQLite file in the run folder (``facts.sqlite3``): a resumed run keeps its
facts and its queue, as a restarted replica does.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memroute.config.extraction import ExtractionConfig, check_extraction_config
from memroute.llm.base import Backend
from memroute.memory.facts import FactStore
from memroute.memory.facts.extraction import Extractor
from memroute.memory.facts.extraction_schema import ExtractionSchema
from memroute.memory.facts.lane import ExtractionLane
from memroute.types import TurnPair

FACTS_FILE = "facts.sqlite3"


class FeedingRetriever:
    """The strategy's retriever: what the router stores is also queued for extraction, and the
    runs it triggers finish before ``remember`` returns (one wave's answers, then its facts)."""

    def __init__(self, retriever: Any, lane: ExtractionLane) -> None:
        self.retriever = retriever
        self.lane = lane

    def __getattr__(self, name: str) -> Any:  # retrieve_many, cfg, ... are the retriever's
        return getattr(self.__dict__["retriever"], name)

    def remember(self, pairs: Sequence[TurnPair]) -> int:
        written = self.retriever.remember(pairs)
        done, _ = wait(self.lane.observe(list(pairs)))
        for f in done:
            f.result()  # the lane logs and counts a failed run; a bug here should surface
        return int(written)


@dataclass
class ReplayFacts:
    store: FactStore
    lane: ExtractionLane

    def feeding(self, retriever: Any) -> FeedingRetriever:
        return FeedingRetriever(retriever, self.lane)

    def stats(self) -> dict[str, int]:
        return self.lane.stats()

    def close(self) -> None:
        self.lane.close()
        self.store.close()


def replay_facts(cfg: ExtractionConfig, backend: Backend, run_dir: Path) -> ReplayFacts:
    """The fact layer of one replay run: its store in ``run_dir``, extraction by ``backend``
    (the cascade's first tier, as in serving)."""
    check_extraction_config(cfg)
    store = FactStore(f"sqlite:///{run_dir / FACTS_FILE}")
    try:
        extractor = Extractor(backend, ExtractionSchema.from_config(cfg.fields, units=False),
                              store, max_tokens=cfg.max_tokens, retries=cfg.retries)
        lane = ExtractionLane(extractor, queue=store.queue, threshold_tokens=cfg.threshold_tokens,
                              count_text_tokens=backend.count_text_tokens)
    except BaseException:
        store.close()
        raise
    lane.recover()  # a resumed run: the users its last run left past the threshold
    return ReplayFacts(store, lane)


__all__ = ["FACTS_FILE", "FeedingRetriever", "ReplayFacts", "replay_facts"]
