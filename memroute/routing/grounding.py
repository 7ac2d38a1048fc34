"""Whether a cheap tier's answer was read from what it was given (``router.grounding``).

The replay's shadow logs show why log-prob confidence cannot be the only gate: the 0.5B answers a
personal question with the date label of the memory it was shown ("1 March 2024" for an
appointment stated as "8 May 2024"), and a general question ("5 % of 840?") with a confident
"420". Both are accepted at tau 0.5, and the wrong answer is then stored and copied by every
later repeat -- by the large tier too, which reads the same memory.

The rule here asks where the answer's words come from. A lower tier's answer to a question is
accepted only when one trusted source holds every number and code of the answer and at least
``share`` of its words. Trusted sources:

- the user's own turn of each injected memory, for a question on its subject (one shared subject
  word): "24 January 2029: which day of the week is that?" holds no grandmother's birthday, and
  "I changed my building gate code, it's RS-7316 now." no emergency fund target (seed 18);
- the assistant turn of a memory, as the prompt shows it (``memory_view.shown_reply``), that a
  *stronger* tier (or no tier: an ingested history) produced. A tier's own past answers, and
  those of tiers cheaper than it, are not evidence: they are what a wrong answer would have left.
  A stronger tier's answer is evidence only for a question on its subject (one shared subject
  word): "5106", the answer to "What is 63 x 82?", does not ground "5106" as a renovation budget;
- the facts block and the client's own turns (history, tool results).

``router.grounding=closest`` keeps, of the memories' turns, only those sharing the most subject
words with the question: one shared word lets "I changed my building gate code, it's EJ-9569
now." ground "EJ-9569" for "Which code opens my garage door?" when "My garage door code is
YC-4149." shares three (2,000-request trace), and "My sister's birthday is 5 April." a father's.
A user turn that only asks holds no value and does not count. Ties go to the source naming the
question's own "my X" (:func:`possessed`), then to the one with fewer words of its own: "We set
the car budget at $22,500." shares "set" and "budget" with "What did we set the renovation
budget at?" as "Our renovation budget is $39,000." shares "renovation" and "budget", and only
the second names nothing the question does not (seed 37: the 0.5B's "22,500", accepted twice).

Not the memory's date label, and not the question itself: an answer of the question's own
words is an echo, not an answer. An answer with no kept word ("Yes.") is not judged here. Pure
string work, no model call: about 0.2 ms per answer against five memories.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable, Sequence

from memroute.memory.values import values
from memroute.routing.memory_view import only_asks, shown_reply
from memroute.text.answers import (codes, only_a_month, only_a_year, terms, without_dated_days,
                                   without_full_dates)
from memroute.text.dates import DAY_NUM, MONTH_NAMES
from memroute.text.memory_line import split_memory_text
from memroute.text.possessive import possessed
from memroute.text.tokenize import unigrams
from memroute.text.turn_kind import ASKING_OPENINGS
from memroute.types import Message, RetrievalHit, replied_here

GROUNDING_MODES = ("off", "memory", "closest")  # router.grounding, laxest first


def sources(hits: Sequence[RetrievalHit], untrusted_models: Collection[str],
            extra: Iterable[str] = (), question: str | None = None,
            closest: bool = False) -> list[str]:
    """The texts an answer may be read from: each memory's user turn (given ``question``, only
    when on its subject), its assistant turn unless one of
    ``untrusted_models`` wrote it (or, given ``question``, a model wrote it for a question on
    another subject), then ``extra`` (facts block, client turns). ``closest``
    (``router.grounding=closest``): of the memories' turns, only those sharing the most subject
    words with ``question`` (module doc)."""
    subject = None if question is None else subject_words(question)
    owned = frozenset() if question is None else _owned(question)
    # (the question's possessed things it names, subject words shared, - words of its own), text
    scored: list[tuple[tuple[int, int, int], str]] = []
    for h in hits:
        asked, answer = split_memory_text(h.memory.text)[0], shown_reply(h.memory)
        words = subject_words(asked)
        shared = len(subject & words) if subject is not None else 1
        # its own words, values aside: a statement's value ("ZX-4471", "Boise") is no subject;
        # only ``closest`` ranks, so only it counts them
        own = 0
        if closest and subject is not None:
            own = len(subject_words(values(asked)[1]) - subject)
        rank = len(owned & words), shared, -own
        if shared and not (closest and only_asks(asked)):
            scored.append((rank, asked))
        if not answer or h.memory.source_model in untrusted_models:
            continue
        if shared or not h.memory.source_model:
            scored.append(((rank[0], max(shared, 1), rank[2]), answer))
    best = max((n for n, _ in scored), default=None)
    out = [text for n, text in scored if not closest or n == best]
    out.extend(t for t in extra if t)
    return out


# Words any question may share with another without being about the same thing ("On which
# day is my car service?" is not about "Count the days from 9 October 2026 to 26 January 2027.",
# whose dates the 0.5B gave as the appointment's, seed 17), and the filler people wrap a
# question in ("Quick question: ... I keep forgetting." made every wrapped question on the
# subject of every other), and the possessive pronouns ("which locker is mine?" asks what
# "what is my locker number?" asks).
_ASKING_WORDS = (" ".join(ASKING_OPENINGS)
                 + " again remember know need much many please thing day date time week"
                 + " thanks thank hey hi sorry forgot forget forgetting keep quick question"
                 + " just checking one mine yours ours theirs")


@functools.cache
def _asking() -> frozenset[str]:
    return frozenset(unigrams(_ASKING_WORDS, stem=True))  # stemmed once, on first use


def subject_words(text: str) -> frozenset[str]:
    """What a question is about: its kept words, stemmed ("renovation" and "renovating"), and
    its numbers, less the asking words ("what", "tell", "remind", "compute")."""
    return frozenset(unigrams(text, stem=True)) - _asking()


def _owned(question: str) -> frozenset[str]:
    """The things the question names as the user's, stemmed: "cousin" of "where does my cousin
    live?", "roommate" of "my old roommate". Under ``closest`` a source naming them outranks
    one sharing more other words: "My best friend lives in Boise." shared "live" with that
    question as "My cousin moved again, to Porto this time." shared "cousin", and the 0.5B's
    "Boise" was read (seed 35)."""
    return possessed(question, _not_owned())


@functools.cache
def _not_owned() -> frozenset[str]:
    """Words before the thing a "my" names ("my old roommate" is the roommate), stemmed."""
    return _asking() | frozenset(unigrams("old new current former", stem=True))


def on_subject(hits: Sequence[RetrievalHit], question: str) -> list[RetrievalHit]:
    """The memories that share a subject word with ``question`` (in either turn), less the same
    question asked of another thing (:func:`asks_another_thing`): what a tier reads under
    ``router.escalation_memories`` / ``first_tier_memories=subject``."""
    subject = subject_words(question)
    return [h for h in hits
            if subject & subject_words(" ".join(split_memory_text(h.memory.text)))
            and not ("?" in question and asks_another_thing(h, subject))]


def asks_another_thing(hit: RetrievalHit, subject: frozenset[str]) -> bool:
    """The memory is a question put to a tier (a question mark: not a task, "Step 2: List the
    open questions ...", whose earlier steps a workflow's later steps read) that shares words
    with the question of ``subject`` but is about another thing: it lacks one of the question's
    numbers ("product of 22 and 31" for "37 times 27"), or, with no number asked, each has a
    subject word of its own ("Where does my grandfather live? / A: Krakow" for "Where does my
    cousin live?"). Template words ("live", "code", "appointment", "budget") shared this way
    put another fact's value in front of the 0.5B, which answered with it: on seed 31 tier 0
    read 150 memories of another fact for 260 personal questions; this drops 93 of them, and
    13 of the 528 on the question's fact, each a reworded copy ("which caterer did we pick?" /
    "who did we go with as our caterer?") whose statement or other copies stayed in every
    prompt. A statement, and a dataset's or an ingested history's turn, is never dropped: its
    words are the user's own, not a question's template."""
    said = split_memory_text(hit.memory.text)[0]
    if not replied_here(hit.memory.source_model) or "?" not in said:
        return False
    own = subject_words(said)
    numbers = {w for w in subject if any(c.isdigit() for c in w)}
    if numbers:
        return not numbers <= own
    return bool(own - subject) and bool(subject - own)


def client_texts(history: Sequence[Message], tail: Sequence[Message]) -> list[str]:
    """What the client itself sent besides the question: its earlier turns and tool results."""
    return [m.content for m in (*history, *tail) if m.content]


_MONTH_NAMES = frozenset(MONTH_NAMES)
# "may" names the month beside a day or a year ("12 May", "May 2024"), not as a verb ("you may
# want to ...", which would hold a source without a month to the answer's month).
_MAY_THE_MONTH = re.compile(rf"\b{DAY_NUM}[\s,]+may\b|\bmay[\s,]+\d", re.IGNORECASE)


def _months(words: frozenset[str], text: str) -> frozenset[str]:
    """The months ``text`` names, of its terms ``words``."""
    named = words & _MONTH_NAMES
    if "may" in named and not _MAY_THE_MONTH.search(text):
        named -= {"may"}
    return named


def grounded(answer: str, texts: Sequence[str], share: float,
             question: str | None = None) -> bool | None:
    """True when one of ``texts`` holds every number, month and code of ``answer`` and at least
    ``share`` of its terms, less those of ``question``; None when the answer has no term (nothing
    to check). The question's terms are what the user supplied, not a claim: "59 squared is
    3481." for "what's the square of 59?" is read from "Q: What is 59 squared? / A: 3481", whose
    two turns each held only one of its numbers (9 right answers to paraphrased questions of
    the 2,000-request trace escalated so). False for an answer made only of ``question``'s own
    terms: "Rabbit" for "what's our rabbit called?", or "10 days" for "Count the days from 9
    September 2021 to 10 January 2022." restate the question, and the statement holding
    "rabbit" does not make them read (all 10 such 0.5B answers on the 2,000-request trace were
    wrong, 5 of them accepted). A bare year is read only where a text says it outside a full
    date: the 0.5B answered "2024" for "A: 9 May 2024" (11 times in seed 30's first 240
    requests, all accepted)."""
    kept = terms(answer)
    if not kept:
        return None
    if question is not None:
        asked = terms(question)
        if kept <= asked:
            return False
        kept -= asked  # the question's words are no claim: "59 squared is 3481." claims 3481
    if only_a_year(kept):  # a year cut from a date ("2024" for "9 May 2024") is no answer
        texts = [without_full_dates(t) for t in texts]
    elif only_a_month(kept):  # nor a month cut from one ("May 2024" for it; seed 38, 3 times)
        texts = [without_dated_days(t) for t in texts]
    numbers = {t for t in kept if t.isdigit()} | (codes(answer) & kept)
    # A month is claimed as a number is, from a text that names one: the 0.5B's "2024-12-12" for
    # "12 April 2024" held the day and the year, 2 of its 3 terms (seed 35, accepted 3 times).
    # A text that writes its dates in digits ("8/5/2024") names no month to hold.
    months = _months(kept, answer)
    need = share * len(kept)
    for text in texts:
        said = terms(text)
        have = kept & said
        if numbers <= have and len(have) >= need and (months <= have or not _months(said, text)):
            return True
    return False
