"""Health that tells the truth: the flusher's failing state with the real error text, a backoff
cut short once the store answers again, and readiness problems an operator can act on."""

from __future__ import annotations

import threading
import time

from memroute.journal import Flusher, Journal
from memroute.journal.flusher import error_text
from memroute.types import TurnPair


class Silent(Exception):
    """Like pymilvus' MilvusException: str() is empty, the text is in .message."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message


def pair(i: int) -> TurnPair:
    return TurnPair(user_id="acme:alice", session_id="s", turn_index=i, user_text=f"q{i}",
                    assistant_text=f"a{i}", session_time=0, source_model="m", created_at=0.0)


def test_error_text_always_has_the_message():
    assert error_text(Silent("connection refused")) == "Silent: connection refused"
    assert error_text(RuntimeError("boom")) == "RuntimeError: boom"
    assert error_text(RuntimeError()) == "RuntimeError: (no message)"


def test_the_flusher_retries_as_soon_as_the_store_answers_again(tmp_path):
    down = threading.Event()
    down.set()
    written: list[TurnPair] = []

    def write(pairs):
        if down.is_set():
            raise Silent("store unreachable")
        written.extend(pairs)

    def probe():
        if down.is_set():
            raise Silent("store unreachable")

    journal = Journal(tmp_path / "j.sqlite3")
    # a backoff of 60 s: without the probe the retry would come a minute after the store is back
    flusher = Flusher(journal, write, backoff_s=60.0, max_backoff_s=60.0, interval_s=0.0,
                      probe_fn=probe, probe_interval_s=0.05)
    with flusher:
        journal.append([pair(1)])
        deadline = time.monotonic() + 5
        while flusher.stats().failing == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        s = flusher.stats()
        assert s.failing >= 1 and s.last_error == "Silent: store unreachable" and s.last_error_at
        down.clear()
        t0 = time.monotonic()
        assert flusher.wait_drained(5.0)
        assert time.monotonic() - t0 < 2.0  # the probe, not the 60 s backoff
        assert [p.turn_index for p in written] == [1] and flusher.stats().failing == 0
        assert flusher.stats().last_success_at is not None
    journal.close()


def test_readiness_names_the_problem_and_clears_when_it_is_gone(tmp_path, monkeypatch):
    from memroute.config.schema import ModelConfig

    from .fakes import serving_core

    small = ModelConfig(name="mock-small", engine="mock", params_b=0.5)
    core = serving_core(tmp_path, monkeypatch, small, api_keys={"sk-a": "acme"})
    try:
        assert core.health(probe_store=True)["problems"] == []

        def unreachable():
            raise Silent("connection refused")

        monkeypatch.setattr(core.store, "ping", unreachable, raising=False)
        health = core.health(probe_store=True)
        assert health["status"] == "degraded"
        assert health["problems"] == ["the store does not answer: Silent: connection refused"]
        assert core.health()["problems"] == []  # liveness does not probe
        monkeypatch.setattr(core.cfg.journal, "ready_max_pending", 1)
        core.flusher.stop()
        problems = core.health()["problems"]
        assert any("flusher is not running" in p for p in problems)
    finally:
        core.close()


def test_a_failing_tier_shows_in_readiness_and_all_failing_makes_it_unready(tmp_path, monkeypatch):
    from memroute.config.schema import ModelConfig
    from memroute.errors import BackendUnavailable

    from .fakes import serving_core

    small = ModelConfig(name="mock-small", engine="mock", params_b=0.5)
    large = ModelConfig(name="mock-large", engine="mock", params_b=8.0)
    core = serving_core(tmp_path, monkeypatch, small, large, api_keys={"sk": "acme"})
    try:
        def down(*a, **kw):
            raise BackendUnavailable("down")

        ask = lambda text: core.route_batch([core.prepare(  # noqa: E731
            {"model": "memroute", "user": "u", "messages": [{"role": "user", "content": text}]},
            "Bearer sk")])[0]
        monkeypatch.setattr(core.test_backends[0], "generate_many", down)
        assert ask("Hello?").decision.tiers_skipped == [0]
        h = core.health()
        assert [t["state"] for t in h["tier_status"]] == ["failing", "ok"] and h["problems"] == []
        monkeypatch.setattr(core.test_backends[1], "generate_many", down)
        assert ask("Hello again?").status == 503
        h = core.health()
        assert [t["failures"] for t in h["tier_status"]] == [2, 1]
        assert h["problems"] == ["every model tier is failing: requests get 503"]
        monkeypatch.undo()
        assert ask("And now?").decision.tiers_skipped == []  # back: a success clears "failing"
        h = core.health()  # tier 1 was not called since: it is failing as far as anyone knows
        assert [t["state"] for t in h["tier_status"]] == ["ok", "failing"] and h["problems"] == []
    finally:
        core.close()
