import json
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memroute.errors import InvalidRequest
from memroute.datasets import DatasetError, TraceRecord, load_traces, trace_turn_pairs


def utc(*args):
    return datetime(*args, tzinfo=UTC).timestamp()


ROWS = [
    # out of time order on purpose: turn_index follows ts, not file order
    {"ts": "2024-05-01T12:05:00Z", "tenant": "acme", "user_id": "u1", "session_id": "s1",
     "query": "And in June?", "answer": "Warmer.", "model": "qwen-0.5b"},
    {"ts": "2024-05-01T12:00:00Z", "tenant": "acme", "user_id": "u1", "session_id": "s1",
     "query": "Weather in Lisbon in May?", "answer": "Mild.", "model": "qwen-0.5b"},
    {"ts": utc(2024, 5, 1, 12, 1), "tenant": "globex", "user_id": "u1", "session_id": "s1",
     "query": "Hi", "answer": "Hello!", "model": "qwen-1.5b"},
    {"ts": "1714567500", "tenant": "acme", "user_id": "u1", "session_id": "s2",
     "query": "New topic", "answer": "Sure.", "extra": "ignored"},  # no model
    {"ts": "2024-05-01T14:00:00+02:00", "tenant": "acme", "user_id": "u2", "session_id": "s1",
     "query": "Who am I?", "answer": "", "model": "m"},
]


def write_jsonl(path, rows, blank_lines=False):
    lines = [json.dumps(r) for r in rows]
    if blank_lines:
        lines.insert(1, "   ")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_jsonl_records(tmp_path):
    recs = load_traces(write_jsonl(tmp_path / "t.jsonl", ROWS, blank_lines=True))
    assert [r.query for r in recs] == [r["query"] for r in ROWS]  # file order
    assert recs[0].ts == utc(2024, 5, 1, 12, 5)
    assert recs[2].ts == utc(2024, 5, 1, 12, 1) and recs[2].tenant == "globex"
    assert recs[3].ts == 1714567500.0 and recs[3].model == ""
    assert recs[4].ts == utc(2024, 5, 1, 12, 0) and recs[4].answer == ""
    assert recs[0].origin == f"{tmp_path / 't.jsonl'}: line 1"
    assert recs[1].origin.endswith("line 3")  # the blank line still counts


def test_turn_pairs_order_index_and_namespacing(tmp_path):
    pairs = trace_turn_pairs(load_traces(write_jsonl(tmp_path / "t.jsonl", ROWS)))
    got = [(p.user_id, p.session_id, p.turn_index, p.user_text) for p in pairs]
    assert got == [
        ("acme:u1", "s1", 0, "Weather in Lisbon in May?"),
        ("acme:u2", "s1", 0, "Who am I?"),
        ("globex:u1", "s1", 0, "Hi"),
        ("acme:u1", "s1", 1, "And in June?"),
        ("acme:u1", "s2", 0, "New topic"),
    ]
    first = pairs[0]
    assert first.assistant_text == "Mild." and first.source_model == "qwen-0.5b"
    assert first.session_time == int(utc(2024, 5, 1, 12))
    assert first.created_at == utc(2024, 5, 1, 12)
    # tenants never share ids, even for the same user and session names
    assert len({p.id for p in pairs}) == len(pairs)


def test_ties_keep_file_order():
    recs = [TraceRecord(ts=10.0, tenant="t", user_id="u", session_id="s", query=q, answer="")
            for q in ("a", "b", "c")]
    assert [p.turn_index for p in trace_turn_pairs(recs)] == [0, 1, 2]
    assert [p.user_text for p in trace_turn_pairs(recs)] == ["a", "b", "c"]


def test_parquet_matches_jsonl(tmp_path):
    table = pa.table({
        # a real timestamp column, as an exporter would write it
        "ts": pa.array([datetime(2024, 5, 1, 12, 5, tzinfo=UTC), datetime(2024, 5, 1, 12, 0)],
                       type=pa.timestamp("us", tz="UTC")),
        "tenant": ["acme", "acme"], "user_id": ["u1", "u1"], "session_id": ["s1", "s1"],
        "query": ["And in June?", "Weather in Lisbon in May?"], "answer": ["Warmer.", "Mild."],
        "model": ["qwen-0.5b", "qwen-0.5b"], "latency_ms": [120, 80],
    })
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    from_parquet = load_traces(path)
    from_jsonl = load_traces(write_jsonl(tmp_path / "t.jsonl", ROWS[:2]))
    assert from_parquet == from_jsonl  # origin is not compared
    assert from_parquet[1].origin == f"{path}: row 2"
    assert trace_turn_pairs(from_parquet) == trace_turn_pairs(from_jsonl)


