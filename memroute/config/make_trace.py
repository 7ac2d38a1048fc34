"""Schema of the replay-trace generator job (conf/make_trace.yaml, ``python -m jobs.make_trace``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from memroute.errors import ConfigError

SOURCES = ("synthetic", "locomo", "longmemeval")
FORMATS = {"jsonl": ".jsonl", "parquet": ".parquet"}


@dataclass
class TraceMix:
    """How questions split, in percent (sums to 100): the exact same text again, the same question
    reworded, or a first question about a fact."""

    repeat: float = 18.0
    paraphrase: float = 47.0
    novel: float = 35.0


@dataclass
class MakeTraceConfig:
    source: str = "synthetic"  # synthetic | locomo | longmemeval
    path: Optional[str] = None  # the LoCoMo / LongMemEval file (longmemeval: null = generated set)
    num_users: int = 50
    num_requests: int = 2000  # synthetic: exact; datasets: at most (null-like 0 = all)
    mix: TraceMix = field(default_factory=TraceMix)
    general_share: float = 0.25  # share of questions with computable general answers
    update_share: float = 0.2  # share of stated personal facts that change later
    seed: int = 0
    days: int = 30  # simulated days the users' requests spread over
    start: str = "2024-03-01"  # the first simulated day (UTC)
    tenant: str = "default"
    output: Optional[str] = None  # null: .memroute/traces/trace_<source>_<n>_seed<seed>.<format>
    format: str = "jsonl"  # jsonl | parquet, for the default output (a given output's suffix wins)
    progress: bool = True  # tqdm bar for traces of 20,000 requests or more

    def output_path(self) -> str:
        if self.output:
            return self.output
        suffix = FORMATS.get(self.format, ".jsonl")
        return f".memroute/traces/trace_{self.source}_{self.num_requests}_seed{self.seed}{suffix}"

    def validate(self) -> MakeTraceConfig:
        """Raise :class:`ConfigError` naming the first bad field; returns ``self``."""
        if self.source not in SOURCES:
            raise ConfigError(f"unknown trace source {self.source!r}; use one of "
                              f"{', '.join(SOURCES)}", field="source")
        if self.source == "locomo" and not self.path:
            raise ConfigError("source=locomo needs path=<locomo10.json>", field="path")
        if self.format not in FORMATS:
            raise ConfigError(f"unknown format {self.format!r}; use one of {', '.join(FORMATS)}",
                              field="format")
        for name in ("num_users", "num_requests", "days"):
            value = getattr(self, name)
            lowest = 0 if name == "num_requests" and self.source != "synthetic" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
                raise ConfigError(f"{name} must be an integer >= {lowest}, got {value!r}",
                                  field=name)
        parts = {"repeat": self.mix.repeat, "paraphrase": self.mix.paraphrase,
                 "novel": self.mix.novel}
        for name, value in parts.items():
            if not 0 <= value <= 100:
                raise ConfigError(f"mix.{name} must be in [0, 100], got {value}",
                                  field=f"mix.{name}")
        total = sum(parts.values())
        if abs(total - 100) > 1e-6:
            shown = " + ".join(f"{k} {v:g}" for k, v in parts.items())
            raise ConfigError(f"mix must sum to 100 (percent of questions): {shown} = {total:g}",
                              field="mix")
        if self.mix.novel <= 0:
            raise ConfigError("mix.novel must be > 0: repeats and paraphrases need a first "
                              "question", field="mix.novel")
        for name in ("general_share", "update_share"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise ConfigError(f"{name} must be in [0, 1], got {value}", field=name)
        if self.output is not None and not self.output.strip():
            raise ConfigError("output is empty", field="output")
        return self
