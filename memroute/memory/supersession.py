"""Which stored turn-pairs a new turn-pair supersedes: deterministic rules, no language model.

A user who says "I changed my locker code, it's QT-8812 now." makes every older turn-pair that
states or answers the old locker code stale: the statement "My locker code is ZX-4471." and the
question-answer pair "What is my locker code? / Your locker code is ZX-4471.". A small model
given both reads the older value about as often as the newer one, and model-made supersession
decisions are worst exactly on small models (Zep's knowledge-update accuracy with gpt-4o-mini
fell below full context), so this module decides without one. A new pair supersedes an older
one when all of these hold:

1. the new user turn states something (its statement sentences: a turn that tells and then
   asks, "My gym raised my membership to $45. Is it still worth it?", is read without its
   question) and carries a change cue ("changed", "moved", "switched", "raised", "no longer",
   "now", "correction", "actually", ...: :data:`CUES`), and no addition cue ("also",
   "another", "second", "too": a second pet is not a renamed pet);
2. it states a value: a token shaped like a code or number, a time, a date, an amount of money,
   a quoted title or a name (capitalised words inside a sentence) -- :func:`values`;
3. the older pair mentions the new statement's subject: at least ``SUBJECT_SHARE`` of the
   update's subject words (its stemmed content words, less cues, values, time words and generic
   verbs such as "is called") occur in the older pair, question and answer together;
4. for some kind of value the update states (a date for a date, a name for a name), the older
   pair holds values of that kind and none of them is a new one: "$800 toward a trip to
   Estonia" is replaced by "the Estonia trip savings are now $1,300" (the money differs; the
   shared name is context), and a pair that already says the new value is current.

Rule 3 reads words, so it misses an update worded apart from the statement it replaces ("I
traded in my old car for a Mazda 3" after "I drive a Kia Niro"; "my houseplant collection is up
to 14" after "I have 9 houseplants"). With a ``similar`` function (an encoder's cosine of the
user turns' statements; :mod:`memroute.memory.meaning`), a change statement that rules 3-4 matched
to nothing supersedes by meaning (rule 5): of the older pairs that pass rule 4, the one whose
user turn is most similar, when it is at least ``MEANING_MIN`` similar and ahead of the
runner-up by ``MEANING_MARGIN``. The margin is what keeps sibling facts apart: a user's
father's and mother's birthdays, or four friends who each moved, are all alike (cosine up to
0.8), so none stands out; the one statement a paraphrased update is about does. A user with one
sibling fact has no runner-up, so an older statement about another thing of the user's ("my
sister lives in Lyon" against "my brother just moved to Tallinn") is never a candidate: its "my
X" is not in the update, and the update's "my Y" is not in it.

Nothing here writes: :func:`superseded_by` returns ids, and the store marks those rows
(``superseded_by``, ``valid_until``) without deleting them. Measured against the replay trace's
ground truth (which fact each request is about) in docs/BENCHMARKS.md, false supersessions
included.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from memroute.memory.values import Value, reply_text, values
from memroute.text.answers import is_year, terms
from memroute.text.memory_line import echoes_memory, split_memory_text
from memroute.text.possessive import possessed
from memroute.text.tokenize import unigrams
from memroute.text.turn_kind import only_states
from memroute.types import Memory, RetrievalHit, TurnPair

SUBJECT_SHARE = 0.75  # share of the update's subject words the older pair must mention
# Rule 5 (by meaning), measured on the tuning seeds of both benches (docs/BENCHMARKS.md):
MEANING_MIN = 0.35  # cosine of the user turns' statements
MEANING_MARGIN = 0.30  # ahead of the next most similar candidate by this much

# cosines of one statement to each of several (rows L2-normalised: dot products)
Similarity = Callable[[str, Sequence[str]], Sequence[float]]

# Change cues (normalised words or phrases) and the addition cues that veto them.
CUES = frozenset("""changed change changes moved move switched switch renamed renaming rename
    rescheduled relocated reissued updated update corrected correction actually instead
    anymore now replaced replace wrong increased decreased upgraded downgraded promoted
    traded started""".split())
# "raised"/"lowered" only as verbs with an object ("raised my rent"), not "raised beds"
CUE_PHRASES = ("no longer", "from now on", "not anymore", "got it wrong", "change of plan",
               *(f"{verb} {det}" for verb in ("raised", "lowered")
                 for det in ("my", "our", "the", "his", "her", "their", "it", "its")))
ADDITION_CUES = frozenset("also another second too additionally other".split())
ADDITION_PHRASES = ("as well", "in addition")
# Words that say how a value is related rather than what it is about; never a subject.
GENERIC = frozenset("""name named call called is are was be got get have has had set go went
    going ended end up heads note down know just so please thanks old new one ones work works
    working it its thing things record keep forget let them they did done make made tell told
    remind question quick sorry hey more checking wait right okay day date time up finally""".split())
# A move that names nothing else it is about replaces where the user lives.
MOVE_CUES = frozenset("moved relocated".split())
HOME = frozenset({"live"})
# When something happened is not what it is about: never a subject either.
TIME_WORDS = frozenset("""today yesterday tonight tomorrow morning afternoon evening week weekend
    month year last this next ago recently""".split())
_PHRASES_RE = re.compile("|".join(map(re.escape, (*CUE_PHRASES, *ADDITION_PHRASES))), re.I)
_QUESTION_START = re.compile(
    r"^\s*(?:[\w' ]{0,40}?[:,]\s*)?(?:what|when|where|who|whom|whose|which|why|how|is|are|do|does|"
    r"did|can|could|would|will|should|remind me|tell me)\b", re.I)

# Money is compared by its amount, and a bare amount ("36,500") is money: the 0.5B answered
# "How much is the renovation budget?" with "36,500" after "We set the renovation budget at
# $36,500.", and "We changed the renovation budget to $40,500." left those answers current, for
# the 0.5B to read again (seed 35: 5 such pairs, 8 escalations). Split as codes, "36,500" and
# "40,500" also shared their "500".
_BARE_AMOUNT = re.compile(r"(?<![\w$€£.,-])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w,-]|\.\d)")
_SCALE = {"k": 1_000, "m": 1_000_000}


def _norm(v: Value) -> str:
    """What rule 4 compares (:func:`_alike`): a money value's amount ("$40,500", "40,500" and
    "$40.5k" alike), and a date's terms, sorted ("2024-05-17", "17 May 2024" and "May 17th"
    alike: the 0.5B answers in ISO form, and "rescheduled to 20 May 2024" left its
    "2024-05-17" current, seed 36)."""
    if v.kind == "date":
        return " ".join(sorted(terms(v.norm)))
    if v.kind != "money":
        return v.norm
    digits = re.sub(r"[^\d.km]", "", v.norm)
    try:
        amount = float(digits.rstrip("km")) * _SCALE.get(digits[-1:], 1)
    except ValueError:
        return v.norm
    return str(int(amount)) if amount.is_integer() else str(amount)


def _alike(kind: str, a: str, b: str) -> bool:
    """Two normed values (:func:`_norm`) are the same value. Dates are the same when their day
    and month are and their years do not differ: "17 May" is "17 May 2024" (one says no year),
    "9 May 2025" is not "9 May 2024"."""
    if kind != "date" or a == b:
        return a == b
    a_terms, b_terms = a.split(), b.split()
    a_years = {t for t in a_terms if is_year(t)}
    b_years = {t for t in b_terms if is_year(t)}
    same_day = set(a_terms) - a_years == set(b_terms) - b_years
    return same_day and (not a_years or not b_years or a_years == b_years)


def _holds(kind: str, norms: Iterable[str], of: Iterable[str]) -> bool:
    """One of ``norms`` is one of the values ``of`` (both normed, of ``kind``)."""
    of = tuple(of)
    return any(_alike(kind, n, o) for n in norms for o in of)


def _with_amounts(found: tuple[Value, ...], text: str) -> tuple[Value, ...]:
    """``found`` (the values of ``text``) and the bare amounts in ``text``, as money."""
    return found + tuple(Value("money", m.group()) for m in _BARE_AMOUNT.finditer(text))


@dataclass(frozen=True)
class Update:
    """What a change statement says: its subject words and the values it states."""

    subject: frozenset[str]
    values: tuple[Value, ...]



def _has(text: str, words: frozenset[str], phrases: Sequence[str]) -> bool:
    low = " ".join(re.findall(r"[a-z']+", text.lower()))
    return bool(words & set(low.split())) or any(p in low for p in phrases)


def is_question(text: str) -> bool:
    return text.rstrip().endswith("?") or bool(_QUESTION_START.match(text))


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")


def statement_part(text: str) -> str:
    """The sentences of ``text`` that are not questions ("" for a plain question)."""
    return " ".join(s for s in _SENTENCE_END.split(text.strip()) if s and not is_question(s))


def subject_words(text: str) -> frozenset[str]:
    """Stemmed content words of ``text`` less cues and generic words (values cut out first)."""
    _, rest = values(text)
    rest = _PHRASES_RE.sub(" ", rest)
    drop = _dropped_words()
    return frozenset(w for w in unigrams(rest, stem=True) if w not in drop)


# Memoised (bounded): a pair's user turn is parsed on each write, supersede pass and prompt
# render; the parse is pure and the texts repeat.
@functools.lru_cache(maxsize=8192)
def as_update(user_text: str) -> Update | None:
    """The update ``user_text`` states, or None when it is no change statement (rules 1-2)."""
    said = statement_part(user_text)
    if not said or not _has(said, CUES, CUE_PHRASES):
        return None
    if _has(said, ADDITION_CUES, ADDITION_PHRASES):
        return None
    vals = _with_amounts(values(said)[0], said)
    subject = subject_words(said)
    if not subject and _has(said, MOVE_CUES, ()) and any(v.kind == "name" for v in vals):
        subject = HOME  # "We finally moved to Lisbon!" is about where the user lives
    if not vals or not subject:
        return None
    return Update(subject, vals)


def judged(memory_text: str) -> str:
    """What of a stored pair the rules read: the pair without a reply that echoes memory lines.
    The 0.5B acknowledged "My best friend just moved to Porto." with "[11 March 2024] Q: What is
    my car rental number? / A: QS-8185", and the car rental update then superseded the move
    (seed 25; 3 such statements on the 2,000-request trace). Prompts do not show such a reply
    either (``routing.memory_view``)."""
    pair, _, answer = memory_text.partition(" / A: ")
    return pair if answer and echoes_memory(answer) else memory_text


def states_old_value(update: Update, memory_text: str) -> bool:
    """Rules 3-4: the older pair is about the update's subject and holds a value it replaces."""
    return _about_subject(update, memory_text) and replaces_value(update, memory_text)


