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
# Openings of a task for the assistant that asks nothing ("Draft a short message to ...",
# "Step 2: Extract the invoice total ..."): its reply is work a later turn may need.
REQUEST_OPENINGS = frozenset("""draft write compose create make prepare generate translate rewrite
    rephrase outline extract look verify check estimate book schedule send email reply plan sort
    pick choose fill format search""".split())
# A sentence's first word past a greeting or filler ("Hey, remind me of my locker code." asks:
# read as a statement, 25 questions of the generated traces went ungated, and answered "Noted."
# once statements had their own prompt); none when it opens with a number ("15 am" is not a
# question).
_FILLER = r"(?:hey|hi|hello|ok|okay|oh|so|well|please|also|and|um)"
_FIRST_WORD = re.compile(rf"\s*(?:{_FILLER}\b[\s,]*)*([a-z']+)")
# Sentence ends, and a colon before a space ("One more thing: compute..."), not in "10:15".
_SENTENCE_END = re.compile(r"[.!\n;]+|:(?=\s)")


def _openings(text: str) -> list[str]:
    """The first word of each sentence and colon clause of ``text`` (lower-cased)."""
    firsts = (_FIRST_WORD.match(s) for s in _SENTENCE_END.split(text.lower()))
    return [m.group(1) for m in firsts if m]


def asks_something(text: str) -> bool:
    """True for a question or a request (a question mark, or an asking opening word in any of
    its sentences or after a colon: "One more thing: compute 41 squared."); False for a turn
    that only states."""
    return "?" in text or any(w in ASKING_OPENINGS for w in _openings(text))


def only_states(text: str) -> bool:
    """True for a turn that neither asks nor sets a task: the user telling something ("Note
    this down: my locker code is ZY-1685.", "For the record, the claim number is 88-12.")."""
    return not asks_something(text) and not any(w in REQUEST_OPENINGS for w in _openings(text))
