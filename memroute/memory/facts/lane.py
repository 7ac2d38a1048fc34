"""The background lane that turns conversation into facts, off every request's path.

The journal's flusher hands it every turn-pair it stored (routed answers and appended turns
alike, :meth:`ExtractionLane.observe`). The lane counts each pair's tokens with the extraction
model's tokenizer and puts it on the fact store's extraction queue
(:mod:`memroute.memory.facts.queue`: durable, and shared by every replica on the same fact
database), which answers with the user's unextracted total. Past ``extraction.threshold_tokens``
the user gets one extraction run on the lane's own worker thread
(:class:`~memroute.memory.facts.extraction.Extractor`, under the per-user lock in the fact
store): it reads the user's queued turns, extracts, and takes exactly those turns off the
queue. A second trigger while a run is going (on this replica: not queued again; on another:
the lock is held, ``locked``) leaves the turns queued for the next run. A run that fails keeps
its turns too; one whose output stayed invalid after the retry drops them (logged), as the
extractor's contract says. At start, :meth:`ExtractionLane.recover` runs the users a previous
process left past the threshold. Erasure of a user empties its queue (the fact store's).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from memroute.memory.facts.extraction import ERASED, LOCKED, needs_extraction
from memroute.memory.facts.queue import ExtractionQueue
from memroute.types import TurnPair

log = logging.getLogger(__name__)
QUEUE_STATS_S = 5.0  # /healthz reads the queue's user count at most this often (a DB query)


class ExtractionLane:
    def __init__(
        self, extractor: Any, *, queue: ExtractionQueue, threshold_tokens: int,
        count_text_tokens: Callable[[str], int], clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.extractor = extractor
        self.queue = queue
        self.threshold = threshold_tokens
        self.count = count_text_tokens
        self._running: set[str] = set()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="extraction")
        self.runs = self.facts_written = self.skipped = self.failed = 0
        self.units_written = self.units_suppressed = 0
        self.keys_rejected = self.keys_merged = self.keys_new = 0  # open keys (facts/keys.py)
        self._clock = clock
        self._queued: tuple[float, int] | None = None  # (clock at the read, users queued)

    def observe(self, pairs: Sequence[TurnPair], *, recent_keep: int = 0) -> list[Future[Any]]:
        """Queue ``pairs`` (and, ``recent_keep`` > 0, record them as recent turns in the same
        transaction); start an extraction for each user now past the threshold."""
        if not pairs:
            return []
        tokens = [self.count(f"{p.user_text}\n{p.assistant_text}") for p in pairs]
        # a pair queued already is not counted again
        totals = self.queue.enqueue(pairs, tokens, recent_keep=recent_keep)
        return self._start([u for u, n in totals.items() if needs_extraction(n, self.threshold)])

    def recover(self) -> list[Future[Any]]:
        """Run the users whose queued turns a previous process left past the threshold."""
        return self._start(self.queue.users_over(self.threshold))

    def _start(self, users: Sequence[str]) -> list[Future[Any]]:
        with self._lock:
            due = [u for u in users if u not in self._running]
            self._running.update(due)
        return [self._pool.submit(self._run, uid) for uid in due]

    def _run(self, user_id: str) -> None:
        try:
            # the mark first: an erasure after it makes the run's writes refused
            mark, turns = self.queue.snapshot(user_id)
            result = self.extractor.extract(user_id, turns, erasure_mark=mark) if turns else None
        except Exception:  # noqa: BLE001 - the lane must outlive one failed run
            log.exception("fact extraction failed for a user; its turns stay queued")
            self.failed += 1
            return
        finally:
            with self._lock:
                self._running.discard(user_id)
        if result is None:
            return
        self.runs += 1
        if result.skipped_reason in (LOCKED, ERASED):  # another run has it, or it is gone
            return
        if result.skipped_reason is not None:
            self.skipped += 1
        self.facts_written += result.facts_written
        self.units_written += result.units_written
        self.units_suppressed += result.units_suppressed
        self.keys_rejected += result.keys_rejected
        self.keys_merged += result.keys_merged
        self.keys_new += result.keys_new
        self.queue.remove(user_id, [t.id for t in turns])

    def pending_tokens(self, user_id: str) -> int:
        return self.queue.pending_tokens(user_id)

    def users_queued(self) -> int:
        """Users with turns queued (on every replica), read from the fact database at most
        every ``QUEUE_STATS_S``: health checks come often and must stay cheap."""
        now = self._clock()
        if self._queued is None or now - self._queued[0] >= QUEUE_STATS_S:
            self._queued = (now, int(self.queue.stats()["users_queued"]))
        return self._queued[1]

    def stats(self) -> dict[str, int]:
        return {"runs": self.runs, "facts_written": self.facts_written, "skipped": self.skipped,
                "failed": self.failed, "users_queued": self.users_queued(),
                "units_written": self.units_written, "units_suppressed": self.units_suppressed,
                "keys_rejected": self.keys_rejected, "keys_merged": self.keys_merged,
                "keys_new": self.keys_new}

    def close(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=not wait)
