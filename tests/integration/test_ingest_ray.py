"""The Ray Data ingest pipeline for real: local loopback Ray, MiniLM actors, Milvus Lite in tmp.

One Ray node for the whole session (starting one costs ~5 s); every pipeline run starts its own
embedding actors (~10 s each on 2 cores), so the file runs only a few of them.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from memroute.config import DatasetConfig, IngestConfig, MemoryConfig, TrackingConfig
from memroute.datasets import lme_turn_pairs, load_longmemeval, load_locomo, turn_pairs
from memroute.datasets.registry import dataset_turn_pairs, longmemeval_path
from memroute.memory import MilvusMemoryStore
from tests.integration.milvus_server import collection_name, milvus_server  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
SUMMARY_RE = re.compile(
    r"ingest summary: dataset=(\w+) read=(\d+) written=(\d+) skipped=(\d+) errors=(\d+) "
    r"duplicates=(\d+) users=(\d+)"
)


@pytest.fixture(scope="session")
def ray_local():
    """A loopback single-node Ray (2 CPUs) for the session; shut down only if started here."""
    assert os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") == "0"  # set by conftest
    import ray

    started = not ray.is_initialized()
    if started:
        from serve.loopback import runtime_env  # later modules may deploy Serve on this node
        from tests.integration.serving import start_local_ray

        start_local_ray(runtime_env())  # retried once: a busy machine has timed out its start
    yield ray
    if started:
        ray.shutdown()


def ingest_cfg(tmp: Path, dataset: DatasetConfig, **memory) -> IngestConfig:
    return IngestConfig(
        dataset=dataset,
        memory=MemoryConfig(uri=memory.pop("uri", str(tmp / "milvus.db")), **memory),
        tracking=TrackingConfig(enabled=False),
        work_dir=str(tmp / "work"),
        progress=False,
    )


def loader_pairs(cfg: IngestConfig):
    """The pairs the dataset loaders themselves produce (independently of memroute.ingest)."""
    work = Path(cfg.work_dir)
    if cfg.dataset.name == "longmemeval":
        questions = load_longmemeval(longmemeval_path(cfg.dataset, work))
        return [r.pair for q in questions for r in lme_turn_pairs(q)]
    path = next(work.glob("synthetic_*.json"))
    return [r.pair for conv in load_locomo(path, categories=(1, 2, 3, 4)) for r in turn_pairs(conv)]


@pytest.mark.parametrize(
    "dataset",
    [
        DatasetConfig(name="longmemeval", size="small", seed=0),
        DatasetConfig(name="synthetic", num_users=2, sessions_per_user=3, seed=1),
    ],
    ids=["longmemeval-small", "synthetic-locomo"],
)
def test_ingest_then_rerun_writes_nothing(ray_local, tmp_path, encoder, dataset):
    from pipelines.ingest import ingest_pairs

    cfg = ingest_cfg(tmp_path, dataset)
    pairs = dataset_turn_pairs(cfg.dataset, Path(cfg.work_dir))
    expected = loader_pairs(cfg)
    assert pairs == expected and len(pairs) > 50

    first = ingest_pairs(pairs, cfg)
    n = len(pairs)
    assert (first.read, first.written, first.skipped, first.errors) == (n, n, 0, 0)
    assert first.users == len({p.user_id for p in pairs}) and first.pipeline_seconds > 0

    again = ingest_pairs(dataset_turn_pairs(cfg.dataset, Path(cfg.work_dir)), cfg)
    assert (again.written, again.skipped, again.errors) == (0, len(pairs), 0)
    assert again.pipeline_seconds == 0.0  # nothing was embedded

    per_user = Counter(p.user_id for p in pairs)
    with MilvusMemoryStore(cfg.memory, encoder.dim) as store:
        assert store.count() == len(pairs)
        for user, n in per_user.items():
            assert store.count(user) == n
        user, n = per_user.most_common(1)[0]
        mine = [p for p in pairs if p.user_id == user]
        ids = [p.id for p in mine]
        assert store.existing_ids(user, ids + [12345]) == set(ids)
        other = next(u for u in per_user if u != user)
        assert store.existing_ids(other, ids) == set()  # lookups stay within one user
        stored = {m.id: m for m in store.list_user(user)}
        assert set(stored) == set(ids)
        # Every stored row is its planned pair, field for field (the actors got only id and
        # text; the driver matched what came back to its pairs by id).
        for pair in mine:
            m = stored[pair.id]
            assert (m.text, m.session_id, m.turn_index, m.session_time, m.created_at) == (
                pair.text(), pair.session_id, pair.turn_index, pair.session_time, pair.created_at
            )
        # The stored vectors are the encoder's vectors of the stored texts, row for row, across
        # users (blocks are reordered longest-first on the way, so a vector stored under the
        # wrong id would surface with another text).
        sample = pairs[:: max(1, len(pairs) // 40)]
        for pair, vec in zip(sample, encoder.encode([p.text() for p in sample])):
            (hit, score), = store.search(pair.user_id, vec, limit=1)
            assert hit.text == pair.text() and score > 0.99, (pair.id, hit.id, score)


def test_rerun_with_new_pairs_embeds_only_those(ray_local, tmp_path, encoder):
    """An existing store is planned against first (its stored ids are skipped); a new file is
    created while the actors start. Both paths store the same rows."""
    from pipelines.ingest import ingest_pairs

    cfg = ingest_cfg(tmp_path, DatasetConfig(name="longmemeval", size="small", limit=2))
    pairs = dataset_turn_pairs(cfg.dataset, Path(cfg.work_dir))
    half = len(pairs) // 2
    assert not Path(cfg.memory.uri).exists()
    first = ingest_pairs(pairs[:half], cfg)  # a new file: no lookups
    assert (first.written, first.skipped) == (half, 0)
    second = ingest_pairs(pairs, cfg)  # the file exists: stored ids are looked up and skipped
    assert (second.read, second.written, second.skipped, second.errors) == (
        len(pairs), len(pairs) - half, half, 0
    )
    with MilvusMemoryStore(cfg.memory, encoder.dim) as store:
        assert store.count() == len(pairs)
        probe = pairs[-1]
        (hit, score), = store.search(probe.user_id, encoder.encode([probe.text()])[0], limit=1)
        assert hit.text == probe.text() and score > 0.99


def test_pipeline_row_helpers_without_ray(tmp_path):
    """What the driver relies on when it ships (id, text) and gets (id, vector) back."""
    from memroute.errors import InvalidRequest
    from memroute.ingest import longest_first, pairs_for_ids, pairs_to_rows, store_is_new

    pairs = dataset_turn_pairs(DatasetConfig(name="longmemeval", size="small", limit=1),
                               tmp_path / "work")
    ordered = longest_first(pairs)
    lengths = [len(p.text()) for p in ordered]
    assert sorted(ordered, key=lambda p: p.id) == sorted(pairs, key=lambda p: p.id)
    assert lengths == sorted(lengths, reverse=True) and lengths[0] > lengths[-1]
    rows = pairs_to_rows(ordered, ("id", "text"))
    assert rows[0] == {"id": ordered[0].id, "text": ordered[0].text()}
    with pytest.raises(InvalidRequest):
        pairs_to_rows(pairs, ("id", "vector"))
    planned = {p.id: p for p in pairs}
    back = [rows[2]["id"], rows[0]["id"]]
    assert pairs_for_ids(back, planned) == [ordered[2], ordered[0]]
    with pytest.raises(InvalidRequest) as e:
        pairs_for_ids([ordered[0].id + 1], planned)  # never planned: refused, not stored
    assert e.value.field == "id"
    assert store_is_new(str(tmp_path / "new.db")) and not store_is_new(str(tmp_path))
    assert not store_is_new("http://127.0.0.1:19530")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def milvus_lite_server(tmp_path):
    """Milvus Lite served over gRPC on loopback: a server URI that several processes may write."""
    port = _free_port()
    exe = Path(sys.executable).with_name("milvus-lite")
    proc = subprocess.Popen(
        [str(exe), "server", "--data-dir", str(tmp_path / "server"), "--host", "127.0.0.1",
         "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.time() < deadline, "server did not start"
                time.sleep(0.3)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(params=["milvus-lite-server", "milvus-2.3-server"])
def server_memory(request, tmp_path):
    """A server URI several processes may write, and the collection to use on it."""
    if request.param == "milvus-lite-server":
        return request.getfixturevalue("milvus_lite_server"), "memroute_turns"
    return request.getfixturevalue("milvus_server").uri, collection_name("ingest")


def test_server_uri_writer_actor_pool_isolates_a_refused_row(ray_local, tmp_path, server_memory):
    from memroute.ingest import write_mode
    from pipelines.ingest import ingest_pairs

    uri, collection = server_memory
    cfg = ingest_cfg(tmp_path, DatasetConfig(name="longmemeval", size="small", limit=3),
                     uri=uri, collection=collection)
    # Small blocks and batches, so both writer actors get work.
    cfg.embed.concurrency, cfg.embed.batch_size, cfg.num_blocks = 1, 16, 6
    cfg.write.concurrency, cfg.write.batch_size = 2, 16
    assert write_mode(cfg) == "actors"
    pairs = dataset_turn_pairs(cfg.dataset, Path(cfg.work_dir))
    # One pair the store cannot hold (a turn index past INT64): refused and counted, its batch
    # still lands. (Text too long for its column is stored shortened, not refused.)
    huge = replace(pairs[0], session_id="huge", turn_index=2**63)
    summary = ingest_pairs([*pairs, huge], cfg)
    assert (summary.read, summary.written, summary.errors) == (len(pairs) + 1, len(pairs), 1)
    assert "huge#" in summary.error_messages[0] and "turn_index" in summary.error_messages[0]
    with MilvusMemoryStore(cfg.memory, 384) as store:
        assert store.count() == len(pairs)
        assert store.existing_ids(pairs[0].user_id, [pairs[0].id]) == {pairs[0].id}
        per_user = Counter(p.user_id for p in pairs)  # each user's filtered reads see every row
        assert {u: store.count(u) for u in per_user} == dict(per_user)
    # The pairs were inserted, not upserted (the plan looked their ids up): a re-run with two
    # more looks them up again, writes only the two, and stores nothing twice.
    more = [replace(pairs[0], session_id="later", turn_index=i) for i in range(2)]
    again = ingest_pairs([*pairs, *more], cfg)
    assert (again.written, again.skipped, again.errors) == (2, len(pairs), 0)
    with MilvusMemoryStore(cfg.memory, 384) as store:
        assert store.count() == len(pairs) + 2
        assert store.count(pairs[0].user_id) == per_user[pairs[0].user_id] + 2


@pytest.mark.parametrize(("restarted", "known_new", "inserts"),
                         [(False, True, True), (True, True, False), (True, False, False)])
def test_a_restarted_writer_upserts_without_ray(monkeypatch, restarted, known_new, inserts):
    """What the writer decides at start: the plan's inserts only in a process that never died."""
    from types import SimpleNamespace

    import ray

    import pipelines.ingest as ingest
    from memroute import build

    monkeypatch.setattr(build, "store", lambda memory, dim: object())
    monkeypatch.setattr(ray, "get_runtime_context",
                        lambda: SimpleNamespace(was_current_actor_reconstructed=restarted))
    writer = ingest.WriteBatch(MemoryConfig(uri="http://127.0.0.1:19530"), 4, 8, known_new)
    assert writer.known_new is inserts