def test_parquet_epoch_and_iso_text_columns(tmp_path):
    path = tmp_path / "t.pq"
    base = {"tenant": ["a"], "user_id": ["u"], "session_id": ["s"], "query": ["q"],
            "answer": ["x"]}
    pq.write_table(pa.table({**base, "ts": [1714564800]}), path)
    assert load_traces(path)[0].ts == utc(2024, 5, 1, 12)
    pq.write_table(pa.table({**base, "ts": ["2024-05-01 12:00"]}), path)
    assert load_traces(path)[0].ts == utc(2024, 5, 1, 12)


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        (lambda r: r.pop("query"), "query", "missing"),
        (lambda r: r.update(query="  "), "query", "empty"),
        (lambda r: r.update(user_id=7), "user_id", "expected str, got int"),
        (lambda r: r.update(model=["m"]), "model", "expected str, got list"),
        (lambda r: r.update(answer=None), "answer", "missing"),
        (lambda r: r.pop("ts"), "ts", "missing"),
        (lambda r: r.update(ts="last tuesday"), "ts", "cannot parse"),
        (lambda r: r.update(ts=1714564800000), "ts", "looks like milliseconds"),
        (lambda r: r.update(ts=-5), "ts", "non-negative"),
        (lambda r: r.update(ts=True), "ts", "got bool"),
    ],
)
def test_bad_jsonl_record_names_file_line_and_field(tmp_path, change, field, problem):
    rows = [dict(r) for r in ROWS[:3]]
    change(rows[2])
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DatasetError) as err:
        load_traces(path)
    assert str(err.value).startswith(f"{path}: line 3: {field}: ")
    assert problem in str(err.value)
    assert err.value.field == field


def test_bad_jsonl_lines(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n{not json\n")
    with pytest.raises(DatasetError, match=r"bad\.jsonl: line 2: not valid JSON"):
        load_traces(path)
    path.write_text(json.dumps(ROWS[0]) + "\n[1, 2]\n")
    with pytest.raises(DatasetError, match=r"line 2: record: expected an object, got list"):
        load_traces(path)


def test_bad_parquet_rows_and_columns(tmp_path):
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({
        "ts": [1714564800, None], "tenant": ["a", "a"], "user_id": ["u", "u"],
        "session_id": ["s", "s"], "query": ["q", "q"], "answer": ["x", "y"],
    }), path)
    with pytest.raises(DatasetError, match=r"bad\.parquet: row 2: ts: missing"):
        load_traces(path)
    pq.write_table(pa.table({"ts": [1], "tenant": ["a"], "user_id": ["u"], "answer": ["x"]}),
                   path)
    with pytest.raises(DatasetError, match=r"bad\.parquet: missing column\(s\) session_id, query"):
        load_traces(path)
    path.write_text("not parquet")
    with pytest.raises(DatasetError, match="not a readable Parquet file"):
        load_traces(path)


def test_invalid_namespaced_user_id_names_the_record(tmp_path):
    rows = [dict(ROWS[0]), dict(ROWS[1], tenant="acme corp")]
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    recs = load_traces(path)  # loading is fine; the id is checked when pairs are made
    with pytest.raises(DatasetError) as err:
        trace_turn_pairs(recs)
    assert str(err.value).startswith(f"{path}: line 2: tenant/user_id: 'acme corp:u1'")
    assert err.value.field == "user_id"


def test_unknown_suffix_and_missing_file(tmp_path):
    with pytest.raises(InvalidRequest, match=r"unknown trace format '\.csv'"):
        load_traces(tmp_path / "t.csv")
    with pytest.raises(DatasetError, match="trace file not found"):
        load_traces(tmp_path / "missing.jsonl")
