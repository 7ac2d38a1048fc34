"""Summary of a sweep's trials: one row per configuration, trials that differ only in their seed
pooled as mean and sample standard deviation.

Pure Python: the MLflow side (reading the trials, writing the table on the parent run) is in
``memroute.tracking.sweep_runs``.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Iterable, Mapping, Optional, Sequence

# Params that name a repetition of the same configuration, not a different configuration.
SEED_KEYS: tuple[str, ...] = ("dataset.seed", "seed")
FINISHED = "FINISHED"


@dataclass(frozen=True)
class Trial:
    """One trial's MLflow run, reduced to what the summary needs."""

    run_id: str
    params: Mapping[str, str]
    metrics: Mapping[str, float]
    status: str = FINISHED


@dataclass(frozen=True)
class Stat:
    mean: Optional[float]
    sd: Optional[float]  # sample sd (n - 1); None with fewer than two values
    n: int


@dataclass
class ConfigRow:
    """The trials of one configuration (one value per key), over seeds."""

    values: dict[str, str]
    seeds: list[str]
    run_ids: list[str]
    stats: dict[str, Stat] = field(default_factory=dict)


@dataclass
class SweepSummary:
    keys: list[str]  # params that tell the configurations apart
    seed_key: Optional[str]  # the param whose values were pooled, if any varied
    metrics: list[str]
    rows: list[ConfigRow]
    unfinished: list[str] = field(default_factory=list)  # run ids left out (failed or still running)

    @property
    def pooled(self) -> bool:
        return any(len(r.run_ids) > 1 for r in self.rows)

    def objective(self, by: Sequence[str] = ()) -> Optional[str]:
        """The metric that ranks configurations: the first tabulated metric matching the first pattern
        of ``by`` that matches any (``["warm_compound.f1", "*.f1"]``); with no match, the first metric."""
        for pattern in by:
            hit = next((m for m in self.metrics if fnmatchcase(m, pattern)), None)
            if hit:
                return hit
        return self.metrics[0] if self.metrics else None

    def best(self, metric: Optional[str], mode: str = "max") -> Optional[ConfigRow]:
        """The configuration with the best mean of ``metric``."""
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be max or min, got {mode!r}")
        scored = [r for r in self.rows if metric in r.stats and r.stats[metric].mean is not None]
        if not scored:
            return None
        pick = max if mode == "max" else min
        return pick(scored, key=lambda r: r.stats[metric].mean)  # type: ignore[arg-type,return-value]

    def to_markdown(self) -> str:
        """Cells read ``mean ± sd`` when seeds were pooled."""
        head = [*self.keys, "n", *self.metrics]
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        for r in self.rows:
            cells = [r.values.get(k, "") for k in self.keys] + [str(len(r.run_ids))]
            cells += [_cell(r.stats.get(m)) for m in self.metrics]
            lines.append("| " + " | ".join(cells) + " |")
        notes = []
        if self.seed_key and self.pooled:
            notes.append(f"n = trials pooled over `{self.seed_key}`; mean ± sample sd.")
        if self.unfinished:
            left_out = ", ".join(self.unfinished)
            notes.append(f"{len(self.unfinished)} unfinished trial(s) left out: {left_out}.")
        return "\n".join(lines) + ("\n\n" + " ".join(notes) if notes else "") + "\n"

    def to_csv(self) -> str:
        """Every metric as ``<name>.mean`` and ``<name>.sd`` (empty with one trial); run ids last."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        stat_cols = [f"{m}.{s}" for m in self.metrics for s in ("mean", "sd")]
        writer.writerow([*self.keys, "n", "seeds", *stat_cols, "run_ids"])
        for r in self.rows:
            stats = [r.stats.get(m) for m in self.metrics]
            writer.writerow([
                *(r.values.get(k, "") for k in self.keys), len(r.run_ids), " ".join(r.seeds),
                *(_num(getattr(s, a, None)) for s in stats for a in ("mean", "sd")), " ".join(r.run_ids),
            ])
        return out.getvalue()


def summarize_sweep(
    trials: Iterable[Trial],
    *,
    metric_patterns: Sequence[str] = ("*",),
    swept_keys: Sequence[str] = (),
    seed_keys: Sequence[str] = SEED_KEYS,
) -> SweepSummary:
    """Group finished trials by the params that vary between them, seeds excepted.

    ``swept_keys`` (the sweep's own axes) lead the key columns; every other param that varies is a
    key too, so a sweep over a config group (which changes several params at once) is never pooled.
    ``metric_patterns`` are shell-style patterns (``*.f1``); metrics are listed pattern by pattern.
    """
    trials = list(trials)
    done = [t for t in trials if t.status == FINISHED]
    unfinished = [t.run_id for t in trials if t.status != FINISHED]
    varying = _varying(done)
    seed_key = next((k for k in seed_keys if k in varying), None)
    present = {k for t in done for k in t.params}
    keys = [k for k in dict.fromkeys(swept_keys) if k in present and k not in seed_keys]
    keys += sorted(k for k in varying if k not in keys and k not in seed_keys)
    metrics = _select(sorted({m for t in done for m in t.metrics}), metric_patterns)

    groups: dict[tuple[str, ...], list[Trial]] = {}
    for t in done:
        groups.setdefault(tuple(t.params.get(k, "") for k in keys), []).append(t)
    rows = []
    for values, members in sorted(groups.items(), key=lambda kv: [_natural(v) for v in kv[0]]):
        members.sort(key=lambda t: _natural(t.params.get(seed_key, "") if seed_key else ""))
        rows.append(ConfigRow(
            values=dict(zip(keys, values)),
            seeds=[t.params.get(seed_key, "") for t in members] if seed_key else [],
            run_ids=[t.run_id for t in members],
            stats={m: pool([t.metrics[m] for t in members if m in t.metrics]) for m in metrics},
        ))
    return SweepSummary(keys, seed_key, metrics, rows, unfinished)


def pool(values: Sequence[float]) -> Stat:
    """Mean and sample standard deviation (None below two values); NaNs are left out."""
    vals = [float(v) for v in values if not math.isnan(float(v))]
    if not vals:
        return Stat(None, None, 0)
    return Stat(statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else None, len(vals))


def _varying(trials: Sequence[Trial]) -> set[str]:
    names = {k for t in trials for k in t.params}
    return {k for k in names if len({t.params.get(k) for t in trials}) > 1}


def _select(names: Sequence[str], patterns: Sequence[str]) -> list[str]:
    picked: dict[str, None] = {}
    for pattern in patterns:
        picked.update((n, None) for n in names if fnmatchcase(n, pattern))
    return list(picked)


def _natural(value: str) -> tuple[int, float, str]:
    """Numbers in numeric order (top_k 2 before 16), then text."""
    try:
        return (0, float(value), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(value))


def _cell(stat: Optional[Stat]) -> str:
    """Percentages, tokens and costs with one decimal; scores below 10 (recall, MRR) with three."""
    if stat is None or stat.mean is None:
        return ""
    spec = ".1f" if abs(stat.mean) >= 10 else ".3f"
    return format(stat.mean, spec) + ("" if stat.sd is None else " ± " + format(stat.sd, spec))


def _num(x: Optional[float]) -> str:
    return "" if x is None else repr(x)
