"""Background writer from the journal to the memory store, in batches, exactly once in the store.

Order of operations per batch: read pending entries -> ``write_fn(pairs)`` -> mark them flushed.
``write_fn`` is in production ``HybridRetriever.remember`` (embed + upsert by the pair's
deterministic id). A crash between the write and the mark only means the same ids are upserted
again on the next start, which replaces rows instead of adding them: every journaled pair ends
up in the store exactly once.

- Start-up replay: the thread's first pass drains whatever a previous process left pending
  (oldest seq first, so old entries are written before new ones).
- Wake-up: the journal calls the flusher after each append; the flusher then waits up to
  ``interval_s`` for a fuller batch (or until ``batch_size`` entries are new) and drains.
  Idle, it sleeps on a condition variable: no polling.
- Errors: a failed write leaves the entries pending and is retried with exponential backoff
  (``backoff_s`` doubling up to ``max_backoff_s``, 5 s by default). While it waits, ``probe_fn``
  (when given: a cheap store call) is tried every ``probe_interval_s``; once the store answers
  again the write is retried at once, not at the end of the backoff. A pair the store refuses for good
  (:class:`InvalidRequest`, e.g. a text over its size limit) is found by writing the batch one
  pair at a time and is parked with :meth:`Journal.mark_failed` instead of blocking the queue.
- One flusher per journal per process: drains are serialized by a lock, so
  :meth:`flush_now` and the thread never write the same entries at the same time.
- Erasure: each batch is read, written and marked under :meth:`Journal.store_gate`, which an
  erasure holds from its tombstone through its store delete, and the journal never returns
  erased entries (seq <= their user's or tenant's tombstone). So a batch in flight either
  reaches the store before the tombstone (the erasure's store delete removes it) or is read
  after it, and never contains erased pairs. Only an erasure run by *another process* on the
  same journal file can slip between the read and the write; the flusher checks after each
  write (:meth:`Journal.erased_among`) and hands such pairs to ``on_erased`` (delete them from
  the store), or logs an error naming the seqs when none is given.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from memroute.errors import ConfigError, InvalidRequest
from memroute.config.journal import JournalConfig, check_journal_config
from memroute.journal.protocol import TurnJournal
from memroute.journal.records import JournalEntry
from memroute.types import TurnPair

log = logging.getLogger(__name__)

WriteFn = Callable[[list[TurnPair]], object]
ErasedFn = Callable[[list[TurnPair]], object]


@dataclass(frozen=True)
class FlusherStats:
    flushed: int = 0  # entries this flusher wrote and marked flushed
    batches: int = 0  # successful write_fn calls
    write_errors: int = 0  # failed write_fn calls (retried)
    parked: int = 0  # entries the store refused for good (Journal.failed())
    last_error: str | None = None  # "Type: message" of the last failure
    failing: int = 0  # failed writes in a row now (0: the last write went through)
    last_error_at: float | None = None  # epoch seconds
    last_success_at: float | None = None


def error_text(exc: BaseException) -> str:
    """``Type: message``; some drivers' exceptions (pymilvus) print nothing by themselves."""
    message = str(exc) or str(getattr(exc, "message", "") or "") or "(no message)"
    return f"{type(exc).__name__}: {message}"


