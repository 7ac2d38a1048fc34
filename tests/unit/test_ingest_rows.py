"""Bulk-ingest logic without Ray: rows <-> turn-pairs, ids, datasets, plans, writes, config."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from memroute.config import DatasetConfig, EmbedderConfig, IngestConfig, register_configs, to_object
from memroute.datasets import DatasetError, lme_turn_pairs, load_longmemeval
from memroute.datasets.registry import dataset_turn_pairs, longmemeval_path
from memroute.errors import AssetError, BackendError, ConfigError, InvalidRequest
from memroute.ingest import (
    ROW_FIELDS,
    IngestSummary,
    batch_to_pairs,
    check_fits,
    check_ingest_config,
    embedding_dim,
    num_blocks,
    pair_to_row,
    plan_ingest,
    resource_demand,
    row_to_pair,
    write_mode,
    write_pairs,
)
from memroute.types import TurnPair, stable_id

CONF = str(Path(__file__).resolve().parents[2] / "conf")


def make_pair(user: str = "alice", session: str = "s1", turn: int = 0, **kw) -> TurnPair:
    fields = dict(
        user_text="Where did we stay in Lisbon?",
        assistant_text="At the Juniper Inn.",
        session_time=1_683_504_000,
        source_model="dataset",
        created_at=1_683_504_000.5,
    )
    fields.update(kw)
    return TurnPair(user_id=user, session_id=session, turn_index=turn, **fields)


# ------------------------------------------------------------------ rows <-> TurnPair
def test_row_round_trip_keeps_every_field_and_the_id():
    pair = make_pair(turn=3)
    row = pair_to_row(pair)
    assert tuple(row) == ROW_FIELDS
    assert row["id"] == pair.id and row["text"] == pair.text()
    assert row["text"].startswith("[8 May 2023] Q: Where did we stay")
    assert row_to_pair(row) == pair


def test_numpy_scalars_come_back_as_plain_python_values():
    pair = make_pair(turn=7)
    row = pair_to_row(pair)
    as_numpy = {int: np.int64, float: np.float64, str: np.str_}
    np_row = {k: as_numpy[type(v)](v) for k, v in row.items()}
    back = row_to_pair(np_row)
    assert back == pair
    assert type(back.turn_index) is int and type(back.session_time) is int
    assert type(back.created_at) is float and type(back.user_id) is str


def test_columnar_batch_round_trip_like_ray_numpy_batches():
    pairs = [make_pair(turn=i, user_text=f"question {i}") for i in range(5)]
    rows = [pair_to_row(p) for p in pairs]
    batch = {
        f: np.array([r[f] for r in rows], dtype=object if isinstance(rows[0][f], str) else None)
        for f in ROW_FIELDS
    }
    assert batch["id"].dtype == np.int64
    assert batch_to_pairs(batch) == pairs


def test_batch_with_missing_or_ragged_columns_is_refused():
    rows = [pair_to_row(make_pair(turn=i)) for i in range(2)]
    batch = {f: [r[f] for r in rows] for f in ROW_FIELDS}
    with pytest.raises(InvalidRequest) as e:
        batch_to_pairs({k: v for k, v in batch.items() if k != "text"})
    assert e.value.field == "text"
    with pytest.raises(InvalidRequest, match="differ in length"):
        batch_to_pairs({**batch, "user_text": batch["user_text"][:1]})


def test_ids_are_deterministic_and_depend_on_user_session_and_turn_only():
    a = make_pair()
    assert a.id == make_pair(assistant_text="something else entirely").id
    assert a.id == stable_id("alice", "s1", 0)
    assert 0 < a.id < 2**63  # a positive INT64 primary key
    others = [make_pair(user="bob"), make_pair(session="s2"), make_pair(turn=1)]
    assert len({a.id, *(p.id for p in others)}) == 4


def test_known_id_value_is_stable_across_versions():
    # The scheme is part of the data on disk: a change would duplicate every stored pair.
    assert TurnPair("conv-26", "session_1", 0, "", "", 0).id == stable_id("conv-26", "session_1", 0)
    assert stable_id("conv-26", "session_1", 0) == 7950450193351872202


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"id": 12345}, "id"),
        ({"text": "[1 Jan 2020] Q: forged / A: row"}, "text"),
        ({"turn_index": "3"}, "turn_index"),
        ({"turn_index": True}, "turn_index"),
        ({"created_at": float("nan")}, "created_at"),
        ({"user_id": 7}, "user_id"),
    ],
)
def test_bad_rows_name_the_field(change, field):
    row = {**pair_to_row(make_pair()), **change}
    with pytest.raises(InvalidRequest) as e:
        row_to_pair(row, where="row 4")
    assert e.value.field == field and "row 4" in e.value.message


def test_missing_field_is_named():
    row = pair_to_row(make_pair())
    del row["session_time"]
    with pytest.raises(InvalidRequest) as e:
        row_to_pair(row)
    assert e.value.field == "session_time"


# ------------------------------------------------------------------ dataset config -> pairs
def test_generated_longmemeval_pairs_match_the_loader(tmp_path):
    cfg = DatasetConfig(name="longmemeval", size="small", seed=3)
    pairs = dataset_turn_pairs(cfg, tmp_path)
    questions = load_longmemeval(longmemeval_path(cfg, tmp_path))
    expected = [r.pair for q in questions for r in lme_turn_pairs(q)]
    assert pairs == expected and len(pairs) > 100
    assert len({p.user_id for p in pairs}) == len(questions) == 12  # one user per question
    assert [p.id for p in dataset_turn_pairs(cfg, tmp_path)] == [p.id for p in pairs]


def test_synthetic_pairs_one_user_per_sample(tmp_path):
    cfg = DatasetConfig(name="synthetic", num_users=2, sessions_per_user=3)
    pairs = dataset_turn_pairs(cfg, tmp_path)
    assert len({p.user_id for p in pairs}) == 2
    assert len({p.id for p in pairs}) == len(pairs)


def test_traces_limit_applies_after_numbering(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [
        {"ts": 200 + i, "tenant": "acme", "user_id": "u1", "session_id": "s",
         "query": f"q{i}", "answer": "a"}
        for i in range(3)
    ]
    rows.insert(0, {**rows[2], "ts": 100, "query": "early"})  # earliest in time, first in file
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    full = dataset_turn_pairs(DatasetConfig(name="traces", path=str(path)), tmp_path)
    head = dataset_turn_pairs(DatasetConfig(name="traces", path=str(path), limit=2), tmp_path)
    assert [p.user_id for p in full] == ["acme:u1"] * 4
    assert head == full[:2] and full[0].user_text == "early"


@pytest.mark.parametrize(
    ("cfg", "field"),
    [
        (DatasetConfig(name="longmemeval2"), "dataset.name"),
        (DatasetConfig(name="traces"), "dataset.path"),
        (DatasetConfig(name="traces", path="/nonexistent/t.jsonl"), "dataset.path"),
        (DatasetConfig(name="longmemeval", size="huge"), "dataset.size"),
    ],
)
def test_dataset_config_errors_name_the_field(tmp_path, cfg, field):
    with pytest.raises(ConfigError) as e:
        dataset_turn_pairs(cfg, tmp_path)
    assert e.value.field == field
    if field == "dataset.name":
        assert "Available: locomo, longmemeval, synthetic, traces" in e.value.message


def test_bad_dataset_file_fails_naming_file_record_and_field(tmp_path):
    path = tmp_path / "lme.json"
    generated = longmemeval_path(DatasetConfig(name="longmemeval", size="small"), tmp_path)
    good = json.loads(generated.read_text())
    good[1]["haystack_sessions"][0][0]["role"] = "narrator"
    path.write_text(json.dumps(good))
    with pytest.raises(DatasetError) as e:
        dataset_turn_pairs(DatasetConfig(name="longmemeval", path=str(path)), tmp_path)
    assert str(path) in e.value.message and "question 2" in e.value.message
    assert "haystack_sessions[0][0].role" in e.value.message


# ------------------------------------------------------------------ plan: duplicates and stored ids
def test_plan_skips_stored_ids_per_user_and_counts_duplicates():
    a0, a1, b0 = make_pair("alice", turn=0), make_pair("alice", turn=1), make_pair("bob", turn=0)
    a1_again = make_pair("alice", turn=1, assistant_text="corrected")
    calls: list[tuple[str, list[int]]] = []

    def existing(user_id: str, ids: list[int]) -> set[int]:
        calls.append((user_id, ids))
        return {a0.id, b0.id} & set(ids)

    plan = plan_ingest([a0, a1, b0, a1_again], existing)
    assert plan.new == [a1_again]  # later copy wins, as in the store's upsert
    assert (plan.read, plan.duplicates, plan.skipped, plan.users) == (4, 1, 2, 2)
    assert sorted(calls) == [("alice", [a0.id, a1.id]), ("bob", [b0.id])]


def test_plan_without_lookup_keeps_everything_unique():
    pairs = [make_pair(turn=i) for i in range(3)]
    plan = plan_ingest(pairs + pairs[:1], None)
    assert plan.new == pairs and plan.skipped == 0 and plan.duplicates == 1


# ------------------------------------------------------------------ writes isolate refused rows
class FakeStore:
    """Refuses a whole request if any pair's user is 'bad', as the real store validates first."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.rows: dict[int, TurnPair] = {}
        self.requests = 0
        self.fail = fail
        self.known_new: list[bool] = []

    def upsert(self, pairs, vectors, *, known_new=False) -> int:
        self.requests += 1
        self.known_new.append(known_new)
        if self.fail:
            raise self.fail
        assert len(pairs) == len(vectors)
        if any(p.user_id == "bad" for p in pairs):
            raise InvalidRequest("user_id 'bad' is refused", field="user_id")
        self.rows.update({p.id: p for p in pairs})
        return len(pairs)


