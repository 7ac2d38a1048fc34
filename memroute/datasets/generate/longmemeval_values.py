"""The LongMemEval-format generator's templates (from ``data/longmemeval.json``) joined with the
functions that draw their values from the seeded generator.

A template's ``{slots}`` are filled from its ``values`` callable (planted facts, tallies, events;
here, by group and key) or from the session's slot dict (:func:`filler_slots`, chit-chat). Any
change to a draw here changes the generated set for every seed.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memroute.datasets.generate._data import load

Exchange = tuple[str, str]  # (user text, assistant text)
Values = Callable[[random.Random], dict[str, str]]

_DATA = load("longmemeval")
W: dict[str, Any] = _DATA["words"]  # the word lists, by lower-case name
NOT_ENOUGH: str = _DATA["not_enough"]
TEMPORAL: dict[str, str] = _DATA["temporal"]  # question/answer templates of temporal reasoning
MONTHS, PEOPLE, SURNAMES, CITIES = W["months"], W["people"], W["surnames"], W["cities"]
COUNTRIES, NAME_WORDS, TITLE_ADJ, TITLE_NOUN = W["countries"], W["name_words"], W["title_adj"], W["title_noun"]
CUISINES, MUSIC, PROJECTS, HOBBIES, GIFTS = W["cuisines"], W["music"], W["projects"], W["hobbies"], W["gifts"]


def _title(r: random.Random) -> str:
    return f"The {r.choice(TITLE_ADJ)} {r.choice(TITLE_NOUN)}"


def _money(r: random.Random, lo: int, hi: int, step: int = 5) -> int:
    return r.randrange(lo, hi + 1, step)


# ---------------------------------------------------------------- single-session-user
def _hotel(r: random.Random) -> dict[str, str]:
    city, city2 = r.sample(CITIES, 2)
    kind = r.choice(("Hotel", "Inn", "Lodge", "Guesthouse"))
    return {"city": city, "city2": city2, "hotel": f"{r.choice(NAME_WORDS)} {kind}",
            "person": r.choice(PEOPLE)}


def _degree(r: random.Random) -> dict[str, str]:
    return {"field": r.choice(W["fields"]), "uni": f"the University of {r.choice(CITIES)}"}


def _commute(r: random.Random) -> dict[str, str]:
    return {"n": str(r.randrange(15, 95, 5)), "line": r.choice(("Red", "Blue", "Green", "Orange",
                                                                   "Silver", "Purple"))}


def _pet(r: random.Random) -> dict[str, str]:
    return {"breed": r.choice(W["breeds"]), "pet": r.choice(W["pet_names"])}


def _bike(r: random.Random) -> dict[str, str]:
    return {"color": r.choice(W["colors"]), "brand": r.choice(W["bike_brands"]),
            "price": f"${_money(r, 450, 2400, 10):,}"}


def _birthday(r: random.Random) -> dict[str, str]:
    return {"person": r.choice(PEOPLE), "date": f"{r.choice(MONTHS)} {r.randint(1, 28)}"}


def _language(r: random.Random) -> dict[str, str]:
    lang, lang2 = r.sample(W["languages"], 2)
    return {"lang": lang, "lang2": lang2, "n": str(r.randint(3, 30))}


def _teacher(r: random.Random) -> dict[str, str]:
    inst, inst2 = r.sample(W["instruments"], 2)
    return {"inst": inst, "inst2": inst2, "person": f"{r.choice(PEOPLE)} {r.choice(SURNAMES)}"}


# ---------------------------------------------------------------- single-session-assistant
def _book(r: random.Random) -> dict[str, str]:
    return {"genre": r.choice(W["book_genres"]), "title": _title(r),
            "author": f"{r.choice(PEOPLE)} {r.choice(SURNAMES)}"}


def _restaurant(r: random.Random) -> dict[str, str]:
    cuisine = r.choice(sorted(CUISINES))
    return {"city": r.choice(CITIES), "cuisine": cuisine, "dish": r.choice(CUISINES[cuisine]),
            "restaurant": f"{r.choice(NAME_WORDS)} {r.choice(('Kitchen', 'Table', 'House'))}"}


def _roast(r: random.Random) -> dict[str, str]:
    return {"veg": r.choice(W["vegetables"]), "temp": str(r.choice((180, 190, 200, 220))),
            "n": str(r.randrange(20, 60, 5))}


def _trail(r: random.Random) -> dict[str, str]:
    return {"city": r.choice(CITIES), "trail": f"{r.choice(NAME_WORDS)} Ridge Trail",
            "km": str(r.randint(4, 16))}


def _business(r: random.Random) -> dict[str, str]:
    thing = r.choice(("candle", "dog-walking", "bakery", "bookbinding", "bike repair", "tutoring"))
    return {"thing": thing, "biz": f"{r.choice(NAME_WORDS)} & {r.choice(TITLE_NOUN)}"}


def _podcast(r: random.Random) -> dict[str, str]:
    return {"subject": r.choice(W["subjects"]),
            "podcast": f"{r.choice(TITLE_ADJ)} {r.choice(TITLE_NOUN)} Radio"}


def _workout(r: random.Random) -> dict[str, str]:
    ex = r.sample(("squats", "push-ups", "lunges", "plank holds", "burpees", "glute bridges"), 2)
    return {"n": str(r.randint(3, 9)), "ex1": ex[0], "ex2": ex[1]}


def _gift(r: random.Random) -> dict[str, str]:
    i = r.randrange(len(HOBBIES))
    return {"hobby": HOBBIES[i], "gift": GIFTS[i]}


# ---------------------------------------------------------------- single-session-preference
def _cooking(r: random.Random) -> dict[str, str]:
    cuisine = r.choice(sorted(CUISINES))
    return {"cuisine": cuisine, "dish": r.choice(CUISINES[cuisine]),
            "avoid": r.choice(("dairy", "deep-fried food", "very spicy food", "pork"))}


def _music(r: random.Random) -> dict[str, str]:
    genre = r.choice(sorted(MUSIC))
    return {"genre": genre, "artist": r.choice(MUSIC[genre])}


def _reading(r: random.Random) -> dict[str, str]:
    return {"genre": r.choice(W["book_genres"]),
            "trait": r.choice(("unreliable narrators", "found-family casts", "slow-burn plots",
                               "short chapters", "morally grey heroes"))}


# ---------------------------------------------------------------- knowledge-update
def _pb(r: random.Random) -> dict[str, str]:
    old = r.randint(24 * 60, 34 * 60)
    new = old - r.randint(20, 150)
    return {"old": f"{old // 60}:{old % 60:02d}", "new": f"{new // 60}:{new % 60:02d}"}


def _job(r: random.Random) -> dict[str, str]:
    old, new = r.choice(W["job_ladder"])
    kind = r.choice(("Labs", "Health", "Media", "Logistics"))
    return {"old": old, "new": new, "company": f"{r.choice(NAME_WORDS)} {kind}",
            "person": r.choice(PEOPLE)}


def _plants(r: random.Random) -> dict[str, str]:
    old = r.randint(5, 18)
    return {"old": str(old), "new": str(old + r.randint(2, 9))}


def _moved(r: random.Random) -> dict[str, str]:
    old, new = r.sample(CITIES, 2)
    return {"old": old, "new": new}


def _gym(r: random.Random) -> dict[str, str]:
    old = r.randrange(25, 70)
    return {"old": f"${old}", "new": f"${old + r.randint(3, 15)}"}


def _reading_now(r: random.Random) -> dict[str, str]:
    old, new = _title(r), _title(r)
    return {"old": old, "new": new if new != old else f"{new} Returns"}


def _car(r: random.Random) -> dict[str, str]:
    old, new = r.sample(W["cars"], 2)
    return {"old": old, "new": new}


def _savings(r: random.Random) -> dict[str, str]:
    old = _money(r, 400, 3000, 50)
    return {"old": f"${old:,}", "new": f"${old + _money(r, 300, 2000, 50):,}",
            "trip": r.choice(COUNTRIES)}


FACT_VALUES: dict[str, dict[str, Values]] = {
    "single-session-user": {
        "hotel": _hotel, "degree": _degree, "commute": _commute, "pet": _pet, "bike": _bike,
        "birthday": _birthday, "language": _language, "teacher": _teacher,
    },
    "single-session-assistant": {
        "book": _book, "restaurant": _restaurant, "roast": _roast, "trail": _trail,
        "business": _business, "podcast": _podcast, "workout": _workout, "gift": _gift,
    },
    "single-session-preference": {
        "cooking": _cooking,
        "photo": lambda r: {"software": r.choice(W["software"])},
        "exercise": lambda r: {"activity": r.choice(W["activities"])},
        "music": _music,
        "travel": lambda r: {"place": r.choice(W["places"])},
        "reading": _reading,
    },
    "knowledge-update": {
        "5k": _pb, "job": _job, "plants": _plants, "city": _moved, "gym": _gym,
        "book-now": _reading_now, "car": _car, "savings": _savings,
    },
}


# ---------------------------------------------------------------- multi-session
def _item_shared(r: random.Random) -> dict[str, str]:
    item, item2 = r.sample(W["items"], 2)
    return {"item": item, "item2": item2}


def _project_shared(r: random.Random) -> dict[str, str]:
    project, other = r.sample(sorted(PROJECTS), 2)
    return {"project": project, "project2": other}


def _project_part(r: random.Random, s: dict[str, str]) -> dict[str, str]:
    n = _money(r, 80, 1500, 10)
    return {"n": str(n), "money": f"${n:,}", "thing": r.choice(PROJECTS[s["project"]])}


Part = Callable[[random.Random, dict[str, str]], dict[str, str]]
# key -> (values shared by all parts, one part's values: has "n")
TALLY_VALUES: dict[str, tuple[Values, Part]] = {
    "items": (_item_shared,
              lambda r, s: {"n": str(r.randint(2, 9)), "store": r.choice(W["stores"])}),
    "project": (_project_shared, _project_part),
    "volunteer": (lambda r: {"other": r.choice(("the hospital", "the museum"))},
                  lambda r, s: {"n": str(r.randint(2, 8)), "place": r.choice(W["volunteer"])}),
    "books": (lambda r: {"genre": r.choice(("poetry", "travel"))},
              lambda r, s: {"n": "1", "title": _title(r)}),
    "running": (lambda r: {"sport": r.choice(("swum", "cycled"))},
                lambda r, s: {"n": str(r.randint(4, 21)),
                              "place": r.choice(("the river path", "the park loop", "the beach"))}),
    "countries": (lambda r: {"region": r.choice(("South America", "Oceania"))},
                  lambda r, s: {"n": "1", "country": r.choice(COUNTRIES)}),
}

# ---------------------------------------------------------------- temporal-reasoning
EVENT_VALUES: dict[str, Values] = {
    "car-service": lambda r: {"shop": f"{r.choice(NAME_WORDS)} Motors"},
    "pottery": lambda r: {"day": r.choice(W["weekdays"])},
    "kitten": lambda r: {"pet": r.choice(W["pet_names"])},
    "thesis": lambda r: {"field": r.choice(W["fields"])},
    "10k": lambda r: {"city": r.choice(CITIES)},
    "dentist": lambda r: {"person": r.choice(PEOPLE)},
    "tomatoes": lambda r: {"n": str(r.randint(4, 12))},
    "lease": lambda r: {"city": r.choice(CITIES)},
    "party": lambda r: {"n": str(r.randint(8, 30))},
    "laptop": lambda r: {"brand": r.choice(("Lenovo", "Dell", "Framework", "ASUS"))},
    "course": lambda r: {"subject": r.choice(W["subjects"])},
    "flights": lambda r: {"city": r.choice(CITIES)},
}


# ---------------------------------------------------------------- filler chat
def filler_slots(r: random.Random) -> dict[str, str]:
    """One session's values for the filler templates (``topics`` in the data file)."""
    cuisine = r.choice(sorted(CUISINES))
    return {
        "city": r.choice(CITIES), "country": r.choice(COUNTRIES), "cuisine": cuisine,
        "dish": r.choice(CUISINES[cuisine]), "veg": r.choice(W["vegetables"]),
        "n": str(r.randint(2, 9)), "m": str(r.randrange(10, 65, 5)),
        "weekday": r.choice(W["weekdays"]), "month": r.choice(MONTHS),
        "subject": r.choice(W["subjects"]), "hobby": r.choice(HOBBIES),
        "lang": r.choice(("Python", "JavaScript", "SQL", "Rust", "Go")),
        "genre": r.choice(W["book_genres"]), "title": _title(r),
    }


