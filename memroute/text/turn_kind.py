"""Whether a user turn asks something, or only states (a turn the calibrator never saw).

The calibrator (:mod:`memroute.routing.calibrator`) is fit on shadow samples of questions with
a reference answer. A statement ("My locker code is 4417.", "I moved to Lisbon.") has none, so
P(correct) for its acknowledgement is outside what it learnt: on the replay it escalated every
statement. Pure string work, no model.
"""

from __future__ import annotations

import re

# Openings that ask even without a question mark ("Remind me of my locker code.").
ASKING_OPENINGS = frozenset("""what when where who whom whose which why how do does did is are
    was were am can could would should will shall may might have has had tell remind list give
    show explain describe help recommend suggest find name summarize summarise any
    compute calculate convert add count multiply subtract divide""".split())
_WORD = re.compile(r"[a-z']+")


def asks_something(text: str) -> bool:
    """True for a question or a request (a question mark, or an asking opening word in any of
    its sentences or after a colon: "One more thing: compute 41 squared."); False for a turn
    that only states."""
    if "?" in text:
        return True
    for sentence in re.split(r"[.!\n;:]+", text.lower()):
        first = _WORD.search(sentence)
        if first and first.group() in ASKING_OPENINGS:
            return True
    return False
