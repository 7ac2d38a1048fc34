"""An answer that copies a memory line instead of answering from it.

Asked "Remind me of my storage unit code.", the 0.5B repeats the memory that reminds it:
"[1 March 2024] Q: The code for my storage unit is GG-9512, just so you know. / A". The
grounding gate cannot read such an answer from any source (it is a line, not a value): 17 of
the 2,000-request trace's 18 escalated, at about 5,000 EffCost@prod each (16 held the right
value), and the user got "Q: We set the wedding budget at $42,000." for the other. What the
line says is the answer: the reply it shows, or, for a user's statement, the statement's one
code the question does not name, else the statement. The gate then judges that as any answer.
Pure string work, no model (memroute/routing/prompt.py writes the lines).
"""

from __future__ import annotations

import re
from dataclasses import replace

from memroute.text.answers import codes
from memroute.text.memory_line import parse_memory_line
from memroute.text.turn_kind import only_states
from memroute.types import ModelReply


def answer_in_echo(text: str, question: str) -> str:
    """What ``text`` answers ``question`` with when it copies a memory line (module doc);
    ``text`` itself when it copies none, or copies a question whose reply it does not show."""
    line = parse_memory_line(text) if "\n" not in text.strip() else None  # one line only
    if line is None:
        return text
    turn, reply = line.turn, line.reply
    if only_states(turn):  # the user told it: whatever reply the copy adds ("Noted.") is none
        new = codes(turn) - codes(question)
        if len(new) == 1:
            found = re.search(re.escape(next(iter(new))), turn, re.I)
            assert found is not None  # codes() found it there
            return found.group(0)
        return turn
    return reply or text


def read_echo(reply: ModelReply, question: str) -> ModelReply:
    """``reply`` answering with what the memory line it copies says. Its tokens, log-probs and
    cost stay those of what the model generated. A tool call is left as it is, and so is a reply
    cut at max_tokens: its line's reply may be cut too ("... / A: NG" for "NG-6769"). So is a
    reply whose tokens the client asked to see (``logprobs``): those must spell its text."""
    if reply.tool_calls or reply.finish_reason == "length" or reply.token_texts is not None:
        return reply
    text = answer_in_echo(reply.text, question)
    return reply if text == reply.text else replace(reply, text=text)
