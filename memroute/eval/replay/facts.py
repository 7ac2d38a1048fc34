"""The replay's ``memroute_facts`` strategy: memroute with the fact layer, as the served app runs it.

The served app extracts facts from stored turn-pairs in a background lane
(:mod:`memroute.memory.facts.lane`) and the router injects each user's current facts.
The replay does the same with one difference: the lane's runs are waited for before the next
wave, so a replay is reproducible (in production a fact lands a few seconds after its turn).
Everything else is the served code: the extraction queue and its token threshold
(``extraction.threshold_tokens``), the per-user lock, supersession, the facts block.

The fact store is a SQLite file in the run folder (``facts.sqlite3``): a resumed run keeps its
facts and its queue, as a restarted replica does. The extracting tier is ``extraction.tier``
(as served); the strategy's rows carry it (``extraction_tier``, ``extraction_model``) and so
does the report. With ``extraction.keys=open`` proposed keys are matched to each user's keys
with the run's encoder.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memroute.config.extraction import ExtractionConfig, check_extraction_config
from memroute.embedding.base import Encoder
from memroute.llm.base import Backend
from memroute.memory.facts import FactStore
from memroute.memory.facts.extraction import Extractor
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
    tier: int = 0  # the cascade tier that extracts (extraction.tier)
    model: str = ""  # its model id
    keys: str = "open"  # extraction.keys

    def feeding(self, retriever: Any) -> FeedingRetriever:
        return FeedingRetriever(retriever, self.lane)

    def row_fields(self) -> dict[str, Any]:
        """What each of the strategy's rows says about its fact extraction."""
        return {"extraction_tier": self.tier, "extraction_model": self.model,
                "extraction_keys": self.keys}

    def stats(self) -> dict[str, Any]:
        return {**self.row_fields(), **self.lane.stats()}

    def close(self) -> None:
        self.lane.close()
        self.store.close()


def replay_facts(cfg: ExtractionConfig, backend: Backend, run_dir: Path, *,
                 encoder: Encoder | None = None, tier: int | None = None) -> ReplayFacts:
    """The fact layer of one replay run: its store in ``run_dir``, extraction by ``backend``
    (the cascade's ``extraction.tier``, as in serving; ``tier`` says which it is when the
    caller picked another), proposed keys embedded by ``encoder``."""
    check_extraction_config(cfg)
    store = FactStore(f"sqlite:///{run_dir / FACTS_FILE}")
    try:
        extractor = Extractor.from_config(backend, store, cfg, encoder=encoder, units=False)
        lane = ExtractionLane(extractor, queue=store.queue, threshold_tokens=cfg.threshold_tokens,
                              count_text_tokens=backend.count_text_tokens)
    except BaseException:
        store.close()
        raise
    lane.recover()  # a resumed run: the users its last run left past the threshold
    return ReplayFacts(store, lane, cfg.tier if tier is None else tier,
                       str(getattr(backend, "model_id", "")), cfg.keys)


__all__ = ["FACTS_FILE", "FeedingRetriever", "ReplayFacts", "replay_facts"]