# ---------------------------------------------------------------- the records
@dataclass(frozen=True)
class Fact:
    """A fact stated in one session (or, for knowledge updates, stated in one and changed in a
    later one) and the questions about it. ``abs_question`` asks about something the values only
    come near (never planted); ``""`` means the fact has no abstention form."""

    key: str
    values: Values
    user: tuple[str, ...]
    assistant: tuple[str, ...]
    questions: tuple[str, ...]
    answer: str
    distract: tuple[Exchange, ...] = ()  # the same words with other values, in filler sessions
    abs_question: str = ""
    abs_answer: str = ""
    old_user: tuple[str, ...] = ()  # knowledge updates: the earlier, superseded statement
    old_assistant: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tally:
    """Multi-session: each of 2-3 sessions adds a part; the answer sums ``n`` or counts parts."""

    key: str
    shared: Values  # values common to all parts (the item, the project...)
    part: Part  # one part; has "n"
    user: tuple[str, ...]
    assistant: tuple[str, ...]
    questions: tuple[str, ...]
    answer: str  # uses {total} (sum of n) or {count}
    abs_question: str
    abs_answer: str


@dataclass(frozen=True)
class Event:
    """Temporal reasoning: something the user did on the session's day."""

    key: str
    values: Values
    user: tuple[str, ...]
    assistant: tuple[str, ...]
    phrase: str  # completes "the day I ...": "got my car serviced"
    noun: str  # "the car service"