class Flusher:
    def __init__(
        self,
        journal: TurnJournal,
        write_fn: WriteFn,
        *,
        batch_size: int = 64,
        interval_s: float = 0.5,
        backoff_s: float = 0.2,
        max_backoff_s: float = 30.0,
        on_erased: ErasedFn | None = None,
        probe_fn: Callable[[], object] | None = None,
        probe_interval_s: float = 1.0,
        lease_s: float = 60.0,
    ) -> None:
        check_journal_config(
            JournalConfig(
                path=str(journal.path),
                batch_size=batch_size,
                interval_s=interval_s,
                max_backoff_s=max_backoff_s,
            )
        )
        if isinstance(backoff_s, bool) or not isinstance(backoff_s, (int, float)) or not (
            0 < backoff_s <= 3600
        ):
            raise ConfigError(
                f"backoff_s must be in (0, 3600], got {backoff_s!r}", field="backoff_s"
            )
        self.journal = journal
        self.write_fn = write_fn
        self.on_erased = on_erased
        self.probe_fn, self.probe_interval_s = probe_fn, probe_interval_s
        self.batch_size = batch_size
        self.interval_s = float(interval_s)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max(max_backoff_s, backoff_s))
        self._cond = threading.Condition()
        self._new = 0  # entries appended since the thread last started a drain
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._drain_lock = threading.Lock()
        self._stats = FlusherStats()
        # A journal shared by several replicas (PostgreSQL) hands out batches by lease: this
        # flusher claims under its own name, and polls, since other replicas' appends wake
        # nobody here.
        self.shared = journal.shared
        self.lease_s = float(lease_s)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"

    @classmethod
    def from_config(
        cls, journal: TurnJournal, write_fn: WriteFn, cfg: JournalConfig, *,
        on_erased: ErasedFn | None = None, probe_fn: Callable[[], object] | None = None,
    ) -> Flusher:
        return cls(
            journal,
            write_fn,
            batch_size=cfg.batch_size,
            interval_s=cfg.interval_s,
            max_backoff_s=cfg.max_backoff_s,
            on_erased=on_erased,
            probe_fn=probe_fn,
            lease_s=cfg.lease_s,
        )

    # -------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Start the thread; its first pass replays what earlier processes left pending."""
        if self.running:
            return
        with self._cond:
            self._stopping = False
        self.journal.add_listener(self._on_append)
        self._thread = threading.Thread(
            target=self._run, name="memroute-journal-flusher", daemon=True
        )
        self._thread.start()

    def stop(self, *, drain: bool = True, timeout: float | None = 30.0) -> int:
        """Stop the thread, then (``drain``) write everything pending. Returns what stays pending.

        A drain that fails (store down) is logged, not raised: the entries stay in the journal
        and the next start replays them.
        """
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self.journal.remove_listener(self._on_append)
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                log.warning("journal flusher did not stop within %ss; skipping the drain", timeout)
                return self.journal.pending_count()
        if drain:
            try:
                self.flush_now()
            except Exception as exc:
                log.error("journal drain at stop failed; entries stay pending for replay: %r", exc)
        return self.journal.pending_count()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stats(self) -> FlusherStats:
        return self._stats

    def __enter__(self) -> Flusher:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ drains
    def flush_now(self) -> int:
        """Write everything pending now, in the calling thread; returns entries flushed.

        Raises the write error if the store fails (entries stay pending). Only entries that
        exist when it is called are drained, so concurrent appends cannot keep it running.
        """
        return self._drain(stop_early=False)

    def wait_drained(self, timeout: float) -> bool:
        """True once nothing is pending (parked failures do not count), False after ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.journal.pending_count() > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with self._cond:
                self._cond.wait(min(remaining, 0.05))
        return True

    def _drain(self, *, stop_early: bool) -> int:
        with self._drain_lock:
            upto = self.journal.last_seq()
            total = 0
            try:
                while not (stop_early and self._stopping):
                    with self.journal.store_gate():  # an erasure waits for this batch
                        entries = self._next_batch(upto)
                        if not entries:
                            break
                        total += self._write(entries)
            finally:
                with self._cond:
                    self._cond.notify_all()  # wake wait_drained()
            return total

    def _next_batch(self, upto: int) -> list[JournalEntry]:
        """Pending entries up to seq ``upto``; on a shared journal, claimed for this flusher
        (what it claimed past ``upto`` is given back, so a drain ends)."""
        if not self.shared:
            return self.journal.pending(self.batch_size, max_seq=upto)
        claimed = self.journal.claim(self.batch_size, owner=self.owner, lease_s=self.lease_s)
        later = [e.seq for e in claimed if e.seq > upto]
        if later:
            self.journal.release(later, owner=self.owner)
        return [e for e in claimed if e.seq <= upto]

    def _write(self, entries: Sequence[JournalEntry]) -> int:
        try:
            self.write_fn([e.pair for e in entries])
        except InvalidRequest as exc:
            if len(entries) > 1:  # find the refused pair(s): the others must still go through
                return sum(self._write([e]) for e in entries)
            self.journal.mark_failed([entries[0].seq], f"{type(exc).__name__}: {exc}")
            self._update(parked=1, last_error=error_text(exc))
            log.error("journal entry seq=%d refused by the store, parked: %s", entries[0].seq, exc)
            return 0
        except Exception as exc:
            self._update(write_errors=1, last_error=error_text(exc), failing=1)
            self._stats = replace(self._stats, last_error_at=time.time())
            raise
        self._undo_erased(entries)
        marked = self.journal.mark_flushed([e.seq for e in entries])
        self._update(flushed=marked, batches=1)
        self._stats = replace(self._stats, failing=0, last_success_at=time.time())
        return marked

    def _undo_erased(self, entries: Sequence[JournalEntry]) -> None:
        """Pairs just written that another process erased meanwhile: out of the store again."""
        erased = self.journal.erased_among(entries)
        if not erased:
            return
        seqs = [e.seq for e in erased]
        if self.on_erased is None:
            log.error("journal entries %s were erased by another process while being written; "
                      "they may be in the store again: re-run the erasure", seqs)
            return
        try:  # not raised: a retried batch would no longer hold them (the journal erased them)
            self.on_erased([e.pair for e in erased])
        except Exception:
            log.exception("journal entries %s were erased during their write and could not be "
                          "removed from the store again: re-run the erasure", seqs)
            return
        log.warning("journal entries %s were erased during their write; removed again", seqs)

    def _update(self, *, last_error: str | None = None, **add: int) -> None:
        s = self._stats
        changes = {k: getattr(s, k) + v for k, v in add.items()}
        if last_error is not None:
            changes["last_error"] = last_error
        self._stats = replace(s, **changes)

    # ------------------------------------------------------------------ thread
    def _on_append(self, n: int) -> None:
        with self._cond:
            self._new += n
            self._cond.notify_all()

    def _run(self) -> None:
        delay = 0.0  # > 0 while retrying after a failed write
        first = True  # replay whatever is pending at start, without waiting for an append
        failures = 0
        while True:
            with self._cond:
                if delay > 0:
                    self._sleep(delay)
                elif not first:
                    # a shared journal is polled: other replicas' appends wake nobody here
                    poll = max(self.interval_s, 0.05) if self.shared else None
                    while not self._stopping and self._new == 0:
                        if not self._cond.wait(poll) and self.shared:
                            break
                    if self._new:
                        self._linger()
                if self._stopping:
                    return
                self._new = 0
            first = False
            try:
                self._drain(stop_early=True)
                delay, failures = 0.0, 0
            except Exception as exc:
                failures += 1
                delay = min(self.max_backoff_s, self.backoff_s * 2 ** (failures - 1))
                log.warning(
                    "journal flush failed (%d in a row): %r; %s entries stay pending, "
                    "retry in %.1fs",
                    failures,
                    exc,
                    self._pending_for_log(),
                    delay,
                    exc_info=failures == 1,
                )

    def _pending_for_log(self) -> int | str:
        try:
            return self.journal.pending_count()
        except Exception:  # the journal itself may be what failed; keep the thread alive
            return "?"

    def _linger(self) -> None:
        """Wait up to ``interval_s`` for ``batch_size`` new entries (caller holds the condition)."""
        deadline = time.monotonic() + self.interval_s
        while not self._stopping and self._new < self.batch_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._cond.wait(remaining)

    def _sleep(self, seconds: float) -> None:
        """Backoff that a stop interrupts but appends do not (caller holds the condition); with
        a ``probe_fn``, cut short as soon as the store answers it."""
        deadline = time.monotonic() + seconds
        while not self._stopping:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if self.probe_fn is None:
                self._cond.wait(remaining)
                continue
            self._cond.wait(min(remaining, self.probe_interval_s))
            if self._store_answers():
                log.info("the store answers again: retrying the journal flush now")
                return

    def _store_answers(self) -> bool:
        try:
            self.probe_fn()  # type: ignore[misc]
        except Exception:  # noqa: BLE001 - still down: keep waiting
            return False
        return True