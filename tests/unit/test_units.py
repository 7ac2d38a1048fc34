"""Atomic context units (memroute.memory.units): near-duplicates of a stored unit (cosine >=
units.dedup_threshold) and of an earlier unit of the same batch are suppressed, a unit is stored
as its own sentence with the source turn's session and time, erasure deletes a user's units (and
only theirs), and the config refuses bad values naming the field."""

from __future__ import annotations

import numpy as np
import pytest

from memroute.config.units import UnitsConfig, check_units_config
from memroute.errors import ConfigError, InvalidRequest
from memroute.memory.facts.extraction_schema import ExtractedUnit
from memroute.memory.units import UNIT_SOURCE, UnitIndex, unit_id, unit_row
from memroute.types import Memory, TurnPair

ALICE, BOB, CAROL = "acme:alice", "acme:bob", "globex:carol"
T0 = 1_683_504_000


def vec(cos: float) -> np.ndarray:
    """A unit vector at cosine ``cos`` to e0 (in the e0/e1 plane)."""
    return np.array([cos, np.sqrt(max(0.0, 1.0 - cos * cos)), 0.0, 0.0], dtype=np.float32)


class FakeEncoder:
    """Vectors chosen by the test: ``vectors[text]`` (unknown texts get an axis of their own)."""

    name, dim = "fake", 4

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self.vectors = vectors
        self.calls = 0

    def encode(self, texts):
        self.calls += 1
        return np.stack([self.vectors.get(t, np.array([0, 0, 0, 1], np.float32)) for t in texts]
                        ) if texts else np.zeros((0, 4), np.float32)


class FakeUnitStore:
    """Rows by id, cosine search within a user (what MilvusMemoryStore does for the index)."""

    def __init__(self) -> None:
        self.rows: dict[int, tuple[Memory, np.ndarray]] = {}
        self.flushes = 0

    def upsert(self, pairs, vectors):
        for p, v in zip(pairs, np.asarray(vectors)):
            self.rows[p.id] = (Memory(p.id, p.user_id, p.text(), p.session_time, p.source_model,
                                      p.created_at, p.session_id, p.turn_index), v)
        return len(pairs)

    def search(self, user_id, vector, limit):
        hits = [(m, float(v @ vector)) for m, v in self.rows.values() if m.user_id == user_id]
        return sorted(hits, key=lambda h: -h[1])[:limit]

    def delete_user(self, user_id):
        gone = [i for i, (m, _) in self.rows.items() if m.user_id == user_id]
        for i in gone:
            del self.rows[i]
        return len(gone)

    def delete_tenant(self, tenant):
        users = {m.user_id for m, _ in self.rows.values() if m.user_id.startswith(f"{tenant}:")}
        return sum(self.delete_user(u) for u in users)

    def flush(self):
        self.flushes += 1

    def close(self):
        pass

    def texts(self, user_id):
        return sorted(m.text for m, _ in self.rows.values() if m.user_id == user_id)


class FakeRetriever:
    def __init__(self) -> None:
        self.invalidated, self.forgotten = [], []

    def invalidate(self, user_id):
        self.invalidated.append(user_id)

    def forget_user(self, user_id):
        self.forgotten.append(user_id)

    def forget_tenant(self, tenant):
        self.forgotten.append(tenant)


def unit(text: str, user: str = ALICE, turn: int = 0) -> ExtractedUnit:
    return ExtractedUnit(text, user, "s1", turn, T0 + turn)


@pytest.fixture
def parts():
    enc = FakeEncoder({"a": vec(1.0), "a96": vec(0.96), "a95": vec(0.95), "a94": vec(0.94),
                       "b": np.array([0, 0, 1, 0], np.float32)})
    store, retriever = FakeUnitStore(), FakeRetriever()
    return enc, store, retriever, UnitIndex(enc, store, UnitsConfig(), retriever=retriever)


def test_a_unit_at_or_above_the_threshold_to_a_stored_one_is_suppressed(parts):
    _, store, retriever, index = parts
    assert index.add(ALICE, [unit("a")]).written == 1
    assert index.add(ALICE, [unit("a96")]).suppressed == 1  # 0.96: a near-duplicate
    assert index.add(ALICE, [unit("a95")]).suppressed == 1  # exactly 0.95 too
    w = index.add(ALICE, [unit("a94")])  # 0.94: a distinct unit
    assert (w.written, w.suppressed) == (1, 0)
    assert store.texts(ALICE) == ["a", "a94"] and index.stats() == {"written": 2, "suppressed": 2}
    assert retriever.invalidated == [ALICE, ALICE]  # only writes tell the BM25 cache
    assert store.flushes == 2


