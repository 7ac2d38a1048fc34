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
# A sentence's first word; none when it opens with a number ("15 am" is not a question).
_FIRST_WORD = re.compile(r"\s*([a-z']+)")
# Sentence ends, and a colon before a space ("One more thing: compute..."), not in "10:15".
_SENTENCE_END = re.compile(r"[.!\n;]+|:(?=\s)")


def asks_something(text: str) -> bool:
    """True for a question or a request (a question mark, or an asking opening word in any of
    its sentences or after a colon: "One more thing: compute 41 squared."); False for a turn
    that only states."""
    if "?" in text:
        return True
    for sentence in _SENTENCE_END.split(text.lower()):
        first = _FIRST_WORD.match(sentence)
        if first and first.group(1) in ASKING_OPENINGS:
            return True
    return False