def test_write_pairs_isolates_a_refused_row():
    pairs = [make_pair(turn=i) for i in range(4)]
    pairs[2] = make_pair("bad", turn=2)
    store = FakeStore()
    out = write_pairs(store, pairs, np.zeros((4, 3), dtype=np.float32))
    assert (out.written, out.errors) == (3, 1)
    assert set(store.rows) == {p.id for p in pairs if p.user_id != "bad"}
    assert "user bad" in out.messages[0] and "refused" in out.messages[0]
    assert store.requests == 1 + 4  # the batch once, then row by row
    assert store.known_new == [False] * 5


def test_write_pairs_passes_known_new_to_every_request_it_makes():
    pairs = [make_pair(turn=i) for i in range(3)]
    pairs[1] = make_pair("bad", turn=1)
    store = FakeStore()
    out = write_pairs(store, pairs, np.zeros((3, 2)), known_new=True)
    assert (out.written, out.errors) == (2, 1)
    assert store.known_new == [True] * 4  # the batch, then each row: all inserts


def test_write_pairs_one_request_when_all_good_and_faults_propagate():
    pairs = [make_pair(turn=i) for i in range(3)]
    store = FakeStore()
    assert write_pairs(store, pairs, np.zeros((3, 2))).written == 3 and store.requests == 1
    with pytest.raises(BackendError):
        write_pairs(FakeStore(fail=BackendError("server gone")), pairs, np.zeros((3, 2)))
    with pytest.raises(InvalidRequest):
        write_pairs(store, pairs, np.zeros((2, 2)))


