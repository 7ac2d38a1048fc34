"""GET /v1/memory/turns behind the API: every turn-pair, oldest first, with what superseded what,
pending change statements applied as the flusher will apply them."""

from __future__ import annotations

from memroute.config.schema import ModelConfig, RetrievalConfig
from memroute.namespace import namespace

from .fakes import serving_core

SMALL = ModelConfig(name="mock-small", engine="mock", params_b=0.5)
ALICE = namespace("acme", "alice")
TURNS = [{"user": "My locker code is ZX-4471.", "assistant": "Noted."},
         {"user": "Our rabbit is called Wombat.", "assistant": "Cute."},
         {"user": "I changed my locker code, it's QT-8812 now.", "assistant": "Updated."}]


def test_the_timeline_shows_the_superseded_pending_pair(tmp_path, monkeypatch):
    core = serving_core(tmp_path, monkeypatch, SMALL, api_keys={"sk-a": "acme"})
    try:
        core.flusher.stop(drain=False)  # the journal alone holds the turns
        core.append_turns(ALICE, {"turns": TURNS})
        rows = core.turn_timeline(ALICE)["data"]
        assert [r["text"].split("Q: ")[1].split(" / A:")[0] for r in rows] == [t["user"] for t in TURNS]
        code, rabbit, update = rows
        assert code["status"] == "superseded" and code["superseded_by"] == update["id"]
        assert code["valid_until"] == update["session_time"]
        assert rabbit["status"] == update["status"] == "current"
        assert all(r["pending"] for r in rows)
    finally:
        core.close()


def test_supersede_off_marks_nothing(tmp_path, monkeypatch):
    core = serving_core(tmp_path, monkeypatch, SMALL, api_keys={"sk-a": "acme"},
                        retrieval=RetrievalConfig(supersede=False))
    try:
        core.flusher.stop(drain=False)
        core.append_turns(ALICE, {"turns": TURNS})
        assert {r["status"] for r in core.turn_timeline(ALICE)["data"]} == {"current"}
    finally:
        core.close()
