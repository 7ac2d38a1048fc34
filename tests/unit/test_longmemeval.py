import json
import random
import re
from collections import Counter
from datetime import UTC, datetime

import pytest

from memroute.errors import InvalidRequest
from memroute.datasets.generate import longmemeval as synth
from memroute.datasets import (
    QUESTION_TYPES,
    DatasetError,
    gold_pair_ids,
    gold_session_ids,
    lme_turn_pairs,
    lme_user_id,
    load_longmemeval,
    parse_lme_date,
)
from memroute.types import stable_id

KEYS = {
    "question_id", "question_type", "question", "answer", "question_date",
    "haystack_session_ids", "haystack_dates", "haystack_sessions", "answer_session_ids",
}


def utc(*args):
    return int(datetime(*args, tzinfo=UTC).timestamp())


def question(qid="q1", qtype="single-session-user", answer="Lisbon"):
    return {
        "question_id": qid,
        "question_type": qtype,
        "question": "Where did I move?",
        "answer": answer,
        "question_date": "2023/06/01 (Thu) 10:00",
        "haystack_session_ids": ["sharegpt_a_0", "answer_x_1", "sharegpt_a_0"],
        "haystack_dates": [
            "2023/05/20 (Sat) 02:21", "2023-05-25T14:30:00", "2023/05/27 (Sat) 09:05"
        ],
        "haystack_sessions": [
            [
                {"role": "assistant", "content": "Welcome back!"},  # stray reply: no user side
                {"role": "user", "content": "How do I boil an egg?"},
                {"role": "assistant", "content": "About 9 minutes."},
                {"role": "user", "content": "Thanks"},  # trailing user turn: no reply
            ],
            [
                {"role": "user", "content": "We moved to Lisbon!", "has_answer": True},
                {"role": "assistant", "content": "Congratulations on Lisbon."},
                {"role": "user", "content": "  "},
                {"role": "assistant", "content": ""},  # both sides blank: skipped
                {"role": "user", "content": "What should I unpack first?"},
                {"role": "assistant", "content": "The kitchen.", "has_answer": True},
            ],
            [{"role": "user", "content": "Hi again"}, {"role": "assistant", "content": "Hello"}],
        ],
        "answer_session_ids": ["answer_x_1"],
    }


