"""Golden hashes of every generator's and loader's output: the proof that moving or refactoring the
dataset layer changes no byte. A hash changes only when the data does; if one fails after a change
that was *meant* to change the data, recompute it (``_digest`` of the same call) and say so."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from memroute.config import DatasetConfig

# --- the API under test (the only lines a move of the dataset layer should touch)
from memroute.datasets import (
    lme_turn_pairs,
    load_locomo,
    load_longmemeval,
    load_traces,
    trace_turn_pairs,
    turn_pairs,
)
from memroute.datasets.generate.longmemeval import generate_longmemeval
from memroute.datasets.generate.longmemeval import write_json as write_lme
from memroute.datasets.generate.synthetic import generate
from memroute.datasets.generate.synthetic import write_json as write_synthetic
from memroute.datasets.registry import dataset_cases as load_cases
from memroute.datasets.registry import dataset_conversations as load_benchmark_set
from memroute.datasets.registry import dataset_turn_pairs

REAL_LOCOMO = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "locomo" / "locomo10.json"


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"__type__": type(obj).__name__, **{k: _plain(v) for k, v in dataclasses.asdict(obj).items()}}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    return obj


def _digest(obj: Any) -> str:
    text = json.dumps(_plain(obj), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------- generators
SYNTHETIC = {
    (4, 6, 0): "4d53e919b1e8590f9c2fee0eeb97d71d4de320030be68566e36a1847bfaab5c0",
    (2, 3, 7): "6d1ffd7a1cc39f78bb68d5a28623148c5796ccc5d73cb559d4865533ccc3349a",
    (12, 4, 3): "1d7ad1f81edd42db74ce8fdea85cbc36efde1d5b2b8ac59c2228f19ff3cfe239",
}


@pytest.mark.parametrize("users,sessions,seed", list(SYNTHETIC))
def test_synthetic_generator(users: int, sessions: int, seed: int) -> None:
    out = generate(num_users=users, sessions_per_user=sessions, seed=seed)
    assert _digest(out) == SYNTHETIC[(users, sessions, seed)]


LONGMEMEVAL = {
    ("small", 0): "f1d2c46c56bb7dfb1ea55038d65345c82bc54c2870c0ca6e7d9c0789bf2e8474",
    ("small", 1): "6cee060cfdfed37f3cdc264436b539cf136440724b96f279400d7c88c1f1c455",
    ("default", 0): "ada89d933ca9398304705a6282af303ebefdfdad1efe0e57aecd0a5d21e2314a",
    ("default", 1): "fc591fccc8f6d3d128e6d938a5e8b2c3a08cb53551153789721ae09bb412c381",
}


@pytest.mark.parametrize("size,seed", list(LONGMEMEVAL))
def test_longmemeval_generator(size: str, seed: int) -> None:
    out = generate_longmemeval(size=size, seed=seed)
    assert _digest(out) == LONGMEMEVAL[(size, seed)]


def test_generated_files_bytes(tmp_path: Path) -> None:
    syn = write_synthetic(generate(num_users=3, sessions_per_user=4, seed=5), tmp_path / "s.json")
    lme = write_lme(generate_longmemeval(size="small", seed=2), tmp_path / "l.json")
    assert hashlib.sha256(syn.read_bytes()).hexdigest() == "070b1d77861b2b9d91274937b154e538bbb042b960a9ae5cd75e4ae37c3daff2"
    assert hashlib.sha256(lme.read_bytes()).hexdigest() == "b89e787cdd73e9456a302a47ab7855c9f78a90359e9b4141ec335db88c207d23"


# ---------------------------------------------------------------- loaders
def test_locomo_loader_on_synthetic(tmp_path: Path) -> None:
    path = write_synthetic(generate(num_users=4, sessions_per_user=6, seed=0), tmp_path / "s.json")
    convs = load_locomo(path, categories=(1, 2, 3, 4, 5))
    assert _digest(convs) == "a7950f26f7742fcf28019e75043d68dac66a2a409c1d2bad0fac570532145777"
    assert _digest([turn_pairs(c) for c in convs]) == "bbdd0d8f48d1d99def96c8075b42c4ff7a2289bad32c67a76ce51034533a00f5"


def test_lme_loader_on_generated(tmp_path: Path) -> None:
    path = write_lme(generate_longmemeval(size="small", seed=0), tmp_path / "l.json")
    questions = load_longmemeval(path)
    assert _digest(questions) == "fde06ea5d0de681c074243ac9ffb9ad6063c1fdd4a527587be60cdaea2fe1e42"
    assert _digest([lme_turn_pairs(q) for q in questions]) == "33e78f54627e1443a8ade1e9ea91550646b17fa40e6a116571f28523cdc06457"


TRACE_ROWS = [
    {"ts": "2024-05-01T12:30:00Z", "tenant": "acme", "user_id": "u1", "session_id": "s1",
     "query": "What is my plan?", "answer": "The gold plan.", "model": "small"},
    {"ts": 1714566000, "tenant": "acme", "user_id": "u1", "session_id": "s1",
     "query": "And the price?", "answer": "$10"},
    {"ts": "1714560000.5", "tenant": "beta", "user_id": "u2", "session_id": "s9",
     "query": "Hello", "answer": "", "model": "large", "extra": 1},
    {"ts": "2024-05-01 09:00:00", "tenant": "acme", "user_id": "u1", "session_id": "s2",
     "query": "Earlier one", "answer": "ok"},
]


def _trace_files(tmp_path: Path) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in TRACE_ROWS) + "\n\n", encoding="utf-8")
    parquet = tmp_path / "t.parquet"
    cols = ("ts", "tenant", "user_id", "session_id", "query", "answer", "model")
    table = pa.table({c: [str(r.get(c)) if c == "ts" else r.get(c) for r in TRACE_ROWS] for c in cols})
    pq.write_table(table, parquet)
    return jsonl, parquet


def test_traces_loader(tmp_path: Path) -> None:
    jsonl, parquet = _trace_files(tmp_path)
    records = load_traces(jsonl)
    # origin names the file (a tmp path): leave it out of the hash
    assert _digest([dataclasses.replace(r, origin="") for r in records]) == "e95a4c48ec819543992fc8fae096120d5807d8a445be4c674671fb54d4b60961"
    assert _digest(trace_turn_pairs(records)) == "a99b2b4f3a85b8c4f0d521fd7e2ef605bc430f9ff75da52d2fb8aac0c374ab2e"
    precords = load_traces(parquet)
    assert _digest([dataclasses.replace(r, origin="") for r in precords]) == "e95a4c48ec819543992fc8fae096120d5807d8a445be4c674671fb54d4b60961"
    assert _digest(trace_turn_pairs(precords)) == "a99b2b4f3a85b8c4f0d521fd7e2ef605bc430f9ff75da52d2fb8aac0c374ab2e"


# ---------------------------------------------------------------- the dispatch by dataset name
def _cfgs(tmp_path: Path) -> dict[str, DatasetConfig]:
    jsonl, _ = _trace_files(tmp_path)
    locomo = write_synthetic(generate(num_users=2, sessions_per_user=3, seed=1), tmp_path / "loc.json")
    return {
        "synthetic": DatasetConfig(name="synthetic", num_users=3, sessions_per_user=4, seed=2),
        "locomo": DatasetConfig(name="locomo", path=str(locomo), sample_ids=["synth1-u02"], limit=5),
        "longmemeval": DatasetConfig(name="longmemeval", size="small", seed=3, limit=6),
        "traces": DatasetConfig(name="traces", path=str(jsonl), limit=3),
    }


TURN_PAIRS = {"synthetic": "5a4c8e9fb4fdbe56485a3732043419e22957dec50514b69506e060102878813b", "locomo": "25629f02088b45105ede08b4ac8573e64abc257fc686c980622a7c92b969cf72", "longmemeval": "d87db20ac33018a014db2bcc7f00b94e5209fcabe6f66be8975f16190cac55d8", "traces": "d1ec64916b8f05b570b39e3fbfd98450a8f17048c43f36680bbc9d3426a557a1"}


@pytest.mark.parametrize("name", list(TURN_PAIRS))
def test_registry_turn_pairs(name: str, tmp_path: Path) -> None:
    cfg = _cfgs(tmp_path)[name]
    assert _digest(dataset_turn_pairs(cfg, tmp_path / "work")) == TURN_PAIRS[name]


CONVERSATIONS = {"synthetic": "232ae07c4e448ecffccd0ccd15567169578a7cca944ceabc3520e1d4827b19d0", "locomo": "5995beefcde8d8bfce2936d12fa839f007346a80baa38a5b4d8a01507a245e69", "longmemeval": "3cfb94bebcb3e9a78deb1b8061e561c610771d5a1d3b3fb430a477f3e381f3bb"}


@pytest.mark.parametrize("name", list(CONVERSATIONS))
def test_registry_conversations(name: str, tmp_path: Path) -> None:
    cfg = _cfgs(tmp_path)[name]
    assert _digest(load_benchmark_set(cfg, tmp_path / "work")) == CONVERSATIONS[name]


CASES = {"synthetic": "4dbc15f8eda35c1a9a0d336c759ae9431db605fd60e54b55998e544ff020693d", "locomo": "aabc45b0727ef217a272efdf629b9bf871abbe97e4882d3a4e1f32cb3066b447", "longmemeval": "4dae3ad3ab96996a3186940bf27050a7d438cf4f225282149a8fb354d7e24a69"}


@pytest.mark.parametrize("name", list(CASES))
def test_registry_cases(name: str, tmp_path: Path) -> None:
    cfg = _cfgs(tmp_path)[name]
    assert _digest(load_cases(cfg, tmp_path / "work")) == CASES[name]


# ---------------------------------------------------------------- the released LoCoMo file
@pytest.mark.skipif(not REAL_LOCOMO.is_file(), reason="no ../shared/data/locomo/locomo10.json")
def test_real_locomo() -> None:
    convs = load_locomo(REAL_LOCOMO, categories=(1, 2, 3, 4, 5))
    assert _digest(convs) == "128eeee5710da19eb335d5c33bf06c38b10990f7f22d1d36fe23ec0879510311"
    assert _digest([turn_pairs(c) for c in convs]) == "20a7d1c238641d4bf8856b1600c0390c8bc031d63cc5228252c72c47d6a60caa"
    default = DatasetConfig(name="locomo", path=str(REAL_LOCOMO))
    assert _digest(dataset_turn_pairs(default, REAL_LOCOMO.parent)) == "36fae6827f3dd742e43132b20e35fe87c39c330d5e3c98b3f59c8e28b8d03c9d"
    assert _digest(load_benchmark_set(default, REAL_LOCOMO.parent)) == "9c1bb4b04b8e2af69cb38a3227e9e6b9dd0a250643c65e02b253e8bef836f9e0"
    assert _digest(load_cases(default, REAL_LOCOMO.parent)) == "b6b27b4b63c5c7d9ed55e15a4f7ac249f4e1390e292d6e98ef504e52708b0a80"
