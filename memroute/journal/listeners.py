"""Wake-up listeners, shared by the SQLite and PostgreSQL journals: how a
:class:`~memroute.journal.flusher.Flusher` learns of new entries without polling."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class ListenersMixin:
    """``add_listener`` / ``remove_listener`` for a journal, which calls :meth:`_notify` after
    each commit that recorded new entries (an append, a requeue). Only commits made through
    this object are heard: a flusher on another replica polls instead."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[int], None]] = []
        self._listeners_lock = threading.Lock()

    def add_listener(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(n_new_entries)`` after each append that recorded something new."""
        with self._listeners_lock:
            self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[int], None]) -> None:
        with self._listeners_lock:
            if callback in self._listeners:
                self._listeners.remove(callback)

    def _notify(self, n: int) -> None:
        """Call the listeners outside the lock, so one may add or remove a listener."""
        with self._listeners_lock:
            listeners = list(self._listeners)
        for callback in listeners:
            try:
                callback(n)
            except Exception:  # the append is durable already; a wake-up must not undo the ack
                log.exception("journal listener %r failed", callback)
