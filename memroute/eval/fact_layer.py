"""The benchmark's fact layer: extract each user's facts once, into a fact store in the run's folder.

The ``*_facts`` conditions (:mod:`memroute.eval.conditions`) answer with the user's active facts
injected beside the turn-pairs. Those facts come from the fact extraction the served app runs in
its background lane (:class:`memroute.memory.facts.extraction.Extractor`, the cascade's first
model), over each user's conversation in order: session by session, ``turns_per_call``
turn-pairs per call, so a correction in a later session supersedes the earlier value exactly as
in production. Extraction is the slow part of such a run (a small model on a CPU reads a few
turn-pairs a minute), so the extracted store is cached: ``<cache_dir>/<key>/facts.sqlite3``,
``key`` = sha256 of the dataset's turn-pairs, the model, the schema, the extraction prompt and
the settings. A rerun copies the cached store into the run folder without a model call.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memroute.config.fact_layer import FactLayerConfig, check_fact_layer_config
from memroute.datasets.records import EvalConversation
from memroute.llm.base import Backend
from memroute.memory.facts import FactStore
from memroute.memory.facts.extraction import Extractor
from memroute.memory.facts.extraction_prompt import extraction_prompt
from memroute.memory.facts.extraction_schema import ExtractedUnit, ExtractionSchema
from memroute.types import TurnPair

log = logging.getLogger(__name__)

STORE_FILE = "facts.sqlite3"
STATS_FILE = "fact_extraction.json"
UNITS_FILE = "units.jsonl"  # the extraction's atomic context units, one JSON object per line
_PROBE_TURN = TurnPair("probe", "s", 0, "<user>", "<assistant>", 0)  # renders the prompt template


@dataclass
class ExtractionStats:
    key: str
    cached: bool  # read from the cache: no model call in this run
    users: int = 0
    turns: int = 0
    calls: int = 0  # extraction calls (chunks), retries not counted
    skipped_calls: int = 0  # chunks whose every output was invalid: nothing stored from them
    facts_written: int = 0
    ungrounded: int = 0  # valid facts dropped by grounding (their turn does not state them)
    units: int = 0  # atomic context units in the replies (before near-duplicate suppression)
    active_facts: int = 0  # at the end, over all users
    model_s: float = 0.0
    wall_s: float = 0.0

    def line(self) -> str:
        how = "cached" if self.cached else f"{self.calls} calls, {self.wall_s:.0f}s"
        units = f", {self.units} atomic units" if self.units else ""
        units += f"; {self.ungrounded} ungrounded facts dropped" if self.ungrounded else ""
        return (f"facts: {self.active_facts} active{units} for {self.users} users from "
                f"{self.turns} turn-pairs ({how}; {self.skipped_calls} chunks skipped as "
                "invalid output)")


def asked_at(conv: EvalConversation) -> int:
    """When the questions are asked, for the facts' validity: after the last turn-pair."""
    return max((r.pair.session_time for r in conv.records), default=0) + 1


def chunks(turns: Sequence[TurnPair], size: int) -> list[list[TurnPair]]:
    """Session by session in time order, each session cut into runs of at most ``size``."""
    by_session: dict[str, list[TurnPair]] = {}
    for t in sorted(turns, key=lambda t: (t.session_time, t.session_id, t.turn_index)):
        by_session.setdefault(t.session_id, []).append(t)
    return [s[i : i + size] for s in by_session.values() for i in range(0, len(s), size)]


GROUNDING_RULE = "nearest"  # bump when grounding changes what is kept: a new cache entry


def cache_key(
    conversations: Sequence[EvalConversation], model_id: str, schema: ExtractionSchema,
    cfg: FactLayerConfig,
) -> str:
    """What decides the extracted facts: the turn-pairs, the model, the schema, the prompt
    template and the chunking / decoding settings."""
    h = hashlib.sha256()

    def add(value: Any) -> None:
        h.update(json.dumps(value, sort_keys=True, default=str).encode())
        h.update(b"\x1e")

    settings = {"model": model_id, "turns_per_call": cfg.turns_per_call,
                "max_tokens": cfg.max_tokens, "retries": cfg.retries}
    if cfg.grounding:  # entries made before grounding existed were ungrounded: keep their key
        # the rule's version: "nearest" moves a value to the neighbouring turn that states it
        settings["grounding"] = GROUNDING_RULE
    add(settings)
    add([asdict(f) for f in schema.fields])
    add([(m.role, m.content) for m in extraction_prompt(schema, [_PROBE_TURN])])
    for conv in conversations:
        for r in conv.records:
            p = r.pair
            add([p.user_id, p.session_id, p.turn_index, p.session_time, p.user_text,
                 p.assistant_text])
    return h.hexdigest()[:24]


