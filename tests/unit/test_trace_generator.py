"""The seeded trace generator (memroute/datasets/generate/trace.py, ``python -m jobs.make_trace``):
its mix matches the config, it is deterministic, time-ordered, causal (questions after their
statements, updates reflected in later references), loads back, and streams in bounded memory."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest

from memroute.config.make_trace import MakeTraceConfig, TraceMix
from memroute.datasets.generate.trace import summarize
from memroute.datasets.generate.trace_sources import generate_trace
from memroute.datasets.replay_trace import iter_trace, load_trace, write_trace
from memroute.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = ("repeat", "paraphrase", "novel")


@pytest.fixture(scope="module")
def trace():
    return list(generate_trace(MakeTraceConfig(num_requests=3000, seed=7)))


def _shares(reqs):
    questions = [r for r in reqs if r.kind in QUESTIONS]
    kinds = Counter(r.kind for r in questions)
    general = sum(r.domain == "general" for r in questions) / len(questions)
    return {k: 100 * kinds[k] / len(questions) for k in QUESTIONS}, 100 * general


def test_the_mix_matches_the_config(trace):
    assert len(trace) == 3000 and len({r.user_id for r in trace}) == 50
    mix, general = _shares(trace)
    for kind, want in zip(QUESTIONS, (18, 47, 35)):
        assert abs(mix[kind] - want) <= 3, (kind, mix)
    assert abs(general - 25) <= 3
    kinds = Counter(r.kind for r in trace)
    assert kinds["statement"] > 0 and kinds["update"] > 0


def test_another_mix_is_followed_too():
    cfg = MakeTraceConfig(num_requests=3000, seed=2, mix=TraceMix(40, 20, 40), general_share=0.5)
    mix, general = _shares(list(generate_trace(cfg)))
    for kind, want in zip(QUESTIONS, (40, 20, 40)):
        assert abs(mix[kind] - want) <= 3, (kind, mix)
    assert abs(general - 50) <= 3


def test_determinism(tmp_path):
    paths = [tmp_path / f"{name}.jsonl" for name in ("a", "b", "c")]
    for path, seed in zip(paths, (3, 3, 4)):
        write_trace(generate_trace(MakeTraceConfig(num_requests=500, seed=seed)), path)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert paths[0].read_bytes() != paths[2].read_bytes()


def test_time_order_ids_and_sessions(trace):
    assert [r.ts for r in trace] == sorted(r.ts for r in trace)
    assert [r.request_id for r in trace] == [f"r{i:06d}" for i in range(len(trace))]
    last: dict[str, float] = {}
    for r in trace:
        assert r.ts > last.get(r.user_id, -1)  # strictly increasing per user
        last[r.user_id] = r.ts
        assert r.session_id.startswith(f"{r.user_id}-d") and r.messages[-1].role == "user"
    days = {r.session_id for r in trace if r.user_id == trace[0].user_id}
    assert len(days) > 5  # a new session per simulated day


def test_questions_follow_statements_and_updates(trace):
    known: dict[str, str | None] = {}  # fact -> its current value, once a question told it
    stale: dict[str, list[str]] = {}
    asked: dict[str, set[str]] = {}
    seen_update_effect = False
    for r in trace:
        assert r.domain in ("personal", "general") and r.fact_id
        if r.kind == "statement":
            assert r.references == () and r.fact_id not in known
            known[r.fact_id], stale[r.fact_id] = None, []
            continue
        if r.kind == "update":
            assert r.fact_id in known  # only a stated fact changes
            if known[r.fact_id] is not None:
                stale[r.fact_id].append(known[r.fact_id])
            known[r.fact_id] = None
            continue
        assert len(r.references) == 1 and r.references[0]  # every question has a reference
        texts = asked.setdefault(r.fact_id, set())
        if r.kind == "novel":
            assert not texts
        elif r.kind == "repeat":
            assert r.query in texts
        else:
            assert texts and r.query not in texts  # a paraphrase: a new wording
        texts.add(r.query)
        if r.domain == "general":
            assert r.stale_references == () and not r.fact_id.startswith(tuple(known))
            continue
        assert r.fact_id in known, "asked before it was stated"
        assert set(stale[r.fact_id]) <= set(r.stale_references)
        assert r.references[0] not in r.stale_references
        if known[r.fact_id] is not None:
            assert r.references[0] == known[r.fact_id]
        known[r.fact_id] = r.references[0]
        seen_update_effect |= bool(stale[r.fact_id])
    assert seen_update_effect


def test_updates_set_new_references_and_stale_ones(trace):
    by_fact: dict[str, list] = {}
    for r in trace:
        if r.domain == "personal":
            by_fact.setdefault(r.fact_id, []).append(r)
    checked = 0
    for rows in by_fact.values():
        kinds = [r.kind for r in rows]
        if "update" not in kinds:
            continue
        before = [r for r in rows[: kinds.index("update")] if r.references]
        after = [r for r in rows[kinds.index("update"):] if r.references]
        if before and after:
            old, new = before[-1].references[0], after[0].references[0]
            assert old != new and old in after[0].stale_references
            assert new in rows[kinds.index("update")].query  # the update states the new value
            checked += 1
    assert checked >= 5


def test_general_answers_are_computed():
    cfg = MakeTraceConfig(num_requests=2000, seed=5, general_share=1.0)
    for r in generate_trace(cfg):
        if r.kind == "novel" and " times " in r.query and r.query.startswith("What is"):
            a, b = r.query.removeprefix("What is ").removesuffix("?").split(" times ")
            assert r.references == (str(int(a) * int(b)),)


def test_the_file_loads_back(tmp_path, trace):
    for suffix in (".jsonl", ".parquet"):
        path = tmp_path / f"t{suffix}"
        write_trace(iter(trace), path)
        assert load_trace(path) == trace
    summary = summarize(iter_trace(path))
    assert summary.requests == 3000 and len(summary.users) == 50
    assert "3000 requests (novel" in summary.line()


@pytest.mark.parametrize("n", [20_000, pytest.param(100_000, marks=pytest.mark.slow)])
def test_streams_in_bounded_memory(tmp_path, n):
    cfg = MakeTraceConfig(num_requests=n, num_users=50, seed=1)  # state grows with users only
    tracemalloc.start()
    try:
        count = write_trace(generate_trace(cfg), tmp_path / "big.jsonl")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == n
    assert peak < 50e6, f"{peak / 1e6:.1f} MB"


@pytest.mark.parametrize("change, field", [
    ({"mix": TraceMix(90, 47, 35)}, "mix"),
    ({"mix": TraceMix(-5, 70, 35)}, "mix.repeat"),
    ({"general_share": 1.5}, "general_share"),
    ({"update_share": -0.1}, "update_share"),
    ({"num_users": 0}, "num_users"),
    ({"source": "reddit"}, "source"),
    ({"format": "csv"}, "format"),
])
def test_config_errors_name_the_field(change, field):
    with pytest.raises(ConfigError) as info:
        MakeTraceConfig(**change).validate()
    assert info.value.field == field


def _job(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jobs.make_trace", *args], cwd=ROOT,
                          check=False, capture_output=True, text=True, timeout=120)


def test_the_job(tmp_path):
    out = tmp_path / "t.jsonl"
    done = _job("num_requests=200", f"output={out}")
    assert done.returncode == 0, done.stderr
    assert "trace: 200 requests" in done.stdout and str(out) in done.stdout
    assert len(load_trace(out)) == 200
    bad = _job("num_requests=200", f"output={tmp_path / 'u.jsonl'}", "mix.repeat=90")
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error [mix]:"), bad.stderr
    assert not (tmp_path / "u.jsonl").exists()


def test_locomo_source(tmp_path):
    from memroute.datasets.generate import synthetic

    path = synthetic.write_json(synthetic.generate(num_users=2, seed=1), tmp_path / "loc.json")
    cfg = MakeTraceConfig(source="locomo", path=str(path), num_requests=0, seed=1)
    reqs = list(generate_trace(cfg))
    assert [r.ts for r in reqs] == sorted(r.ts for r in reqs)
    assert {r.user_id for r in reqs} == {"synth1-u01", "synth1-u02"}
    kinds = Counter(r.kind for r in reqs)
    assert kinds["statement"] > 100 and kinds["novel"] > 10 and kinds["paraphrase"] > 0
    for user in ("synth1-u01", "synth1-u02"):
        mine = [r for r in reqs if r.user_id == user]
        first_q = next(i for i, r in enumerate(mine) if r.kind != "statement")
        assert all(r.kind == "statement" for r in mine[:first_q])
        assert all(r.kind != "statement" and r.references for r in mine[first_q:])
    assert any(r.stale_references for r in reqs)  # the synthetic corrections' old values
    assert len(list(generate_trace(MakeTraceConfig(source="locomo", path=str(path),
                                                   num_requests=50)))) == 50


def test_longmemeval_source_uses_the_generated_set():
    reqs = list(generate_trace(MakeTraceConfig(source="longmemeval", num_requests=0, num_users=3)))
    assert len({r.user_id for r in reqs}) == 3
    assert [r.ts for r in reqs] == sorted(r.ts for r in reqs)
    novel = [r for r in reqs if r.kind == "novel"]
    assert len(novel) == 3 and all(r.references for r in novel)