@dataclass(frozen=True)
class _Read:
    """What rules 3-4 read from a stored pair's text, parsed once per text."""

    words: frozenset[str]  # stemmed words, values cut out (rule 3)
    held: dict[str, frozenset[str]]  # kind -> the values the pair asserts (rule 4)


# Memoised (bounded, ~25 MB): a change statement is checked against the user's whole history
# (rule 5), so every stored text would otherwise be parsed again for each update.
@functools.lru_cache(maxsize=16384)
def _read(memory_text: str) -> _Read:
    question, answer = split_memory_text(memory_text)
    whole, rest = values(f"{question} {reply_text(answer)}")
    # a question asserts nothing ("Is Lisbon expensive to live in?"): only its answer can hold
    # the user's old value ("What is my locker code? / It's ZX-4471.")
    if statement_part(question):
        old = _with_amounts(whole, f"{question} {answer}")
    else:
        old = _with_amounts(values(reply_text(answer))[0], answer)
    held: dict[str, set[str]] = {}
    for v in old:
        held.setdefault(v.kind, set()).add(_norm(v))
    return _Read(frozenset(unigrams(rest, stem=True)),
                 {kind: frozenset(norms) for kind, norms in held.items()})


def _about_subject(update: Update, memory_text: str) -> bool:
    """Rule 3: the older pair mentions most of the update's subject words."""
    words = _read(memory_text).words
    return len(update.subject & words) >= SUBJECT_SHARE * len(update.subject)


