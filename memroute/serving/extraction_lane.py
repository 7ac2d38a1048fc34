"""The background lane that turns conversation into facts, off every request's path.

The journal's flusher hands it every turn-pair it stored (routed answers and appended turns
alike, :meth:`ExtractionLane.observe`). The lane counts each user's unextracted tokens with the
extraction model's tokenizer; past ``extraction.threshold_tokens`` it queues the user's buffered
turns for one extraction run on its own worker thread (:class:`~memroute.memory.facts.extraction.
Extractor`: the per-user lock in the fact store, so two replicas or two triggers never run two
extractions for one user: the loser keeps its turns for the next run). The extractor writes the
facts and hands the atomic context units to its unit sink (the serving core's UnitIndex).

The buffer lives in memory: turns observed before a restart and not yet extracted are not
extracted after it (their turn-pairs stay in Milvus; the facts they held come again when the
user restates them). A user's buffer is dropped on erasure.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from memroute.memory.facts.extraction import needs_extraction
from memroute.namespace import SEPARATOR
from memroute.types import TurnPair

log = logging.getLogger(__name__)


class ExtractionLane:
    def __init__(
        self, extractor: Any, *, threshold_tokens: int, count_text_tokens: Callable[[str], int]
    ) -> None:
        self.extractor = extractor
        self.threshold = threshold_tokens
        self.count = count_text_tokens
        self._buffers: dict[str, list[TurnPair]] = {}
        self._tokens: dict[str, int] = {}
        self._running: set[str] = set()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="extraction")
        self.runs = self.facts_written = self.skipped = self.failed = 0
        self.units_written = self.units_suppressed = 0

    def observe(self, pairs: Sequence[TurnPair]) -> list[Future[Any]]:
        """Buffer ``pairs``; queue an extraction for each user now past the threshold."""
        due = []
        with self._lock:
            for p in pairs:
                uid = p.user_id
                buffered = self._buffers.setdefault(uid, [])
                if any(b.id == p.id for b in buffered):  # a store write retried: seen already
                    continue
                buffered.append(p)
                self._tokens[uid] = self._tokens.get(uid, 0) + self.count(
                    f"{p.user_text}\n{p.assistant_text}")
                if needs_extraction(self._tokens[uid], self.threshold) and uid not in self._running:
                    self._running.add(uid)
                    due.append(uid)
        return [self._pool.submit(self._run, uid) for uid in due]

    def _run(self, user_id: str) -> None:
        with self._lock:
            turns = self._buffers.pop(user_id, [])
            self._tokens.pop(user_id, None)
        turns.sort(key=lambda t: (t.session_time, t.created_at))
        try:
            result = self.extractor.extract(user_id, turns)
        except Exception:  # noqa: BLE001 - the lane must outlive one failed run
            log.exception("fact extraction failed for a user; its turns wait for the next run")
            self.failed += 1
            self._put_back(user_id, turns)
            return
        finally:
            with self._lock:
                self._running.discard(user_id)
        self.runs += 1
        if result.skipped_reason == "locked":  # another process is extracting this user now
            self._put_back(user_id, turns)
        elif result.skipped_reason is not None:
            self.skipped += 1
        self.facts_written += result.facts_written
        self.units_written += result.units_written
        self.units_suppressed += result.units_suppressed

    def _put_back(self, user_id: str, turns: list[TurnPair]) -> None:
        with self._lock:
            self._buffers[user_id] = turns + self._buffers.get(user_id, [])
            self._tokens[user_id] = self._tokens.get(user_id, 0) + sum(
                self.count(f"{t.user_text}\n{t.assistant_text}") for t in turns)

    def pending_tokens(self, user_id: str) -> int:
        with self._lock:
            return self._tokens.get(user_id, 0)

    def stats(self) -> dict[str, int]:
        with self._lock:
            buffered = len(self._buffers)
        return {"runs": self.runs, "facts_written": self.facts_written, "skipped": self.skipped,
                "failed": self.failed, "users_buffered": buffered,
                "units_written": self.units_written, "units_suppressed": self.units_suppressed}

    # erasure: the caches the serving core clears (memroute.serving.erasure)
    def forget_user(self, user_id: str) -> int:
        with self._lock:
            self._tokens.pop(user_id, None)
            return len(self._buffers.pop(user_id, []))

    def forget_tenant(self, tenant: str) -> int:
        prefix = f"{tenant}{SEPARATOR}"
        with self._lock:
            users = [u for u in self._buffers if u.startswith(prefix)]
            for u in users:
                self._tokens.pop(u, None)
            return sum(len(self._buffers.pop(u)) for u in users)

    def close(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=not wait)
