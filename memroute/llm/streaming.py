"""Streaming: which part of the text generated so far can go to the client (text that may be
the start of a stop string or of a tool call is held back), so the deltas always join to the
final reply's text.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from memroute.llm.replies import find_stop
from memroute.llm.tool_calls import may_start_tool_call

if TYPE_CHECKING:
    from memroute.types import ModelReply


def stream_safe_len(text: str, stop: Sequence[str] | None, tools_on: bool) -> int:
    """How many characters of ``text`` (the output so far) may go to a client now.

    Held back: everything from a stop string on, a suffix that may be the start of a stop
    string, a trailing incomplete character (U+FFFD from a partial UTF-8 token) and, with tools
    on, everything from where a tool call may start plus trailing whitespace (it may precede a
    call that the final content will not include).
    """
    stops = [s for s in (stop or ()) if s]
    pos = find_stop(text, stops)
    end = len(text) if pos is None else pos
    if pos is None:
        for s in stops:
            for k in range(min(len(s) - 1, len(text)), 0, -1):
                if text.endswith(s[:k]):
                    end = min(end, len(text) - k)
                    break
    end = min(end, len(text[:end].rstrip("\ufffd")))
    if tools_on:
        start = may_start_tool_call(text[:end])
        if start is not None:
            end = min(end, start)
        end = len(text[:end].rstrip())
    return end


class StreamText:
    """The text deltas of one stream: :meth:`update` with the whole output so far returns what
    may be sent now; :meth:`finish` with the final reply's text returns the rest, so the deltas
    always join to the final text."""

    def __init__(self, stop: Sequence[str] | None = None, tools_on: bool = False) -> None:
        self.stop = [s for s in (stop or ()) if s]
        self.tools_on = tools_on
        self.sent = ""

    def update(self, text: str) -> str:
        n = stream_safe_len(text, self.stop, self.tools_on)
        if n <= len(self.sent) or not text.startswith(self.sent):
            return ""
        delta, self.sent = text[len(self.sent) : n], text[:n]
        return delta

    def stopped(self, text: str) -> bool:
        """Whether ``text`` already contains a stop string (the stream can end)."""
        return find_stop(text, self.stop) is not None

    def finish(self, final_text: str) -> str:
        if not final_text.startswith(self.sent):
            return ""  # cannot happen with the engines' prefix-stable decoding
        delta, self.sent = final_text[len(self.sent) :], final_text
        return delta

    def ending(self, reply: ModelReply) -> Iterator[str | ModelReply]:
        """A stream's last items: the text not sent yet (if any), then the reply itself."""
        tail = self.finish(reply.text)
        if tail:
            yield tail
        yield reply