def test_summary_line_and_metrics():
    s = IngestSummary("longmemeval", read=10, written=7, skipped=2, duplicates=1, errors=0, users=3,
                      seconds=5.0, pipeline_seconds=3.5)
    assert "read=10 written=7 skipped=2 errors=0 duplicates=1" in s.line()
    assert s.rows_per_s == pytest.approx(2.0) and s.metrics()["rows_written"] == 7.0
    idle = replace(s, written=0, pipeline_seconds=0.0)
    assert idle.rows_per_s == 0.0 and "rows/s=0.0" in idle.line()


# ------------------------------------------------------------------ model width without loading it
def _st_folder(root: Path, pooling: int, dense: int | None = None) -> Path:
    st = "sentence_transformers.models"
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": f"{st}.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": f"{st}.Pooling"},
    ]
    (root / "1_Pooling").mkdir(parents=True)
    (root / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": pooling})
    )
    if dense:
        modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": f"{st}.Dense"})
        (root / "2_Dense").mkdir()
        (root / "2_Dense" / "config.json").write_text(json.dumps({"out_features": dense}))
    (root / "modules.json").write_text(json.dumps(modules))
    return root


def test_embedding_dim_from_folder(tmp_path):
    plain = _st_folder(tmp_path / "a", 384)
    projected = _st_folder(tmp_path / "b", 768, dense=256)
    assert embedding_dim(EmbedderConfig(), plain) == 384
    assert embedding_dim(EmbedderConfig(), projected) == 256
    assert embedding_dim(EmbedderConfig(dim=128), plain) == 128
    with pytest.raises(ConfigError) as e:
        embedding_dim(EmbedderConfig(dim=512), plain)
    assert e.value.field == "embedder.dim"
    with pytest.raises(AssetError, match="modules.json"):
        embedding_dim(EmbedderConfig(), tmp_path)


