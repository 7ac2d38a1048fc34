"""The retrieval query of a turn inside a conversation: the question, plus what it refers to.

Memory retrieval searches with the client's last user message. Inside a conversation that turn is
often a follow-up whose referent is in an earlier turn ("When did she start?", "And Melanie?",
"Why?"): searched alone it finds the wrong memories. :func:`retrieval_query` returns the text to
search with instead: the question, unchanged when it stands on its own, else followed by a little
of the conversation before it. Pure string work (a few microseconds, no model).

When context is added (``when="auto"``, the default):

- **Short or elliptical turns**: at most ``short_words`` words and no proper name ("Why?", "Since
  when?", "Tell me more."), or opening with a continuation cue ("And ...", "What about ...", "How
  about ...", "Also ...", "But ..."). The turn carries no topic of its own, so the preceding user
  turn(s) are added as text.
- **Unresolved references**: a third-person personal pronoun (she, her, his, they, ...) with no
  proper name before it in the question ("When did she paint a sunrise?"; not "What did Caroline
  say about her mom?", whose "her" has its antecedent in the question), or a demonstrative / "it"
  (it, that, those, there, ...) in a question that names nothing ("How long did it take for Jon to
  ..." and "the shoes that Melanie got" are left alone). Added: ``referent="names"`` (default) the
  proper names of the preceding user turn(s), most recent first (``max_names`` caps how many);
  ``referent="turns"`` the preceding user turn(s) as text.
- Anything else (a question that names who and what it is about) is returned unchanged, whatever
  the history: a self-contained question must not pay for the conversation around it.

``when="always"`` adds the preceding user turn(s) to every question (the alternative measured in
``bench/bench_followup_retrieval.py``); ``when="never"`` returns the question (the old behaviour).

What is added, and why: the question always comes first and is never cut; the added context is at
most ``max_chars`` characters (cut at a word boundary, a bound rather than a tuned value). Measured
on LoCoMo questions asked as pronoun follow-ups after another question about the same speaker (10
conversations, docs/BENCHMARKS.md, "Follow-up questions"; evidence Recall@5): the original question
0.766, the follow-up alone 0.754, with the antecedent's names appended (default) 0.761, with the
whole previous question appended 0.652, and with the previous answer too 0.583. The previous
question's topic words pull in its own evidence; its names resolve the reference without importing
the old topic. Self-contained questions with the same history score as without it (0.766) under the
default, 0.650 under ``when="always"``. A 3-word follow-up ("Are you sure?") finds 0.018 alone and
0.731 with the previous user turn (the question itself: 0.749). The assistant's answer is left out
by default (``assistant=True`` adds it to turn-text context, or its names when the user turns have
none): it is the model's own words and was a distractor in the measurement.

History: the client's earlier messages, oldest first, without the current question. System and
tool messages (and assistant turns that only called tools) are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from memroute.types import Message

When = Literal["auto", "always", "never"]
FOLLOWUP_MODES = ("auto", "always", "never")  # retrieval.followup
Referent = Literal["names", "turns"]


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Third-person pronouns and demonstratives whose antecedent may live in an earlier turn
# (first and second person refer to the speakers themselves: nothing to resolve).
PERSONAL_WORDS = _wordset("he she him her his hers himself herself they them their theirs themselves")
IMPERSONAL_WORDS = _wordset("it its itself this that these those there")
REFERRING_WORDS = PERSONAL_WORDS | IMPERSONAL_WORDS
# Openings that continue the previous turn rather than ask something new.
CONTINUATION_CUES: tuple[tuple[str, ...], ...] = (
    ("and",), ("but",), ("also",), ("so",), ("then",), ("what", "about"), ("how", "about"),
    ("what", "else"), ("anything", "else"), ("how", "come"), ("why", "not"),
)
# Capitalized words that are not names when they open a sentence or stand alone.
_NOT_NAMES = _wordset(
    """
    i im ive id ill a an the and but or so also then what when where who whom whose why how which
    did do does is are was were can could would should will shall has have had may might must
    tell remind please say show give list describe explain yes no ok okay oh hi hey thanks thank
    sure well and that this these those there it he she they we you my our your his her their
    in on at of for to from with about after before since during by not any some every
    monday tuesday wednesday thursday friday saturday sunday
    january february march april may june july august september october november december
    """
)
_WORD = re.compile(r"[A-Za-z][A-Za-z'\u2019-]*|\d+")
_SENTENCE_END = re.compile(r"[.!?]")
_QUOTES = '"\u201c\u201d'
_TITLE = re.compile(r"[A-Z][a-z]")  # "Caroline", "McGee"; not "I", "US", "RPG"

DEFAULT_SHORT_WORDS = 3
DEFAULT_MAX_CHARS = 200


def retrieval_query(
    query: str,
    history: Sequence[Message],
    *,
    when: When = "auto",
    referent: Referent = "names",
    user_turns: int = 1,
    max_names: int = 0,
    assistant: bool = False,
    short_words: int = DEFAULT_SHORT_WORDS,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> str:
    """The text to retrieve memories with for ``query`` asked after ``history`` (see the module
    docstring for the rule). ``user_turns``: how many preceding user turns may contribute;
    ``max_names``: at most this many names (0: all); ``assistant``: also the last assistant
    answer; ``short_words``: a turn this short with no name needs its predecessor; ``max_chars``:
    cap on the added context. Returns ``query`` itself (the same object) when nothing is added."""
    if when not in ("auto", "always", "never"):
        raise ValueError(f"when must be auto, always or never, got {when!r}")
    if when == "never" or max_chars <= 0 or user_turns <= 0:
        return query
    users, last_answer = _preceding(history, user_turns)
    if not users:
        return query
    need = "turns" if when == "always" else _need(query, short_words, referent)
    if need is None:
        return query
    if need == "names":
        parts: list[str] = []
        for text in reversed(users):  # most recent first
            for name in proper_names(text):
                if name.lower() not in {p.lower() for p in parts}:
                    parts.append(name)
        if not parts and last_answer and assistant:
            parts = proper_names(last_answer)
        if max_names > 0:
            parts = parts[:max_names]
    else:
        parts = list(reversed(users))  # most recent first: the cap keeps what is nearest
        if assistant and last_answer:
            parts.insert(1, last_answer)  # the answer right after the turn it answered
    context = _cap(" ".join(p.strip() for p in parts if p.strip()), max_chars)
    return f"{query.rstrip()} {context}" if context else query


def needs_context(query: str, *, short_words: int = DEFAULT_SHORT_WORDS) -> bool:
    """Whether ``query`` refers to something outside itself (short/elliptical, or a pronoun or
    demonstrative without a name before it)."""
    return _need(query, short_words, "turns") is not None


def proper_names(text: str) -> list[str]:
    """Capitalized words of ``text`` that are not a sentence's first word (unless followed by a
    possessive) and not a function word or a month/day; possessive ``'s`` stripped; in order,
    without repeats. A cheap stand-in for named-entity recognition (quoted titles count here:
    "it" may refer to one)."""
    out: list[str] = []
    seen: set[str] = set()
    for word, initial, _ in _words(text):
        if not _is_name(word, initial, False):
            continue
        bare = word[:-2] if word.lower().endswith(("'s", "\u2019s")) else word.rstrip("'\u2019")
        if bare.lower() not in seen:
            seen.add(bare.lower())
            out.append(bare)
    return out


# ----------------------------------------------------------------------------- internals
def _preceding(history: Sequence[Message], user_turns: int) -> tuple[list[str], str | None]:
    """The last ``user_turns`` user contents (oldest first) and the last assistant answer given
    after the first of them (None if none), ignoring system and tool messages."""
    users: list[str] = []
    answer: str | None = None
    for msg in reversed(history):
        content = msg.content if isinstance(msg.content, str) else ""
        if not content.strip():
            continue  # e.g. an assistant turn that only called tools
        if msg.role == "user":
            users.append(content)
            if len(users) == user_turns:
                break
        elif msg.role == "assistant" and answer is None and not users:
            answer = content
    users.reverse()
    return users, answer


def _words(text: str) -> list[tuple[str, bool, bool]]:
    """(word, opens a sentence, inside double quotes) for each word of ``text``."""
    out: list[tuple[str, bool, bool]] = []
    initial, quoted = True, False
    pos = 0
    for m in _WORD.finditer(text):
        between = text[pos : m.start()]
        if _SENTENCE_END.search(between):
            initial = True
        for ch in between:
            if ch in _QUOTES:
                quoted = not quoted if ch == '"' else ch == "\u201c"
        out.append((m.group(), initial, quoted))
        initial = False
        pos = m.end()
    return out


def _is_name(word: str, initial: bool, quoted: bool) -> bool:
    """A proper name that can be a pronoun's antecedent: Titlecase, not a function word, not
    inside a quoted title, and not a sentence's first word unless possessive."""
    low = word.lower()
    possessive = low.endswith(("'s", "\u2019s"))
    base = (low[:-2] if possessive else low).rstrip("'\u2019")
    return (not quoted and _TITLE.match(word) is not None and base not in _NOT_NAMES
            and (possessive or not initial))


def _need(query: str, short_words: int, referent: Referent) -> str | None:
    """None (self-contained), "turns" (no topic of its own) or ``referent`` (unresolved pronoun)."""
    tokens = _words(query)
    lowered = [w.lower().rstrip("'\u2019") for w, _, _ in tokens]
    named = [_is_name(*t) for t in tokens]
    if len(tokens) <= short_words and not any(named):
        return "turns"
    for cue in CONTINUATION_CUES:
        if tuple(lowered[: len(cue)]) == cue:
            return "turns"
    for i, low in enumerate(lowered):
        base = low[:-2] if low.endswith(("'s", "\u2019s")) else low
        if base in PERSONAL_WORDS and not any(named[:i]):
            return referent  # "she" with no name before it
        if base in IMPERSONAL_WORDS and not any(named):
            return referent  # "it", "that": only when nothing in the question is named
    return None


def _cap(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars`` characters at a word boundary."""
    text = " ".join(text.split())
    if len(text) <= max_chars:
        return text
    cut = text[: max_chars + 1].rsplit(" ", 1)[0] if " " in text[:max_chars + 1] else text[:max_chars]
    return cut[:max_chars].rstrip()