def replaces_value(update: Update, memory_text: str) -> bool:
    """Rule 4: the older pair holds a value of a kind the update states, and not the new one."""
    held = _read(memory_text).held
    for kind in {v.kind for v in update.values}:
        new = {_norm(v) for v in update.values if v.kind == kind}
        if held.get(kind) and not _holds(kind, held[kind], new):  # not already the new value
            return True
    return False


def said(user_text: str) -> str:
    """What a user turn states, for rule 5's similarity: its statement sentences, or the whole
    turn when it only asks."""
    return statement_part(user_text) or user_text


def _order(m: Memory | TurnPair) -> tuple[int, float, int]:
    return (int(m.session_time), float(m.created_at), int(m.turn_index))


def superseded_by(new: TurnPair, older: Iterable[Memory], similar: Similarity | None = None,
                  ) -> list[int]:
    """Ids of the current memories in ``older`` that ``new`` supersedes (oldest first): by
    rules 1-4, or, when those find none and ``similar`` is given, by meaning (rule 5)."""
    update = as_update(new.user_text)
    if update is None:
        return []
    key = _order(new)
    current = [m for m in older if m.id != new.id and not m.superseded_by
               and m.user_id == new.user_id and _order(m) < key]
    hits = [m for m in current if states_old_value(update, judged(m.text))]
    if not hits and similar is not None:
        hits = _by_meaning(new, update, current, similar)
    return [m.id for m in sorted(hits, key=_order)]


