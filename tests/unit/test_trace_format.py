"""Replay traces (docs/TRACES.md): round trips, streaming, errors naming file/line/field, the old
answered-turn format, and the OpenAI chat-log importer (which writes all or nothing)."""

from __future__ import annotations

import json
import types

import pytest

from memroute.datasets.parsing import DatasetError
from memroute.datasets.records import TraceRequest
from memroute.datasets.replay_trace import (
    import_openai_chat_log,
    iter_trace,
    load_trace,
    write_trace,
)
from memroute.types import Message


def _req(i: int, **kw) -> TraceRequest:
    base = {"request_id": f"r{i:03d}", "ts": 1_700_000_000.0 + 60 * i, "tenant": "acme",
            "user_id": f"u{i % 2}", "session_id": f"u{i % 2}-d1",
            "messages": (Message("system", "Be brief."), Message("user", f"Question {i}?"))}
    base.update(kw)
    return TraceRequest(**base)


REQUESTS = [
    _req(0, kind="statement", fact_id="u0/code", domain="personal"),
    _req(1, references=("1776",), kind="novel", fact_id="g1", domain="general"),
    _req(2, references=("QM-2210",), stale_references=("ZX-4471",), kind="repeat"),
    _req(3, answer="It is 4.", model="qwen-large", ts=1_700_000_180.5),
]


def _write_lines(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_round_trip(tmp_path, suffix):
    path = tmp_path / f"t{suffix}"
    assert write_trace(iter(REQUESTS), path) == len(REQUESTS)
    back = load_trace(path)
    assert back == REQUESTS
    assert back[0].origin.endswith("line 1" if suffix == ".jsonl" else "row 1")
    assert back[2].query == "Question 2?"
    assert not list(tmp_path.glob(".*tmp"))  # the temp file was renamed


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_reading_streams(tmp_path, suffix):
    path = tmp_path / f"t{suffix}"
    write_trace((r for r in REQUESTS), path)
    it = iter_trace(path)
    assert isinstance(it, types.GeneratorType)
    assert next(it) == REQUESTS[0]


def test_a_failing_stream_leaves_the_old_file(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trace(REQUESTS, path)
    before = path.read_bytes()

    def broken():
        yield REQUESTS[0]
        raise RuntimeError("generator died")

    with pytest.raises(RuntimeError):
        write_trace(broken(), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["t.jsonl"]


def test_query_column_defaults_and_reference_string(tmp_path):
    path = _write_lines(tmp_path / "t.jsonl", [
        {"ts": "2024-05-01T12:30:00Z", "tenant": "t", "user_id": "u", "session_id": "s",
         "query": "What is my code?", "reference": "ZX-4471"},
        "",
        {"ts": 1714566700, "tenant": "t", "user_id": "u", "session_id": "s",
         "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]},
    ])
    a, b = load_trace(path)
    assert (a.request_id, b.request_id) == ("1", "2")  # row numbers, blank lines not counted
    assert a.messages == (Message("user", "What is my code?"),) and a.references == ("ZX-4471",)
    assert b.query == "Hi" and b.references == ()


def test_the_answered_turn_format_loads(tmp_path):
    path = _write_lines(tmp_path / "old.jsonl", [
        {"ts": "2024-05-01T12:30:00", "tenant": "acme", "user_id": "alice", "session_id": "s1",
         "query": "Where do I live?", "answer": "Lisbon", "model": "qwen-small"},
        {"ts": "2024-05-01T12:31:00", "tenant": "acme", "user_id": "alice", "session_id": "s1",
         "query": "Thanks", "answer": "You're welcome"},
    ])
    first, second = load_trace(path)
    assert first.query == "Where do I live?" and first.answer == "Lisbon"
    assert first.model == "qwen-small" and second.model is None


def test_the_answered_turn_format_loads_from_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "old.parquet"
    pq.write_table(pa.Table.from_pylist([
        {"ts": 1714566600, "tenant": "acme", "user_id": "alice", "session_id": "s1",
         "query": "Where do I live?", "answer": "Lisbon", "model": "m"}]), path)
    (req,) = load_trace(path)
    assert req.query == "Where do I live?" and req.answer == "Lisbon" and req.request_id == "1"


GOOD = {"ts": 1714566600, "tenant": "acme", "user_id": "alice", "session_id": "s1",
        "messages": [{"role": "user", "content": "Hi"}]}

BAD_ROWS = [
    ({"messages": [{"role": "robot", "content": "Hi"}]}, "messages[0].role"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]},
     "messages[1].role"),
    ({"messages": [{"role": "user", "content": "  "}]}, "messages[0].content"),
    ({"messages": None}, "messages"),
    ({"tenant": None}, "tenant"),
    ({"user_id": ""}, "user_id"),
    ({"user_id": "bad user!"}, "user_id"),
    ({"ts": "yesterday"}, "ts"),
    ({"ts": 1714566600000}, "ts"),
    ({"kind": "chitchat"}, "kind"),
    ({"domain": "sports"}, "domain"),
    ({"reference": [1, 2]}, "reference"),
]


@pytest.mark.parametrize("change, field", BAD_ROWS, ids=[f for _, f in BAD_ROWS])
def test_a_bad_row_names_file_line_and_field(tmp_path, change, field):
    bad = {**GOOD, **change}
    path = _write_lines(tmp_path / "t.jsonl", [{**GOOD, "request_id": "a"}, bad])
    with pytest.raises(DatasetError) as info:
        load_trace(path)
    assert info.value.field == field
    assert info.value.message.startswith(f"{path}: line 2: {field}: ")


def test_time_must_not_go_backwards(tmp_path):
    path = _write_lines(tmp_path / "t.jsonl", [GOOD, {**GOOD, "ts": GOOD["ts"] - 1}])
    with pytest.raises(DatasetError, match=r"line 2: ts: .*time order") as info:
        load_trace(path)
    assert info.value.field == "ts"
    _write_lines(path, [GOOD, {**GOOD, "ts": GOOD["ts"]}])  # equal times are fine
    assert len(load_trace(path)) == 2


def test_duplicate_request_ids(tmp_path):
    path = _write_lines(tmp_path / "t.jsonl", [{**GOOD, "request_id": "x"},
                                               {**GOOD, "request_id": "x"}])
    with pytest.raises(DatasetError, match=r"line 2: request_id: duplicate 'x'"):
        load_trace(path)


def test_bad_json_and_bad_parquet_rows(tmp_path):
    path = _write_lines(tmp_path / "t.jsonl", [GOOD, "{not json"])
    with pytest.raises(DatasetError, match=r"t.jsonl: line 2: not valid JSON"):
        load_trace(path)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq_path = tmp_path / "t.parquet"
    rows = [GOOD, {**GOOD, "messages": [{"role": "assistant", "content": "x"}]}]
    pq.write_table(pa.Table.from_pylist(rows), pq_path)
    with pytest.raises(DatasetError, match=r"t.parquet: row 2: messages\[0\].role") as info:
        load_trace(pq_path)
    assert info.value.field == "messages[0].role"


def test_missing_file_and_unknown_suffix(tmp_path):
    with pytest.raises(DatasetError, match="not found"):
        load_trace(tmp_path / "none.jsonl")
    from memroute.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match="unknown trace format"):
        load_trace(tmp_path / "t.csv")


# ---------------------------------------------------------------- OpenAI chat-log importer
def _chat(created, user="alice", reply=None, **kw):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"q{created}"}]
    if reply is not None:
        messages.append({"role": "assistant", "content": reply})
    return {"messages": messages, "user": user, "created": created, **kw}