def test_dedup_is_per_user_and_the_threshold_is_the_configs(parts):
    enc, store, _, index = parts
    index.add(ALICE, [unit("a")])
    assert index.add(BOB, [unit("a96", BOB)]).written == 1  # Bob's units are his own
    strict = UnitIndex(enc, store, UnitsConfig(dedup_threshold=0.99))
    assert strict.add(ALICE, [unit("a96")]).written == 1  # 0.96 < 0.99: stored


def test_within_one_batch_later_near_duplicates_are_suppressed(parts):
    _, store, _, index = parts
    w = index.add(ALICE, [unit("a"), unit("a96", turn=1), unit("b", turn=2), unit("a", turn=3)])
    assert (w.written, w.suppressed) == (2, 2)
    assert store.texts(ALICE) == ["a", "b"]


def test_a_unit_is_stored_as_its_sentence_with_the_source_turn():
    u = unit("On 8 May 2023 Alice adopted a dog named Biscuit.", turn=3)
    row = unit_row(u, created_at=5.0)
    assert row.text() == u.text and row.id == unit_id(ALICE, u.text)
    assert (row.session_id, row.turn_index, row.session_time, row.source_model) == (
        "s1", 3, T0 + 3, UNIT_SOURCE)
    # the id is the user's and the words' (case and spacing aside), not the turn's
    assert unit_id(ALICE, "on 8 may 2023  alice adopted a dog named biscuit.") == row.id
    assert unit_id(BOB, u.text) != row.id
    assert u.turn_id == TurnPair(ALICE, "s1", 3, "", "", 0).id


def test_another_users_unit_is_refused_before_anything_is_written(parts):
    enc, store, _, index = parts
    with pytest.raises(InvalidRequest) as e:
        index.add(ALICE, [unit("a"), unit("b", BOB)])
    assert e.value.field == "units" and store.rows == {} and enc.calls == 0
    assert index.add(ALICE, []).written == 0 and enc.calls == 0


def test_erasure_deletes_a_users_units_and_only_theirs(parts):
    _, store, retriever, index = parts
    index.add(ALICE, [unit("a"), unit("b")])
    index.add(BOB, [unit("a", BOB)])
    index.add(CAROL, [unit("a", CAROL)])
    assert index.erase_user(ALICE) == 2 and store.texts(ALICE) == []
    assert store.texts(BOB) == ["a"] and retriever.forgotten == [ALICE]
    assert index.erase_user(ALICE) == 0  # idempotent
    assert index.erase_tenant("acme") == 1 and store.texts(BOB) == []
    assert store.texts(CAROL) == ["a"]


def test_the_serving_erasure_counts_unit_rows(tmp_path, parts):
    from memroute.journal import Journal
    from memroute.serving.erasure import erase_user

    _, store, _, index = parts
    index.add(ALICE, [unit("a"), unit("b")])
    index.add(BOB, [unit("a", BOB)])
    journal = Journal(str(tmp_path / "j.sqlite3"))
    try:
        report = erase_user(FakeUnitStore(), journal, None, None, ALICE, actor="test", units=index)
        assert report.unit_rows == 2 and store.texts(ALICE) == [] and store.texts(BOB) == ["a"]
        [audit] = journal.erasure_audit(10)
        assert audit.store_rows == 2  # Milvus rows: turn-pairs (none here) and units
    finally:
        journal.close()


@pytest.mark.parametrize("cfg, field", [
    (UnitsConfig(dedup_threshold=0.0), "units.dedup_threshold"),
    (UnitsConfig(dedup_threshold=1.5), "units.dedup_threshold"),
    (UnitsConfig(dedup_threshold=True), "units.dedup_threshold"),
    (UnitsConfig(collection_suffix=""), "units.collection_suffix"),
    (UnitsConfig(collection_suffix="-units"), "units.collection_suffix"),
])
def test_bad_units_config_names_the_field(cfg, field):
    with pytest.raises(ConfigError) as e:
        check_units_config(cfg)
    assert e.value.field == field