# ------------------------------------------------------------------ config, checks, resources
@pytest.fixture
def compose_ingest():
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        yield lambda overrides=(): compose("ingest", overrides=list(overrides))
    GlobalHydra.instance().clear()


def test_default_ingest_config(compose_ingest):
    cfg = to_object(compose_ingest(), IngestConfig)
    assert (cfg.dataset.name, cfg.dataset.size, cfg.dataset.path) == ("longmemeval", "small", None)
    assert cfg.ray.address is None and not cfg.ray.include_dashboard
    assert (cfg.embed.concurrency, cfg.embed.num_cpus, cfg.embed.num_gpus) == (2, 0.75, 0.0)
    assert write_mode(cfg) == "driver"  # a Milvus Lite file: one writer
    check_ingest_config(cfg)
    check_fits(cfg, cpus=2, gpus=0)  # fits the 2-core machines


def test_cluster_and_server_presets(compose_ingest, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    composed = compose_ingest(["ray=cluster", "memory=server", "dataset=locomo"])
    cfg = to_object(composed, IngestConfig)
    assert cfg.ray.address == "auto" and write_mode(cfg) == "actors"
    assert resource_demand(cfg) == (2 * 0.75 + 2 * 0.25, 0.0)


@pytest.mark.parametrize(
    "override", ["embed.concurency=3", "embed.concurrency=two", "write.batch_size=[1]"]
)
def test_typos_and_wrong_types_fail(compose_ingest, override):
    with pytest.raises(Exception) as e:
        to_object(compose_ingest([override]), IngestConfig)
    assert "concur" in str(e.value) or "batch_size" in str(e.value)


def test_traces_without_path_names_the_field(compose_ingest, tmp_path):
    cfg = to_object(compose_ingest(["dataset=traces"]), IngestConfig)
    with pytest.raises(ConfigError) as e:
        dataset_turn_pairs(cfg.dataset, tmp_path)
    assert e.value.field == "dataset.path" and "required" in e.value.message


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"write.mode": "actors"}, "write.mode"),  # Milvus Lite file: one writer only
        ({"write.mode": "parallel"}, "write.mode"),
        ({"embed.concurrency": 0}, "embed.concurrency"),
        ({"embed.num_gpus": 1.0}, "embedder.device"),
        ({"num_blocks": 0}, "num_blocks"),
        ({"max_errors": -1}, "max_errors"),
    ],
)
def test_check_ingest_config_names_the_field(changes, field):
    cfg = IngestConfig()
    for key, value in changes.items():
        part, _, name = key.rpartition(".")
        setattr(getattr(cfg, part) if part else cfg, name, value)
    with pytest.raises(ConfigError) as e:
        check_ingest_config(cfg)
    assert e.value.field == field


def test_resource_fit_refuses_pools_that_would_hang():
    cfg = IngestConfig()
    cfg.embed.concurrency = 3  # 3 x 0.75 = 2.25 CPUs on a 2-CPU node
    with pytest.raises(ConfigError) as e:
        check_fits(cfg, cpus=2, gpus=0)
    assert e.value.field == "embed.concurrency" and "2.25" in e.value.message
    cfg = IngestConfig()
    cfg.embed.num_gpus, cfg.embedder.device = 1.0, "cuda"
    with pytest.raises(ConfigError) as e:
        check_fits(cfg, cpus=8, gpus=1)
    assert e.value.field == "embed.num_gpus"
    check_fits(cfg, cpus=8, gpus=2)


def test_num_blocks_one_per_batch_and_never_fewer_than_actors():
    cfg = IngestConfig()  # batch 256, 2 actors
    assert num_blocks(cfg, 341) == 2
    assert num_blocks(cfg, 5000) == 20
    assert num_blocks(cfg, 1) == 1
    cfg.num_blocks = 8
    assert num_blocks(cfg, 100) == 8 and num_blocks(cfg, 3) == 3
