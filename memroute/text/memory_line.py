"""One memory line, read one way everywhere.

A stored turn-pair's text is ``[date] Q: <user turn> / A: <reply>`` (``types.TurnPair.text``).
A prompt shows it as a bullet, without the reply where the reply is hidden (``- [date] Q: ...``,
routing/prompt.py). Small models copy such lines into their answers, sometimes cut short
("[1 March 2024] Q: The code for my storage unit is GG-9512, just so you know. / A"). The store,
the grounding gate, the echo reader and the mock engine all need the same two parts of a line,
the user's turn and the reply it shows, so they read it here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LABEL = r"\[[^\]\n]{1,60}\]"  # "[1 March 2024]", LoCoMo's "[D1:3, 1:56 pm on 8 May, 2023]"
# An optional "- " bullet and "[date] " label, "Q:" and the user's turn, then the reply after
# " / A:" where one is shown. A bare " / A" that ends the text is a copy cut before its reply.
_LINE = re.compile(rf"(?:-\s*)?(?:{_LABEL}\s*)?Q:\s*(?P<turn>.*?)"
                   r"(?:\s+/\s+A(?::\s*(?P<reply>.*)|\s*))?", re.DOTALL)
_LEADING_LABEL = re.compile(rf"{_LABEL}\s*")
# Where a prompt's bulleted memory line starts: "- [date] Q: " at the start of a line.
_BULLETED_START = re.compile(rf"^- {_LABEL} Q: ", re.MULTILINE)
# A memory line's markup in a reply: it opens with "Q:" (after a bullet or date label), or holds
# " Q: ... / A:" further on.
_ECHO = re.compile(rf"^\s*(?:-\s*)?(?:{_LABEL}\s*)?Q:|(?:^|\s)Q: .*\s/ A:")


@dataclass(frozen=True)
class MemoryLine:
    turn: str  # the user's turn
    reply: str  # the reply the line shows; "" where it shows none


def parse_memory_line(text: str) -> MemoryLine | None:
    """The parts of ``text`` when the whole of it is one memory line (module doc), else None."""
    m = _LINE.fullmatch(text.strip())
    if m is None:
        return None
    return MemoryLine(m["turn"].strip(), (m["reply"] or "").strip())


def split_memory_text(text: str) -> tuple[str, str]:
    """(user turn, reply) of a stored memory's text. A text that is no turn-pair (a summary
    node's "[date] Summary: ...") is all turn, less its date label."""
    line = parse_memory_line(text)
    if line is not None:
        return line.turn, line.reply
    text = text.strip()
    label = _LEADING_LABEL.match(text)
    return (text[label.end():] if label else text), ""


def last_bulleted_line(text: str) -> str | None:
    """The last "- [date] Q: ..." line of a prompt, less its bullet, to the end of ``text``; a
    prompt's memory block lists memories oldest first and closes the prompt, so it is the newest."""
    starts = [m.start() for m in _BULLETED_START.finditer(text)]
    return text[starts[-1] + 2:].rstrip() if starts else None


def echoes_memory(reply: str) -> bool:
    """A reply that copies a memory line of its prompt instead of answering."""
    return bool(_ECHO.search(reply))
