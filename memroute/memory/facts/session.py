"""Session start: what an agent loads when a user's session begins, in one indexed read.

:func:`session_start` reads the user's active facts (``FactStore.active``: one range scan of
the ``facts_active`` index; superseded, retracted and expired rows are not in it) and takes the
recent turns it is given (the caller's plain store query: no embedding, no vector search), and
returns the profile, the facts, a context block ready to inject and the OpenAI tool definition
of the memory search the agent calls only when it needs more.

The context block separates what the user asserted (``explicit`` / ``confirmed``) from what was
inferred, so a model does not state a guess as the user's word.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memroute.memory.facts.store import FactStore
from memroute.memory.facts.types import INFERRED, PROFILE, Fact
from memroute.types import Memory, format_session_date

MEMORY_SEARCH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "memory_search",
        "description": ("Search what this user said in earlier conversations (facts, past turns). "
                        "Call it only when the answer needs something not in the context."),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "what to look for, in plain words"},
                "top_k": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5},
            },
            "required": ["query"],
        },
    },
}


@dataclass(frozen=True)
class SessionStart:
    profile: list[Fact]
    facts: list[Fact]  # temporal and ephemeral, active and not expired
    recent_turns: list[Memory] = field(default_factory=list)
    context: str = ""
    tool: dict[str, Any] = field(default_factory=lambda: MEMORY_SEARCH_TOOL)

    def to_json(self) -> dict[str, Any]:
        return {
            "object": "memory.session_start",
            "profile": [fact_json(f) for f in self.profile],
            "facts": [fact_json(f) for f in self.facts],
            "recent_turns": [{"id": str(m.id), "text": m.text, "session_time": m.session_time}
                             for m in self.recent_turns],
            "context": self.context,
            "tools": [self.tool],
        }


def session_start(
    store: FactStore, user_id: str, *, recent_turns: Sequence[Memory] = (), now: float | None = None
) -> SessionStart:
    active = store.active(user_id, now=now)
    profile = [f for f in active if f.category == PROFILE]
    facts = [f for f in active if f.category != PROFILE]
    turns = sorted(recent_turns, key=lambda m: (m.session_time, m.turn_index))
    return SessionStart(profile, facts, list(turns), context_block(active, turns))


def context_block(active: Sequence[Fact], recent_turns: Sequence[Memory] = ()) -> str:
    """Asserted facts, then possibilities, then the recent turns; empty when there is nothing."""
    asserted = [f for f in active if f.source != INFERRED]
    inferred = [f for f in active if f.source == INFERRED]
    parts = []
    if asserted:
        parts.append("What the user has told you (current values):\n"
                     + "\n".join(_fact_line(f) for f in asserted))
    if inferred:
        parts.append("Possibly true (inferred, not confirmed by the user):\n"
                     + "\n".join(_fact_line(f) for f in inferred))
    if recent_turns:
        parts.append("Recent conversation:\n" + "\n".join(f"- {m.text}" for m in recent_turns))
    return "\n\n".join(parts)


def _fact_line(f: Fact) -> str:
    return f"- {f.key}: {f.value} (since {format_session_date(int(f.valid_from))})"


def fact_json(f: Fact) -> dict[str, Any]:
    """A fact as the API returns it (ids as strings, as memory ids are)."""
    return {
        "id": str(f.id), "key": f.key, "value": f.value, "category": f.category,
        "source": f.source, "status": f.status, "valid_from": f.valid_from,
        "valid_until": f.valid_until, "recorded_at": f.recorded_at, "expires_at": f.expires_at,
        "retracted_at": f.retracted_at, "superseded_by": _id(f.superseded_by),
        "turn_id": _id(f.turn_id),
    }


def _id(value: int | None) -> str | None:
    return None if value is None else str(value)
