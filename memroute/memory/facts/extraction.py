"""Fact extraction with the small model: a conversation's turns become facts in the store.

:class:`Extractor` runs one extraction for a user: it takes the user's extraction lock
(:meth:`FactStore.user_lock`; held by another run -> ``skipped_reason="locked"``, nothing done,
so overlapping sessions never run two extractions for one user), asks the model greedily for
the JSON object of :mod:`.extraction_schema` (``GenerationOptions(json_schema=...)``: constrained
decoding on vLLM, validated on every back end), parses it strictly, retries an invalid output
``retries`` times (with the refused output and the reason appended), then logs a warning and
skips: nothing half-parsed is ever stored. The facts are written with
:meth:`FactStore.assert_fact` in conversation order, so a correction later in the conversation
supersedes the earlier value (the store keeps both in the timeline). The output's atomic context
units go to the optional ``unit_sink`` after the facts (:class:`memroute.memory.units.UnitIndex`:
embedded, near-duplicates suppressed); a sink failure propagates like a back-end failure (the
lane keeps the turns; a rerun restates the facts, and the units it already wrote are duplicates).

With open keys (``extraction.keys=open``, :mod:`.keys`) the model may propose keys of its own:
a key that cannot be made valid drops that fact (counted in ``keys_rejected``, with the reasons),
and the others are put on the user's existing keys by the canonicaliser before grounding, so
two spellings of one fact type supersede each other and two fact types never do.

It is meant for the background lane: :func:`needs_extraction` says when a user's unextracted
conversation has grown past the threshold (``ExtractionConfig.threshold_tokens``). Which turns
are unextracted is the caller's bookkeeping. Back-end failures (down, rejected) propagate: they
are not the model's answer, and the caller decides whether to try later.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from memroute.config.extraction import ExtractionConfig, check_extraction_config
from memroute.embedding.base import Encoder
from memroute.errors import InvalidRequest
from memroute.llm.base import Backend
from memroute.llm.options import GenerationOptions
from memroute.memory.facts.extraction_parser import (
    ExtractionError,
    parse_extraction,
    parse_extraction_output,
)
from memroute.memory.facts.extraction_prompt import extraction_prompt, retry_prompt
from memroute.memory.facts.extraction_schema import (
    ExtractedUnit,
    ExtractionField,
    ExtractionSchema,
    json_schema,
)
from memroute.memory.facts.grounding import ground
from memroute.memory.facts.key_registry import canonical_facts, remember_keys
from memroute.memory.facts.keys import KeyCanonicalizer
from memroute.memory.facts.store import FactStore
from memroute.memory.facts.types import Fact, UserErased
from memroute.types import TurnPair, validate_user_id

log = logging.getLogger(__name__)

LOCKED = "locked"  # another extraction holds the user's lock
INVALID_OUTPUT = "invalid_output"  # every attempt's output was refused; nothing stored
NO_TURNS = "no_turns"
ERASED = "erased"  # the user was erased while the run read or extracted; nothing more written


def needs_extraction(unextracted_tokens: int, threshold: int = ExtractionConfig.threshold_tokens
                     ) -> bool:
    """Whether a user's unextracted conversation (in tokens) exceeds the threshold."""
    return unextracted_tokens > threshold


class UnitSink(Protocol):
    """Where extracted units go (:class:`memroute.memory.units.UnitIndex`): returns an object
    with ``written`` and ``suppressed`` counts."""

    def add(self, user_id: str, units: Sequence[ExtractedUnit]) -> Any: ...


