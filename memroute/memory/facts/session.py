"""Session start: what an agent loads when a user's session begins, in one indexed read.

:func:`session_start` reads the user's active facts (``FactStore.active``: one range scan of
the ``facts_active`` index; superseded, retracted and expired rows are not in it) and takes the
recent turns it is given (the caller's plain store query: no embedding, no vector search), and
returns the profile, the facts, a context block ready to inject and the OpenAI tool definition
of the memory search the agent calls only when it needs more.

The context block separates what the user asserted (``explicit`` / ``confirmed``) from what was
inferred, so a model does not state a guess as the user's word.

Speed: at a thousand facts, turning rows into JSON and text costs more than the read. The
store hands back the same snapshot object while a user's facts are unchanged
(:meth:`FactStore.active_snapshot`), so :class:`RenderCache` keeps what was built from it
and reuses it by identity; only the recent turns are rendered per call.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
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
class RenderedFacts:
    """What session start builds from a user's active facts (shared: treat as read-only)."""

    profile: list[Fact]
    facts: list[Fact]  # temporal and ephemeral, active and not expired
    profile_json: list[dict[str, Any]]
    facts_json: list[dict[str, Any]]
    text: str  # the facts part of the context block

    @cached_property
    def encoded(self) -> bytes:
        """``"profile":[...],"facts":[...]`` as UTF-8 JSON, built once: at a thousand facts
        encoding costs more than the read (``SessionStart.to_json_bytes``)."""
        return (f'"profile":{_dumps(self.profile_json)},'
                f'"facts":{_dumps(self.facts_json)}').encode()

    @cached_property
    def text_open(self) -> bytes:
        """``text`` as a JSON string without its closing quote: JSON escapes character by
        character, so the recent turns' part can be appended to it encoded on its own."""
        return _dumps(self.text)[:-1].encode()


def render_facts(active: Sequence[Fact]) -> RenderedFacts:
    profile = [f for f in active if f.category == PROFILE]
    facts = [f for f in active if f.category != PROFILE]
    return RenderedFacts(profile, facts, [fact_json(f) for f in profile],
                         [fact_json(f) for f in facts], _facts_text(active))


class RenderCache:
    """The last :class:`RenderedFacts` per user, reused while the store returns the same
    snapshot object (a bounded LRU; thread-safe)."""

    def __init__(self, max_users: int = 10000) -> None:
        self.max_users = max_users
        self._entries: OrderedDict[str, tuple[Sequence[Fact], RenderedFacts]] = OrderedDict()
        self._lock = threading.Lock()

    def render(self, user_id: str, active: Sequence[Fact]) -> RenderedFacts:
        with self._lock:
            entry = self._entries.get(user_id)
            if entry is not None and entry[0] is active:
                self._entries.move_to_end(user_id)
                return entry[1]
        rendered = render_facts(active)
        if self.max_users > 0:
            with self._lock:
                self._entries[user_id] = (active, rendered)
                self._entries.move_to_end(user_id)
                while len(self._entries) > self.max_users:
                    self._entries.popitem(last=False)
        return rendered


@dataclass(frozen=True)
class SessionStart:
    rendered: RenderedFacts
    recent_turns: list[Memory] = field(default_factory=list)
    tool: dict[str, Any] = field(default_factory=lambda: MEMORY_SEARCH_TOOL)

    @property
    def profile(self) -> list[Fact]:
        return self.rendered.profile

    @property
    def facts(self) -> list[Fact]:
        return self.rendered.facts

    @property
    def context(self) -> str:
        return _join(self.rendered.text, _turns_text(self.recent_turns))

    def to_json(self) -> dict[str, Any]:
        return {
            "object": "memory.session_start",
            "profile": list(self.rendered.profile_json),
            "facts": list(self.rendered.facts_json),
            **self._rest(),
        }

    def to_json_bytes(self) -> bytes:
        """:meth:`to_json` encoded as the HTTP body (compact UTF-8 JSON, as Starlette's
        JSONResponse writes it); the facts' part (the lists and their context text) is encoded
        once per snapshot, only the recent turns per call."""
        r = self.rendered
        turns = _turns_text(self.recent_turns)
        tail = ("\n\n" if r.text and turns else "") + turns
        return b"".join([
            b'{"object":"memory.session_start",', r.encoded,
            b',"recent_turns":', _dumps(self._turns_json()).encode(),
            b',"context":', r.text_open, _dumps(tail)[1:].encode(),
            b',"tools":', _dumps([self.tool]).encode(), b"}",
        ])

    def _turns_json(self) -> list[dict[str, Any]]:
        return [{"id": str(m.id), "text": m.text, "session_time": m.session_time}
                for m in self.recent_turns]

    def _rest(self) -> dict[str, Any]:
        return {"recent_turns": self._turns_json(), "context": self.context, "tools": [self.tool]}


def session_start(
    store: FactStore, user_id: str, *, recent: int = 0, pending: Sequence[Memory] = (),
    now: float | None = None, cache: RenderCache | None = None,
) -> SessionStart:
    """The user's session start: active facts and the newest ``recent`` turn-pairs, read in one
    transaction, plus ``pending`` (turns journaled but not yet recorded by the background lane:
    read-your-writes), the newest ``recent`` of both by (session time, recording time)."""
    active, stored = store.session_read(user_id, recent=recent, now=now)
    rendered = cache.render(user_id, active) if cache is not None else render_facts(active)
    turns = {m.id: m for m in stored}
    turns.update((m.id, m) for m in pending)
    newest = sorted(turns.values(), key=lambda m: (m.session_time, m.created_at, m.turn_index))
    return SessionStart(rendered, newest[-recent:] if recent > 0 else [])


def context_block(active: Sequence[Fact], recent_turns: Sequence[Memory] = ()) -> str:
    """Asserted facts, then possibilities, then the recent turns; empty when there is nothing."""
    return _join(_facts_text(active), _turns_text(recent_turns))


def _facts_text(active: Sequence[Fact]) -> str:
    asserted = [f for f in active if f.source != INFERRED]
    inferred = [f for f in active if f.source == INFERRED]
    parts = []
    if asserted:
        parts.append("What the user has told you (current values):\n"
                     + "\n".join(fact_line(f) for f in asserted))
    if inferred:
        parts.append("Possibly true (inferred, not confirmed by the user):\n"
                     + "\n".join(fact_line(f) for f in inferred))
    return "\n\n".join(parts)


def _turns_text(recent_turns: Sequence[Memory]) -> str:
    if not recent_turns:
        return ""
    return "Recent conversation:\n" + "\n".join(f"- {m.text}" for m in recent_turns)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _join(*parts: str) -> str:
    return "\n\n".join(p for p in parts if p)


def fact_line(f: Fact) -> str:
    """One fact as a line of the context block (the router's facts block counts these)."""
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