def test_a_writer_killed_mid_block_stores_every_pair_once(ray_local, tmp_path, milvus_server,
                                                          monkeypatch):
    """A writer actor's process dies after inserting half of its first block: Ray restarts it
    and retries the block there, and the restarted writer upserts, so the half already stored
    is not inserted again (a 2.3 server, where the plan's pairs are otherwise inserted)."""
    import pipelines.ingest as ingest

    died = tmp_path / "writer-died"

    class DiesOnce(ingest.WriteBatch):
        """Writes the first half of the first block it gets, then its process exits; once
        (the marker file), so the restarted writer lives."""

        def __call__(self, batch):
            try:
                os.close(os.open(died, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return super().__call__(batch)
            half = {k: v[: len(v) // 2] for k, v in batch.items()}
            assert int(super().__call__(half)["written"][0]) > 0  # acknowledged by the server
            os._exit(1)

    monkeypatch.setattr(ingest, "WriteBatch", DiesOnce)  # pickled by value for the actors
    cfg = ingest_cfg(tmp_path, DatasetConfig(name="longmemeval", size="small", limit=3),
                     uri=milvus_server.uri, collection=collection_name("killed"))
    cfg.embed.concurrency, cfg.embed.batch_size, cfg.num_blocks = 1, 16, 6
    cfg.write.concurrency, cfg.write.batch_size = 2, 8
    pairs = dataset_turn_pairs(cfg.dataset, Path(cfg.work_dir))
    summary = ingest.ingest_pairs(pairs, cfg)
    assert died.exists()  # a writer did die mid-block
    assert (summary.read, summary.written, summary.errors) == (len(pairs), len(pairs), 0)
    with MilvusMemoryStore(cfg.memory, 384) as store:
        assert store.count() == len(pairs)  # counts every stored row, a repeated id twice
        per_user = Counter(p.user_id for p in pairs)
        assert {u: store.count(u) for u in per_user} == dict(per_user)
        for user in per_user:
            ids = [p.id for p in pairs if p.user_id == user]
            assert store.existing_ids(user, ids) == set(ids)


def _run_job(tmp: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable, "-m", "jobs.ingest", f"memory.uri={tmp / 'milvus.db'}",
        f"work_dir={tmp / 'work'}", f"hydra.run.dir={tmp / 'hydra'}", "progress=false",
        *overrides,
    ]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_job_subprocess_summary_mlflow_and_rerun(tmp_path):
    db = tmp_path / "m.db"
    args = [
        "dataset=synthetic", "dataset.num_users=2", "dataset.sessions_per_user=3",
        f"tracking.tracking_uri=sqlite:///{db}", f"tracking.artifact_location={tmp_path / 'art'}",
        "ray.num_cpus=2",
    ]
    proc = _run_job(tmp_path, *args)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    m = SUMMARY_RE.search(proc.stdout)
    assert m, proc.stdout
    n = len(dataset_turn_pairs(DatasetConfig(name="synthetic", num_users=2, sessions_per_user=3),
                               tmp_path / "check"))
    assert m.groups() == ("synthetic", str(n), str(n), "0", "0", "0", "2")
    run_id = re.search(r"MLflow run id: ([0-9a-f]{32})", proc.stdout).group(1)

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{db}")
    run = mlflow.get_run(run_id)
    assert run.data.metrics["rows_written"] == n and run.data.metrics["rows_per_s"] > 0
    assert run.data.params["embed.concurrency"] == "2" and run.info.status == "FINISHED"

    again = _run_job(tmp_path, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    m = SUMMARY_RE.search(again.stdout)
    assert m and m.group(3) == "0" and m.group(4) == str(n)
    assert "Starting execution" not in again.stderr  # nothing new: Ray Data never ran


def test_job_bad_file_fails_before_ray_starts(tmp_path):
    bad = tmp_path / "traces.jsonl"
    good = {"ts": 1_700_000_000, "tenant": "acme", "user_id": "u1", "session_id": "s",
            "query": "q", "answer": "a"}
    bad.write_text(json.dumps(good) + "\n" + json.dumps({**good, "query": 42}) + "\n")
    proc = _run_job(tmp_path, "dataset=traces", f"dataset.path={bad}", "tracking=disabled")
    assert proc.returncode == 2
    assert f"{bad}: line 2: query: expected str, got int" in proc.stderr
    # Loading comes first: the store was never opened and no Ray Data execution started.
    assert not (tmp_path / "milvus.db").exists() and "Starting execution" not in proc.stderr
