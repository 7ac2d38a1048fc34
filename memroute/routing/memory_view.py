"""What of a stored turn-pair a prompt shows: its date label and its reply.

Each is cut where replays showed them misleading the tiers more than informing them
(docs/BENCHMARKS.md, "Date labels, replies to change statements, and a user's question as
evidence"):

- **The date label** (``router.memory_dates=auto``). A question that asks for a date or time the
  user stated ("when is my vet appointment?", "what time does the call start?") is shown its
  memories without their ``[4 March 2024]`` labels: on fresh replay seeds the 1.5B answered such
  questions with a label ("4 March 2024" for an appointment moved to 9 April) 11 times in 95.
  A memory with a relative time word ("yesterday", "next month") keeps its label, which is what
  turns the word into a date. Every other question (when something *happened*: "when did...",
  and all non-time questions) keeps every label: LoCoMo's temporal questions are answered by them.
- **The reply to a change statement.** The user is the authority on their own facts, so a reply
  is not shown with "From now on the call is at 8:30 am" when it states another value of the same
  kind or, written by a model, any value the statement does not state
  (``supersession.contradicts_itself``): the 1.5B answered that statement with "1 March 2024",
  a date label, and the 0.5B then copied it into every later answer. A reply not shown is no
  evidence for grounding either.
- **A model's reply to a statement.** A user turn that only states (``turn_kind.only_states``:
  no question, no task) is the memory; the reply is an acknowledgement. Shown, it misled: the
  0.5B acknowledged "Note this down: my locker code is ZY-1685." with "Octavia Castellano", a
  name from its memory block, and a later "When is my eye exam?" got that name back (seed 17);
  and once statements were answered without memories (``router.statement_memories=none``) their
  sentences ("The travel budget was set at $17,000.") became the answer style the 0.5B copied
  for the questions (stop 48: F1 83.3 -> 75.8 on seed 31, value % unchanged). A task's reply
  ("Draft a short message to ...") is kept: it is the work a later step reads; so is a
  dataset's reply (LoCoMo's second speaker is a person).
- **A model's reply that echoes the memory block** ("[2 March 2024] Q: Can you remind me: where
  does my sister live? / A: Tbilisi" as the 0.5B's reply to "My sister moved again, to
  Tbilisi"): 25 of the 0.5B's 54 replies to statements on seed 17. It says nothing the memories
  do not, costs every later prompt that retrieves it its tokens, and mixes another pair's
  question into this one.
- **A question whose reply is not shown** (``only_asks``): the line would read "Q: Sorry, I
  forgot: which city does my sister live in?" and nothing else. Such lines are left out of the
  block (``MemoryLayout.informs``); an escalation, which does not see the cheaper tiers'
  replies, read up to three of them per request, each priced as the large model's input.
"""

from __future__ import annotations

import re

from memroute.memory.supersession import contradicts_itself, statement_part
from memroute.memory.values import values
from memroute.text.dates import WEEKDAY
from memroute.text.memory_line import echoes_memory, split_memory_text
from memroute.text.turn_kind import asks_something, only_states
from memroute.types import Memory, replied_here

DATE_MODES = ("auto", "all", "relative", "none")

# "when is", "what date is", "on which day does", "at what time is", "what time does": a date
# or time asked of a present or coming thing the user stated (not "when did": an event's date).
_ASKS_STATED_TIME = re.compile(
    r"\b(?:when|what\s+date|which\s+date|what\s+day|which\s+day|what\s+time)\s+"
    r"(?:is|are|does|do|will)\b", re.I)
# Words a date label turns into a date ("yesterday" -> 7 May 2023).
_RELATIVE_TIME = re.compile(
    rf"\b(?:today|tonight|tomorrow|yesterday|ago|(?:last|next|this|past|coming)\s+"
    rf"(?:week|weekend|month|year|night|morning|afternoon|evening|{WEEKDAY}))\b", re.I)


def asks_stated_time(question: str) -> bool:
    """A question asking for a date or time the user stated ("when is my dentist appointment?")."""
    return bool(_ASKS_STATED_TIME.search(question))


def needs_date(memory_text: str) -> bool:
    """The memory holds a relative time word its date label resolves."""
    return bool(_RELATIVE_TIME.search(memory_text))


def dates_for(mode: str, question: str | None) -> str:
    """``auto`` resolved for one question: ``relative`` (labels only where a relative time word
    needs one) for a question asking a stated date or time, else ``all``."""
    if mode != "auto":
        return mode
    return "relative" if question is not None and asks_stated_time(question) else "all"


def shows_date(mode: str, memory: Memory) -> bool:
    """Whether ``memory`` keeps its date label under a resolved mode (``auto`` acts as ``all``)."""
    return mode in ("all", "auto") or (mode == "relative" and needs_date(memory.text))


def only_asks(user_turn: str) -> bool:
    """A user turn that asks and states no value of its own ("Sorry, I forgot: which city does
    my sister live in?"; not "My gym raised my membership to $45. Is it still worth it?")."""
    return asks_something(user_turn) and not values(statement_part(user_turn))[0]


def shown_reply(memory: Memory) -> str:
    """The memory's reply as a prompt shows it: empty when it is not shown (module doc)."""
    question, answer = split_memory_text(memory.text)
    by_model = replied_here(memory.source_model)
    if answer and by_model and echoes_memory(answer):
        return ""
    if answer and contradicts_itself(question, answer, any_kind=bool(memory.source_model)):
        return ""
    if answer and by_model and only_states(question):
        return ""  # an acknowledgement: the user's statement is the memory
    return answer