@dataclass(frozen=True)
class Topic:
    name: str
    exchanges: tuple[Exchange, ...]
    tips: tuple[str, ...]  # appended to replies, for variety


def _keyed(what: str, raw: tuple[dict[str, Any], ...], values: dict[str, Any]) -> None:
    keys = [r["key"] for r in raw]
    if sorted(keys) != sorted(values) or len(set(keys)) != len(keys):
        raise RuntimeError(f"longmemeval.json {what} {keys} do not match the value functions {sorted(values)}")


def _facts(group: str) -> tuple[Fact, ...]:
    raw = _DATA["facts"][group]
    _keyed(group, raw, FACT_VALUES[group])
    return tuple(Fact(values=FACT_VALUES[group][f["key"]], **f) for f in raw)


SINGLE_USER = _facts("single-session-user")
SINGLE_ASSISTANT = _facts("single-session-assistant")
PREFERENCE = _facts("single-session-preference")
KNOWLEDGE_UPDATE = _facts("knowledge-update")
_keyed("tallies", _DATA["tallies"], TALLY_VALUES)
MULTI_SESSION: tuple[Tally, ...] = tuple(
    Tally(shared=TALLY_VALUES[t["key"]][0], part=TALLY_VALUES[t["key"]][1], **t) for t in _DATA["tallies"]
)
_keyed("events", _DATA["events"], EVENT_VALUES)
EVENTS: tuple[Event, ...] = tuple(Event(values=EVENT_VALUES[e["key"]], **e) for e in _DATA["events"])
TOPICS: tuple[Topic, ...] = tuple(Topic(**t) for t in _DATA["topics"])
# Surface variety for filler user turns: chatty openers and closers around the question.
OPENERS: tuple[str, ...] = _DATA["openers"]
CLOSERS: tuple[str, ...] = _DATA["closers"]
FOLLOW_UPS: tuple[Exchange, ...] = _DATA["follow_ups"]