def _possessed(text: str) -> frozenset[str]:
    """Stems of what ``text`` says is the user's, generic words skipped ("my old car" -> car)."""
    return possessed(text, _dropped_words())


def _another_thing(statement: str, older: str) -> bool:
    """The older statement is about something else the user has: it names a "my X" the update
    never mentions, and the update names no "my Y" that it mentions."""
    mine = _possessed(older)
    if not mine:
        return False
    new_words, old_words = set(unigrams(statement, stem=True)), set(unigrams(older, stem=True))
    return not mine & new_words and not _possessed(statement) & old_words


def _by_meaning(new: TurnPair, update: Update, current: Sequence[Memory],
                similar: Similarity) -> list[Memory]:
    """Rule 5: the one older pair holding a replaced value whose user turn stands out as the
    most similar to the update's statement (none when two are alike: sibling facts)."""
    statement = said(new.user_text)
    held, theirs = [], []
    for m in (m for m in current if replaces_value(update, m.text)):  # cached parse first
        older = said(split_memory_text(m.text)[0])
        if not _another_thing(statement, older):
            held.append(m)
            theirs.append(older)
    if not held:
        return []
    sims = [float(c) for c in similar(statement, theirs)]
    ranked = sorted(range(len(held)), key=lambda i: -sims[i])
    best = sims[ranked[0]]
    runner_up = sims[ranked[1]] if len(ranked) > 1 else 0.0
    if best >= MEANING_MIN and best - runner_up >= MEANING_MARGIN:
        return [held[ranked[0]]]
    return []