@dataclass(frozen=True)
class ExtractionResult:
    facts_written: int  # facts asserted (a restatement of the active value counts too)
    attempts: int  # model calls made (0 when skipped before any)
    skipped_reason: str | None = None  # None, "locked", "invalid_output" or "no_turns"
    facts: tuple[Fact, ...] = ()  # the active fact of each asserted key, as the store returned
    error: str | None = None  # the last refusal's reason when skipped for invalid output
    latency_s: float = 0.0  # model time, all attempts
    units: tuple[ExtractedUnit, ...] = ()  # the output's atomic context units, in output order
    units_written: int = 0  # given to the unit sink and stored
    units_suppressed: int = 0  # near-duplicates the sink did not store
    ungrounded: int = 0  # valid facts dropped: their turn does not state them (grounding.py)
    keys_rejected: int = 0  # open keys: facts dropped because their key could not be made valid
    key_rejections: tuple[str, ...] = ()  # why, one line each ("facts[2]: key ... is empty")
    keys_merged: int = 0  # open keys: proposals put on an existing key of another spelling
    keys_new: int = 0  # open keys: keys new to the user among the facts written


class Extractor:
    """Extracts ``schema``'s facts from turns with ``backend`` into ``store``; thread-safe
    (each call holds its user's lock; the back end and store are thread-safe or serialized)."""

    def __init__(
        self,
        backend: Backend,
        schema: ExtractionSchema,
        store: FactStore,
        *,
        max_tokens: int = ExtractionConfig.max_tokens,
        retries: int = ExtractionConfig.retries,
        unit_sink: UnitSink | None = None,
        grounding: bool = ExtractionConfig.grounding,
        canonicalizer: KeyCanonicalizer | None = None,
    ) -> None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidRequest(f"max_tokens must be a positive integer, got {max_tokens!r}",
                                 field="max_tokens")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise InvalidRequest(f"retries must be an integer >= 0, got {retries!r}",
                                 field="retries")
        self.backend = backend
        self.schema = schema
        self.store = store
        self.max_tokens = max_tokens
        self.retries = retries
        self.unit_sink = unit_sink
        self.grounding = bool(grounding)
        # open keys without an encoder: only exact spellings of a user's key merge
        self.canonicalizer = canonicalizer or KeyCanonicalizer(
            None, ExtractionConfig.key_match_threshold)

    @classmethod
    def from_config(cls, backend: Backend, store: FactStore, cfg: ExtractionConfig, *,
                    unit_sink: UnitSink | None = None, encoder: Encoder | None = None,
                    units: bool = True) -> Extractor:
        """``encoder``: embeds proposed keys (``extraction.keys=open``); without one only
        exact spellings of a user's key merge."""
        check_extraction_config(cfg)
        open_keys = cfg.keys == "open"
        return cls(backend, ExtractionSchema.from_config(cfg.fields, units=units,
                                                         open_keys=open_keys), store,
                   max_tokens=cfg.max_tokens, retries=cfg.retries, unit_sink=unit_sink,
                   grounding=cfg.grounding,
                   canonicalizer=KeyCanonicalizer(encoder if open_keys else None,
                                                  cfg.key_match_threshold))

    def extract(
        self, user_id: str, turns: Sequence[TurnPair], *, erasure_mark: int | None = None
    ) -> ExtractionResult:
        """Extract and store the facts of ``turns`` (one user's, in conversation order).
        ``erasure_mark``: the store's :meth:`~FactStore.erasure_mark` from before ``turns``
        were read (taken now if not given); if the user is erased after it, the run stops
        writing (``ERASED``)."""
        uid = validate_user_id(user_id)
        turns = list(turns)
        for t in turns:
            if t.user_id != uid:  # never file one user's words under another's profile
                raise InvalidRequest(f"turn {t.session_id}/{t.turn_index} belongs to another "
                                     "user", field="turns")
        if not turns:
            return ExtractionResult(0, 0, NO_TURNS)
        mark = self.store.erasure_mark() if erasure_mark is None else erasure_mark
        with self.store.user_lock(uid) as got:
            if not got:
                log.info("fact extraction for %s skipped: another run holds its lock", uid)
                return ExtractionResult(0, 0, LOCKED)
            return self._locked_extract(uid, turns, mark)

    def _locked_extract(self, uid: str, turns: list[TurnPair], mark: int) -> ExtractionResult:
        options = GenerationOptions(json_schema=json_schema(self.schema, len(turns)))
        messages = extraction_prompt(self.schema, turns)
        error, latency = "", 0.0
        for attempt in range(1, self.retries + 2):
            t0 = time.perf_counter()
            reply = self.backend.generate(messages, max_tokens=self.max_tokens,
                                          temperature=0.0, options=options)
            latency += time.perf_counter() - t0
            try:
                if reply.finish_reason == "length":
                    raise ExtractionError(f"the output was cut at max_tokens={self.max_tokens}")
                parsed = parse_extraction_output(reply.text, self.schema, turns)
            except ExtractionError as exc:
                error = str(exc)
                messages = retry_prompt(messages, reply.text, error)
                continue
            # conversation order (stable): a later turn's value supersedes an earlier one's
            order = {t.id: i for i, t in enumerate(turns)}
            facts, ungrounded, resolved = list(parsed.facts), 0, []
            if self.schema.open_keys:  # on the user's keys first: grounding checks one key a value
                facts, resolved = canonical_facts(
                    self.canonicalizer, self.store, uid, facts, parsed.descriptions,
                    fields={f.name: f.description for f in self.schema.fields})
            if parsed.rejected:
                log.info("fact extraction for %s dropped %d fact(s) with invalid keys: %s", uid,
                         len(parsed.rejected), "; ".join(parsed.rejected)[:500])
            if self.grounding:
                facts, ungrounded = ground(facts, {t.id: t for t in turns})
            facts.sort(key=lambda f: order[f.turn_id])
            try:
                stored = tuple(self.store.assert_fact(uid, f, unless_erased_after=mark)
                               for f in facts)
                new_keys = (_new_keys(resolved, parsed.descriptions, {f.key for f in facts})
                            if resolved else [])
                if new_keys:
                    remember_keys(self.store, uid, new_keys, unless_erased_after=mark)
                if parsed.units and self.store.erased_since(uid, mark):
                    raise UserErased("erased before the units were written")
            except UserErased:
                log.info("fact extraction for %s stopped: the user was erased meanwhile", uid)
                return ExtractionResult(0, attempt, ERASED, latency_s=latency)
            written = suppressed = 0
            if self.unit_sink is not None and parsed.units:
                report = self.unit_sink.add(uid, parsed.units)
                written, suppressed = int(report.written), int(report.suppressed)
            return ExtractionResult(len(stored), attempt, None, stored, latency_s=latency,
                                    units=tuple(parsed.units), units_written=written,
                                    units_suppressed=suppressed, ungrounded=ungrounded,
                                    keys_rejected=len(parsed.rejected),
                                    key_rejections=parsed.rejected,
                                    keys_merged=sum(r.merged for r in resolved),
                                    keys_new=len({k for k, _ in new_keys}))
        attempts = self.retries + 1
        log.warning("fact extraction for %s skipped after %d invalid output(s) from %s: %s",
                    uid, attempts, getattr(self.backend, "model_id", "?"), error)
        return ExtractionResult(0, attempts, INVALID_OUTPUT, error=error, latency_s=latency)


def _new_keys(resolved: Sequence[Any], descriptions: Sequence[str], written: set[str]
              ) -> list[tuple[str, str]]:
    """(key, description) of the keys new to the user that facts were written under."""
    out: dict[str, str] = {}
    for r, d in zip(resolved, descriptions, strict=True):
        if r.known is None and r.key in written:
            out.setdefault(r.key, d)
    return list(out.items())


__all__ = [
    "ERASED",
    "INVALID_OUTPUT",
    "LOCKED",
    "NO_TURNS",
    "ExtractedUnit",
    "ExtractionError",
    "ExtractionField",
    "ExtractionResult",
    "ExtractionSchema",
    "Extractor",
    "UnitSink",
    "extraction_prompt",
    "json_schema",
    "needs_extraction",
    "parse_extraction",
    "parse_extraction_output",
]