def build_fact_layer(
    conversations: Sequence[EvalConversation],
    backend: Backend,
    fields: Sequence[dict[str, str]],
    cfg: FactLayerConfig,
    run_dir: Path,
    *,
    progress: bool = True,
) -> tuple[FactStore, ExtractionStats]:
    """The run's fact store (``run_dir/facts.sqlite3``), from the cache or extracted now."""
    check_fact_layer_config(cfg)
    schema = ExtractionSchema.from_config(fields, units=cfg.units)
    key = cache_key(conversations, backend.model_id, schema, cfg)
    cached = Path(cfg.cache_dir).expanduser() / key
    target = run_dir / STORE_FILE
    # a facts-only entry may have no units file (written before units were kept)
    needed = (STORE_FILE, STATS_FILE) + ((UNITS_FILE,) if schema.units else ())
    if all((cached / f).is_file() for f in needed):
        _copy_sqlite(cached / STORE_FILE, target)
        if (cached / UNITS_FILE).is_file():
            shutil.copy(cached / UNITS_FILE, run_dir / UNITS_FILE)
        stats = ExtractionStats(**{**json.loads((cached / STATS_FILE).read_text()),
                                   "cached": True})
        (run_dir / STATS_FILE).write_text(json.dumps(asdict(stats), indent=1) + "\n")
        return FactStore(f"sqlite:///{target}"), stats
    store = FactStore(f"sqlite:///{target}")
    try:
        stats = _extract(conversations, backend, schema, cfg, store, key,
                         units_file=run_dir / UNITS_FILE, progress=progress)
        stats.active_facts = sum(len(store.active(c.sample_id, now=asked_at(c)))
                                 for c in conversations if c.records)
    except BaseException:
        store.close()
        raise
    (run_dir / STATS_FILE).write_text(json.dumps(asdict(stats), indent=1) + "\n")
    _save_to_cache(run_dir, cached)
    return store, stats


def add_units(index: Any, units: Sequence[ExtractedUnit]) -> int:
    """Embed ``units`` into ``index`` (a :class:`~memroute.memory.units.UnitIndex`: its own
    collection, near-duplicates suppressed), user by user; the number written."""
    by_user: dict[str, list[ExtractedUnit]] = {}
    for u in units:
        by_user.setdefault(u.user_id, []).append(u)
    written = suppressed = 0
    for uid, items in by_user.items():
        report = index.add(uid, items)
        written, suppressed = written + report.written, suppressed + report.suppressed
    print(f"units: {written} atomic units indexed for {len(by_user)} users "
          f"({suppressed} near-duplicates suppressed)")
    return written


def load_units(run_dir: Path) -> list[ExtractedUnit]:
    """The atomic units the run's extraction wrote (none for a facts-only schema); ``run_dir``
    may also name the units file itself."""
    path = run_dir if run_dir.suffix == ".jsonl" else run_dir / UNITS_FILE
    if not path.is_file():
        return []
    return [ExtractedUnit(**json.loads(line)) for line in path.read_text().splitlines() if line]


def _extract(
    conversations: Sequence[EvalConversation], backend: Backend, schema: ExtractionSchema,
    cfg: FactLayerConfig, store: FactStore, key: str, *, units_file: Path, progress: bool,
) -> ExtractionStats:
    from tqdm.auto import tqdm

    extractor = Extractor(backend, schema, store, max_tokens=cfg.max_tokens, retries=cfg.retries,
                          grounding=cfg.grounding)
    work = [(c.sample_id, chunk) for c in conversations
            for chunk in chunks([r.pair for r in c.records], cfg.turns_per_call)]
    stats = ExtractionStats(key, cached=False, users=len({u for u, _ in work}),
                            turns=sum(len(ch) for _, ch in work))
    start = time.perf_counter()
    with units_file.open("w") as units:
        for user_id, chunk in tqdm(work, desc="fact extraction", disable=not progress,
                                   unit="call"):
            result = extractor.extract(user_id, chunk)
            stats.calls += 1
            stats.skipped_calls += result.skipped_reason is not None
            stats.facts_written += result.facts_written
            stats.ungrounded += result.ungrounded
            stats.model_s += result.latency_s
            stats.units += len(result.units)
            units.writelines(json.dumps(asdict(u), ensure_ascii=False) + "\n"
                             for u in result.units)
    stats.wall_s = time.perf_counter() - start
    return stats


def _copy_sqlite(src: Path, dst: Path) -> None:
    """A consistent copy of a SQLite database (its WAL included), through SQLite's backup."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    source, dest = sqlite3.connect(src), sqlite3.connect(dst)
    try:
        source.backup(dest)
    finally:
        dest.close()
        source.close()


def _save_to_cache(run_dir: Path, cached: Path) -> None:
    """Into a temporary folder, then renamed: a half-written entry is never read."""
    tmp = cached.with_name(f"{cached.name}.tmp-{time.time_ns()}")
    try:
        tmp.mkdir(parents=True)
        _copy_sqlite(run_dir / STORE_FILE, tmp / STORE_FILE)
        for name in (STATS_FILE, UNITS_FILE):
            shutil.copy(run_dir / name, tmp / name)
        tmp.rename(cached)
    except OSError as exc:  # a full disk or a racing run: the run itself still has its store
        log.warning("fact layer not cached at %s: %s", cached, exc)
        shutil.rmtree(tmp, ignore_errors=True)