@functools.cache
def _dropped_words() -> frozenset[str]:
    """Cues, addition cues and generic words, as written and stemmed (built on first use: the
    stemmer loads then, not at import)."""
    words = CUES | GENERIC | ADDITION_CUES | TIME_WORDS
    return words | frozenset(unigrams(" ".join(sorted(words)), stem=True))


def marks_for(new_pairs: Sequence[TurnPair], memories: Iterable[Memory],
              similar: Similarity | None = None) -> dict[int, tuple[int, int]]:
    """``{superseded id: (superseding id, valid_until)}`` for ``new_pairs`` (one user's, any
    order) against ``memories`` (that user's, the new pairs may be among them): each update in
    time order, so a value changed twice ends superseded by the first change and the first
    change by the second. ``similar``: rule 5 (by meaning) as well."""
    current = {m.id: m for m in memories}
    marks: dict[int, tuple[int, int]] = {}
    for pair in sorted(new_pairs, key=_order):
        for old_id in superseded_by(pair, current.values(), similar):
            marks[old_id] = (pair.id, int(pair.session_time))
            current.pop(old_id)
    return marks


def restated_marks(new_pairs: Sequence[TurnPair], memories: Iterable[Memory]) -> dict[int, tuple[int, int]]:
    """Marks for new pairs that restate a value an earlier update already replaced: an answer
    given after "my best friend moved to Lisbon" that still says Innsbruck is as stale as the
    pairs the update superseded, so it is born superseded by that update (``valid_until`` its
    own time). A statement of the user's is never marked here. ``memories``: the user's, with
    their marks."""
    mems = {m.id: m for m in memories}
    updates = []
    for by in {m.superseded_by for m in mems.values() if m.superseded_by}:
        if by in mems and (update := as_update(split_memory_text(mems[by].text)[0])):
            updates.append((mems[by], update))
    marks: dict[int, tuple[int, int]] = {}
    for pair in new_pairs:
        # A statement is the user's own word, whatever a model replied to it: the 0.5B
        # acknowledged "We set the renovation budget at $36,500." by echoing memory lines that
        # held a replaced landlord's name, and the statement was born superseded by the
        # landlord update, never to be retrieved (seed 24: 2 of 10 wrong personal answers).
        if as_update(pair.user_text) is not None or only_states(pair.user_text):
            continue
        for memory, update in sorted(updates, key=lambda mu: _order(mu[0]), reverse=True):
            if _order(memory) < _order(pair) and states_old_value(update, judged(pair.text())):
                marks[pair.id] = (memory.id, int(pair.session_time))
                break
    return marks


@functools.lru_cache(maxsize=8192)  # runs per injected memory per request
def contradicts_itself(question: str, answer: str, any_kind: bool = False) -> bool:
    """A change statement whose reply states another value of the same kind (a small model
    answering "My best friend moved again, to Lisbon" with "Innsbruck") or, ``any_kind``, any
    value the statement does not: the user is the authority on their own facts, so such a
    reply is not shown with the statement."""
    update = as_update(question)
    if update is None:
        return False
    kinds, new = {v.kind for v in update.values}, [_norm(v) for v in update.values]
    return any((any_kind or v.kind in kinds) and not _holds(v.kind, [_norm(v)], new)
               for v in values(reply_text(answer))[0])


POLICIES = ("exclude", "rank_below")


def apply_policy(hits: list[RetrievalHit], marks: Mapping[int, tuple[int, int]] | None = None,
                 policy: str = "exclude") -> list[RetrievalHit]:
    """``hits`` with superseded memories (marked in the store, or in ``marks``) dropped
    (``exclude``) or moved below every current one, marked (``rank_below``)."""
    marks = marks or {}
    current, stale = [], []
    for h in hits:
        if h.memory.id in marks and not h.memory.superseded_by:
            by, until = marks[h.memory.id]
            h = replace(h, memory=replace(h.memory, superseded_by=by, valid_until=until))
        (stale if h.memory.superseded_by else current).append(h)
    return current if policy == "exclude" else current + stale