def write(tmp_path, data, name="lme.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def tiny(tmp_path):
    return write(tmp_path, [
        question("q1", answer=3),
        question("q2_abs", qtype="multi-session"),
        question("q3", qtype="knowledge-update"),
    ])


# ----------------------------------------------------------------------------- loader
def test_parse_lme_date_real_format_and_iso_fallback():
    assert parse_lme_date("2023/05/20 (Sat) 02:21") == utc(2023, 5, 20, 2, 21)
    assert parse_lme_date("2023/5/2") == utc(2023, 5, 2)
    assert parse_lme_date("2023-05-20T02:21:00") == utc(2023, 5, 20, 2, 21)
    assert parse_lme_date("2023-05-20T04:21:00+02:00") == utc(2023, 5, 20, 2, 21)
    for bad in ("20 May 2023", "2023/13/01 (Sun) 10:00", "2023/05/20 (Sat) 25:00", ""):
        with pytest.raises(ValueError, match="cannot parse"):
            parse_lme_date(bad)


def test_load_keeps_fields_dates_and_abstention(tiny):
    qs = load_longmemeval(tiny)
    assert [q.question_id for q in qs] == ["q1", "q2_abs", "q3"]
    q1 = qs[0]
    assert q1.answer == "3"  # numbers in the file become text
    assert q1.question_type == "single-session-user" and not q1.is_abstention
    assert qs[1].is_abstention and not qs[2].is_abstention
    assert q1.question_date == utc(2023, 6, 1, 10, 0)
    assert q1.question_date_text == "2023/06/01 (Thu) 10:00"
    assert q1.haystack_dates == (utc(2023, 5, 20, 2, 21), utc(2023, 5, 25, 14, 30),
                                 utc(2023, 5, 27, 9, 5))
    assert q1.haystack_session_ids == ("sharegpt_a_0", "answer_x_1", "sharegpt_a_0")
    assert q1.answer_session_ids == ("answer_x_1",)
    assert q1.num_turns == 12
    first = q1.haystack_sessions[1][0]
    assert (first.role, first.content, first.has_answer) == ("user", "We moved to Lisbon!", True)
    assert not q1.haystack_sessions[1][1].has_answer


def test_filters_types_abstention_and_limit(tiny):
    ids = lambda qs: [q.question_id for q in qs]  # noqa: E731
    assert ids(load_longmemeval(tiny, question_types=["multi-session"])) == ["q2_abs"]
    assert ids(load_longmemeval(tiny, question_types="knowledge-update")) == ["q3"]
    assert ids(load_longmemeval(tiny, include_abstention=False)) == ["q1", "q3"]
    assert ids(load_longmemeval(tiny, limit=2)) == ["q1", "q2_abs"]
    assert ids(load_longmemeval(tiny, include_abstention=False, limit=2)) == ["q1", "q3"]
    assert load_longmemeval(tiny, limit=0) == []
    with pytest.raises(InvalidRequest, match="unknown question_types.*Available") as err:
        load_longmemeval(tiny, question_types=["single-session"])
    assert err.value.field == "question_types"
    with pytest.raises(InvalidRequest, match="limit"):
        load_longmemeval(tiny, limit=-1)


def test_turn_pairs_pair_user_with_reply_and_keep_sessions(tiny):
    q = load_longmemeval(tiny)[0]
    records = lme_turn_pairs(q)
    got = [(r.session_id, r.pair.session_id, r.pair.turn_index, r.pair.user_text,
            r.pair.assistant_text, r.has_answer) for r in records]
    assert got == [
        ("sharegpt_a_0", "sharegpt_a_0", 0, "", "Welcome back!", False),
        ("sharegpt_a_0", "sharegpt_a_0", 1, "How do I boil an egg?", "About 9 minutes.", False),
        ("sharegpt_a_0", "sharegpt_a_0", 2, "Thanks", "", False),
        ("answer_x_1", "answer_x_1", 0, "We moved to Lisbon!", "Congratulations on Lisbon.", True),
        ("answer_x_1", "answer_x_1", 1, "What should I unpack first?", "The kitchen.", True),
        # a session id repeated in the haystack keeps distinct pair ids
        ("sharegpt_a_0", "sharegpt_a_0#2", 0, "Hi again", "Hello", False),
    ]
    assert all(r.pair.user_id == "q1" for r in records)
    assert len({r.pair.id for r in records}) == len(records)
    assert records[3].pair.session_time == utc(2023, 5, 25, 14, 30)
    assert records[3].pair.created_at == float(utc(2023, 5, 25, 14, 30))
    assert records[3].pair.source_model == "dataset"
    assert records[3].pair.text() == (
        "[25 May 2023] Q: We moved to Lisbon! / A: Congratulations on Lisbon."
    )
    assert gold_session_ids(q) == ("answer_x_1",)
    assert gold_pair_ids(q, records) == (records[3].pair.id, records[4].pair.id)
    # another user id changes every pair id (they are per user)
    other = lme_turn_pairs(q, user_id="alice")
    assert {r.pair.user_id for r in other} == {"alice"}
    assert not {r.pair.id for r in other} & {r.pair.id for r in records}
    with pytest.raises(InvalidRequest):
        lme_turn_pairs(q, user_id="bad user")


def test_gold_pair_ids_ignore_records_of_other_haystacks(tmp_path, tiny):
    q1 = load_longmemeval(tiny)[0]
    other = question("q9")
    other["haystack_session_ids"] = ["s_a", "s_b", "s_c"]
    other["answer_session_ids"] = ["s_b"]
    q9 = load_longmemeval(write(tmp_path, [other], "other.json"))[0]
    own, foreign = lme_turn_pairs(q1), lme_turn_pairs(q9)
    assert len(gold_pair_ids(q9, foreign)) == 2
    assert gold_pair_ids(q1, own + foreign) == gold_pair_ids(q1, own)
    assert gold_pair_ids(q1, foreign) == ()


def test_user_id_is_the_sanitized_question_id():
    assert lme_user_id("gpt4_2655b836_abs") == "gpt4_2655b836_abs"
    assert lme_user_id("q 1/x") == "q_1_x"
    assert lme_user_id("__weird") == "weird"
    assert lme_user_id("***") == f"lme-{stable_id('***'):x}"
    assert len(lme_user_id("a" * 300)) == 128


def _mutate(tmp_path, change):
    data = [question("q1"), question("q2")]
    change(data[1])
    return write(tmp_path, data)


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        (lambda q: q.pop("question"), "question", "missing"),
        (lambda q: q.update(answer=None), "answer", "missing"),
        (lambda q: q.update(answer={"x": 1}), "answer", "expected str or number"),
        (lambda q: q.update(question_type="single-session"), "question_type", "unknown type"),
        (lambda q: q.update(question_date="yesterday"), "question_date", "cannot parse"),
        (lambda q: q["haystack_dates"].__setitem__(2, "2023/02/30 (Thu) 10:00"),
         "haystack_dates[2]", "cannot parse"),
        (lambda q: q["haystack_dates"].pop(), "haystack_sessions", "parallel lists"),
        (lambda q: q["haystack_session_ids"].__setitem__(0, 7), "haystack_session_ids[0]",
         "expected str"),
        (lambda q: q["haystack_sessions"][1][2].update(role="system"),
         "haystack_sessions[1][2].role", "expected 'user' or 'assistant'"),
        (lambda q: q["haystack_sessions"][0][1].pop("content"),
         "haystack_sessions[0][1].content", "missing"),
        (lambda q: q["haystack_sessions"][1][0].update(has_answer="yes"),
         "haystack_sessions[1][0].has_answer", "expected a boolean"),
        (lambda q: q["haystack_sessions"].__setitem__(2, "text"), "haystack_sessions[2]",
         "expected a list of turns"),
        (lambda q: q.update(answer_session_ids="answer_x_1"), "answer_session_ids",
         "expected list"),
    ],
)
def test_bad_question_names_file_question_and_field(tmp_path, change, field, problem):
    path = _mutate(tmp_path, change)
    with pytest.raises(DatasetError) as err:
        load_longmemeval(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: question 2 (q2): {field}: ")
    assert problem in msg
    assert err.value.field == field


def test_bad_files(tmp_path):
    with pytest.raises(DatasetError, match="not found"):
        load_longmemeval(tmp_path / "nope.json")
    broken = tmp_path / "broken.json"
    broken.write_text('[{"question_id": ')
    with pytest.raises(DatasetError, match=r"broken\.json: not valid JSON \(line 1"):
        load_longmemeval(broken)
    with pytest.raises(DatasetError, match="expected a JSON list of questions"):
        load_longmemeval(write(tmp_path, {"question_id": "q1"}))
    with pytest.raises(DatasetError, match="duplicate question_id q1"):
        load_longmemeval(write(tmp_path, [question("q1"), question("q1")]))
    with pytest.raises(DatasetError, match=r"question 2: question: expected an object"):
        load_longmemeval(write(tmp_path, [question("q1"), "q2"]))
    no_id = question("q1")
    del no_id["question_id"]
    with pytest.raises(DatasetError, match=r"question 1: question_id: missing"):
        load_longmemeval(write(tmp_path, [no_id]))


# ----------------------------------------------------------------------------- generator
@pytest.fixture(scope="module")
def small():
    return synth.generate_longmemeval(size="small", seed=3)


@pytest.fixture(scope="module")
def wide():
    """Enough questions for every template variant, with small haystacks to stay fast."""
    return synth.generate_longmemeval(
        num_questions=200, sessions_per_question=(3, 6), turns_per_session=(2, 6), seed=7
    )


def _marked(q):
    """(session index, turn) of every has_answer turn."""
    return [(i, t) for i, s in enumerate(q["haystack_sessions"]) for t in s if t.get("has_answer")]


def test_generator_is_deterministic_per_seed(small):
    assert json.dumps(synth.generate_longmemeval(size="small", seed=3)) == json.dumps(small)
    other = synth.generate_longmemeval(size="small", seed=4)
    assert json.dumps(other) != json.dumps(small)
    assert {q["question"] for q in other} != {q["question"] for q in small}


def test_small_schema_is_exactly_longmemeval(small):
    assert len(small) == 12
    assert len({q["question_id"] for q in small}) == 12
    for q in small:
        # one extension: a generated knowledge update names its superseded answer
        updates = q["question_type"] == "knowledge-update" and not q["question_id"].endswith("_abs")
        assert set(q) == (KEYS | {"stale_answer"} if updates else KEYS)
        n = len(q["haystack_sessions"])
        assert 8 <= n <= 12
        assert len(q["haystack_session_ids"]) == len(q["haystack_dates"]) == n
        assert len(set(q["haystack_session_ids"])) == n
        assert isinstance(q["answer"], (str, int)) and not isinstance(q["answer"], bool)
        assert q["answer_session_ids"]
        assert set(q["answer_session_ids"]) <= set(q["haystack_session_ids"])
        for session in q["haystack_sessions"]:
            assert 4 <= len(session) <= 8
            assert [t["role"] for t in session] == ["user", "assistant"] * (len(session) // 2)
            for turn in session:
                assert set(turn) <= {"role", "content", "has_answer"}
                assert turn.get("has_answer", True) is True and turn["content"].strip()
        for d in q["haystack_dates"] + [q["question_date"]]:
            assert re.fullmatch(r"\d{4}/\d{2}/\d{2} \([A-Z][a-z]{2}\) \d{2}:\d{2}", d)
            day = datetime.strptime(d[:10], "%Y/%m/%d")
            assert d[12:15] == day.strftime("%a")  # the weekday matches the date
        times = [parse_lme_date(d) for d in q["haystack_dates"]]
        assert times == sorted(times) and len(set(times)) == n
        assert parse_lme_date(q["question_date"]) > times[-1]


def test_small_has_all_types_and_abstention(small):
    types = Counter(q["question_type"] for q in small)
    assert set(types) == set(QUESTION_TYPES)
    abstentions = [q for q in small if q["question_id"].endswith("_abs")]
    assert len(abstentions) == 1
    assert all(str(q["answer"]).startswith("The information provided is not enough")
               for q in abstentions)
    assert all(q["question_type"] != "single-session-preference" for q in abstentions)


def test_type_counts_follow_the_real_set():
    assert synth.type_counts(500) == synth.REAL_COUNTS
    assert sum(synth.type_counts(12).values()) == 12
    assert min(synth.type_counts(6).values()) == 1
    plan = synth._plan_questions(random.Random(0), 500)
    assert Counter(t for t, _ in plan) == Counter(synth.REAL_COUNTS)
    assert sum(a for _, a in plan) == 30


def test_answer_sessions_are_exactly_the_marked_ones(wide):
    for q in wide:
        sids = q["haystack_session_ids"]
        marked = {sids[i] for i, _ in _marked(q)}
        assert marked == set(q["answer_session_ids"]), q["question_id"]
        assert q["answer_session_ids"] == [s for s in sids if s in marked]  # haystack order


def test_single_session_user_answer_is_in_the_marked_user_turn(wide):
    checked = 0
    for q in wide:
        if q["question_type"] != "single-session-user" or q["question_id"].endswith("_abs"):
            continue
        marked = _marked(q)
        assert len(marked) == 1 and marked[0][1]["role"] == "user"
        assert str(q["answer"]) in marked[0][1]["content"]
        checked += 1
    assert checked >= 20


def test_single_session_assistant_answer_is_what_the_assistant_said(wide):
    for q in wide:
        if q["question_type"] == "single-session-assistant" and "_abs" not in q["question_id"]:
            (_, turn), = _marked(q)
            assert turn["role"] == "assistant" and str(q["answer"]) in turn["content"]


def test_knowledge_update_new_value_later_old_value_earlier(wide):
    checked = 0
    for q in wide:
        if q["question_type"] != "knowledge-update" or q["question_id"].endswith("_abs"):
            continue
        (s_old, old), (s_new, new) = _marked(q)
        assert s_old < s_new
        answer = str(q["answer"])
        assert re.search(rf"(?<![\w$]){re.escape(answer)}(?!\w)", new["content"])
        assert not re.search(rf"(?<![\w$]){re.escape(answer)}(?!\w)", old["content"])
        # the superseded answer is the old turn's value, which the new turn no longer states
        stale = q["stale_answer"]
        assert stale != answer
        assert re.search(rf"(?<![\w$]){re.escape(stale)}(?!\w)", old["content"])
        assert not re.search(rf"(?<![\w$]){re.escape(stale)}(?!\w)", new["content"])
        checked += 1
    assert checked >= 20


def test_a_stale_answer_reaches_the_question_and_a_bad_one_names_its_field(tmp_path):
    from memroute.datasets.conversations import from_longmemeval

    good = {**question("q1", qtype="knowledge-update"), "stale_answer": "Porto"}
    bad = {**question("q2", qtype="knowledge-update"), "stale_answer": True}
    q1, q2 = load_longmemeval(write(tmp_path, [good, question("q2")]))
    assert q1.stale_answer == "Porto" and q2.stale_answer is None  # real files lack the key
    assert from_longmemeval(q1).qa[0].stale_answer == "Porto"
    with pytest.raises(DatasetError, match="stale_answer"):
        load_longmemeval(write(tmp_path, [bad], name="bad.json"))


def test_temporal_answers_match_the_session_dates(wide):
    checked = 0
    for q in wide:
        if q["question_type"] != "temporal-reasoning" or q["question_id"].endswith("_abs"):
            continue
        days = [datetime.strptime(q["haystack_dates"][i][:10], "%Y/%m/%d") for i, _ in _marked(q)]
        asked = datetime.strptime(q["question_date"][:10], "%Y/%m/%d")
        if q["question"].startswith("How many days passed between"):
            assert q["answer"] == f"{(days[1] - days[0]).days} days"
        elif q["question"].startswith("How many days have passed since"):
            assert q["answer"] == f"{(asked - days[0]).days} days"
        else:
            assert q["question"].startswith("Which happened first")
            assert str(q["answer"]) in q["question"]
        checked += 1
    assert checked >= 40


def test_multi_session_spans_two_or_three_sessions(wide):
    for q in wide:
        if q["question_type"] == "multi-session":
            assert 2 <= len(q["answer_session_ids"]) <= 3
            if q["question_id"].endswith("_abs"):
                assert str(q["answer"]).startswith("The information provided is not enough")
            elif "books" in q["question"] and "finished" in q["question"]:
                assert q["answer"] == len(q["answer_session_ids"])


def test_values_differ_across_questions(wide):
    by_question = Counter(q["question"] for q in wide)
    answers = Counter(str(q["answer"]) for q in wide if q["question_type"] == "single-session-user")
    assert answers.most_common(1)[0][1] <= 2
    assert len(by_question) > 0.6 * len(wide)
    assert len({(q["question"], str(q["answer"])) for q in wide}) > 0.9 * len(wide)


def test_loader_reads_generated_file(small, tmp_path):
    path = synth.write_json(small, tmp_path / "sub" / "lme.json")
    qs = load_longmemeval(path)
    assert [q.question_id for q in qs] == [q["question_id"] for q in small]
    for q, raw in zip(qs, small, strict=True):
        assert q.answer == str(raw["answer"])
        assert q.is_abstention == raw["question_id"].endswith("_abs")
        records = lme_turn_pairs(q)
        assert len(records) == q.num_turns // 2
        gold = gold_pair_ids(q, records)
        assert len(gold) == len(_marked(raw))
        gold_sessions = {r.session_id for r in records if r.pair.id in gold}
        assert gold_sessions == set(gold_session_ids(q))


def test_invalid_generator_arguments():
    with pytest.raises(InvalidRequest, match="unknown size 'huge'. Available"):
        synth.generate_longmemeval(size="huge")
    with pytest.raises(InvalidRequest) as err:
        synth.generate_longmemeval(num_questions=0)
    assert err.value.field == "num_questions"
    with pytest.raises(InvalidRequest) as err:
        synth.generate_longmemeval(sessions_per_question=(1, 3))
    assert err.value.field == "sessions_per_question"
    with pytest.raises(InvalidRequest, match="even number"):
        synth.generate_longmemeval(turns_per_session=(3, 3))


def test_size_preset_can_be_overridden():
    qs = synth.generate_longmemeval(size="small", num_questions=6, seed=1)
    assert len(qs) == 6 and {q["question_type"] for q in qs} == set(QUESTION_TYPES)
    assert all(8 <= len(q["haystack_sessions"]) <= 12 for q in qs)


def test_main_writes_a_file(tmp_path, capsys):
    synth.main([str(tmp_path / "out.json"), "--size", "small", "--questions", "3", "--seed", "2"])
    data = json.loads((tmp_path / "out.json").read_text())
    assert len(data) == 3 and capsys.readouterr().out.strip().endswith("out.json")
    assert data == synth.generate_longmemeval(size="small", num_questions=3, seed=2)
