"""The facts block (:mod:`memroute.routing.facts_block`): only active facts, asserted apart from
inferred, within a token budget, and its providers (a real SQLite fact store or a callable)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memroute.errors import ConfigError
from memroute.memory.facts import ACTIVE, INFERRED, SUPERSEDED, FactInput, FactStore
from memroute.memory.facts.types import Fact
from memroute.routing.facts_block import (
    facts_reader,
    injected_facts,
    read_facts,
    render_facts_block,
    select_facts,
)
from memroute.routing.prompt import build_messages

from .fakes import words

DAY = 86400
T0 = int(datetime(2024, 3, 4, tzinfo=UTC).timestamp())


def fact(key: str, value: str, *, status: str = ACTIVE, source: str = "explicit",
         valid_from: float = T0, expires_at: float | None = None, id: int = 1) -> Fact:
    return Fact(id, "alice", key, value, "temporal", source, status, valid_from, None, T0,
                None, expires_at, None, None, None)


@pytest.fixture
def store(tmp_path):
    s = FactStore(f"sqlite:///{tmp_path / 'facts.sqlite3'}")
    yield s
    s.close()


def test_block_has_the_date_and_separates_asserted_from_inferred():
    block = render_facts_block(
        [fact("user.pet", "a cat", source=INFERRED, id=2), fact("user.location", "Lisbon")],
        T0 + 10 * DAY)
    lines = block.splitlines()
    assert lines[0] == "Current facts about the user (as of 14 March 2024):"
    assert lines[1].startswith("What the user has told you")
    assert lines[2] == "- user.location: Lisbon (since 4 March 2024)"
    assert "Possibly true (inferred" in block and block.index("Lisbon") < block.index("a cat")
    assert render_facts_block([], T0) == ""


def test_superseded_and_expired_facts_are_never_rendered_as_current():
    facts = [fact("user.location", "Porto", status=SUPERSEDED, id=1),
             fact("user.location", "Lisbon", id=2),
             fact("user.plan", "a trip", expires_at=T0 + DAY, id=3)]
    chosen, block = select_facts(facts, 500, words, T0 + 2 * DAY)
    assert [f.value for f in chosen] == ["Lisbon"]
    assert "Porto" not in block and "a trip" not in block and "Lisbon" in block


def test_budget_keeps_asserted_then_most_recent_and_the_block_fits():
    facts = [fact(f"user.k{i}", f"value number {i}", valid_from=T0 + i * DAY, id=i)
             for i in range(10)]
    facts.append(fact("user.guess", "x", source=INFERRED, valid_from=T0 + 99 * DAY, id=99))
    chosen, block = select_facts(facts, 40, words, T0 + 100 * DAY)
    assert 0 < len(chosen) < len(facts) and words(block) <= 40
    # the newest asserted facts are kept first; the inferred one only if room is left
    kept = {f.key for f in chosen}
    assert "user.k9" in kept and "user.k0" not in kept and "user.guess" not in kept
    assert select_facts(facts, 0, words, T0) == ([], "")
    assert select_facts(facts, 5, words, T0 + 100 * DAY) == ([], "")  # not even the header fits


def test_fact_store_provider_reads_the_active_value_after_a_correction(store):
    store.assert_fact("alice", FactInput("user.location", "Porto", valid_from=T0))
    store.assert_fact("alice", FactInput("user.location", "Lisbon", valid_from=T0 + 5 * DAY))
    read = facts_reader(store)
    facts = read("alice", T0 + 6 * DAY)
    assert [(f.key, f.value) for f in facts] == [("user.location", "Lisbon")]
    _, block = select_facts(facts, 200, words, T0 + 6 * DAY)
    assert "Lisbon" in block and "Porto" not in block


def test_callable_provider_is_filtered_and_a_bad_provider_is_refused():
    read = facts_reader(lambda uid: [fact("user.a", "1"), fact("user.b", "2", status=SUPERSEDED)])
    assert [f.key for f in read("alice", T0)] == ["user.a"]
    with pytest.raises(ConfigError) as err:
        facts_reader(42)  # type: ignore[arg-type]
    assert err.value.field == "facts"


def test_read_facts_degrades_only_when_isolating():
    def reader(uid, now):
        if uid == "bob":
            raise RuntimeError("db down")
        return [fact("user.a", "1")]

    degraded: set[int] = set()
    got = read_facts(reader, [(0, "alice", T0), (1, "bob", T0)], isolate=True, degraded=degraded)
    assert list(got) == [0] and degraded == {1}
    with pytest.raises(RuntimeError):
        read_facts(reader, [(1, "bob", T0)], isolate=False, degraded=set())


def test_prompt_puts_the_facts_before_the_turn_pairs_and_they_can_be_read_back():
    block = render_facts_block([fact("user.location", "Lisbon")], T0)
    system = build_messages("sys", "q", facts=block)[0].content
    assert system == f"sys\n\n{block}" and injected_facts(system) == block
    assert injected_facts("sys") == ""