def test_import_with_and_without_the_reply(tmp_path):
    src = _write_lines(tmp_path / "log.jsonl", [
        _chat(1714570000, reply="Lisbon", model="gpt-4o-mini"),
        _chat(1714566600),  # earlier: sorted first
        _chat(1714566600, user="bob", session_id="chat-9"),
        {**_chat(1714656000), "user": None},  # default user, next day
    ])
    dest = tmp_path / "trace.parquet"
    assert import_openai_chat_log(src, dest, tenant="acme") == 4
    reqs = load_trace(dest)
    assert [r.request_id for r in reqs] == ["2", "3", "1", "4"]  # stable sort by created
    first, bob, replied, later = reqs
    assert first.answer is None and first.messages[-1] == Message("user", "q1714566600")
    assert replied.answer == "Lisbon" and replied.model == "gpt-4o-mini"
    assert replied.messages == (Message("system", "Be brief."), Message("user", "q1714570000"))
    assert first.session_id == "alice-2024-05-01" and bob.session_id == "chat-9"
    assert later.user_id == "default" and later.session_id == "default-2024-05-02"
    assert {r.tenant for r in reqs} == {"acme"}


@pytest.mark.parametrize("bad, field", [
    ({"created": None}, "created"),
    ({"created": "soon"}, "created"),
    ({"messages": [{"role": "assistant", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                   {"role": "assistant", "content": "c"}]}, "messages[1].role"),
    ({"user": "no spaces please"}, "user_id"),
])
def test_import_is_all_or_nothing(tmp_path, bad, field):
    src = _write_lines(tmp_path / "log.jsonl", [_chat(1714566600), {**_chat(1714566700), **bad}])
    dest = tmp_path / "trace.jsonl"
    with pytest.raises(DatasetError) as info:
        import_openai_chat_log(src, dest)
    assert info.value.field == field and f"log.jsonl: line 2: {field}" in info.value.message
    assert not dest.exists()
    dest.write_text("old\n")
    with pytest.raises(DatasetError):
        import_openai_chat_log(src, dest)
    assert dest.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.jsonl", "trace.jsonl"]
