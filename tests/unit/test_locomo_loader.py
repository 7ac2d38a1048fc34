import copy
import json
import os
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memroute.errors import InvalidRequest
from memroute.datasets import (
    DatasetError,
    evidence_pair_ids,
    load_locomo,
    parse_locomo_date,
    turn_pairs,
)

# The research data lives next to the repo (never in it); MEMROUTE_LOCOMO_PATH points elsewhere.
REAL_LOCOMO = Path(
    os.environ.get(
        "MEMROUTE_LOCOMO_PATH",
        Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo" / "locomo10.json",
    )
)


def utc(*args):
    return int(datetime(*args, tzinfo=UTC).timestamp())


def sample(sid="conv-x", speakers=("Ann", "Bob")):
    a, b = speakers
    return {
        "sample_id": sid,
        "conversation": {
            "speaker_a": a,
            "speaker_b": b,
            # numeric session order, whatever the key order in the file
            "session_10_date_time": "9:00 pm on 1 July, 2023",
            "session_10": [{"speaker": a, "dia_id": "D10:1", "text": "Late one"}],
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": a, "dia_id": "D1:1", "text": "Hi Bob"},
                {"speaker": b, "dia_id": "D1:2", "text": "Hi Ann"},
                {
                    "speaker": a,
                    "dia_id": "D1:3",
                    "text": "Look at this.",
                    "img_url": ["http://example.invalid/k.jpg"],
                    "blip_caption": "a photo of a red kite",
                },
            ],
            "session_2_date_time": "10:05 am on 12 June, 2023",
            "session_2": [
                {"speaker": a, "dia_id": "D2:1", "text": "I flew a kite"},
                {"speaker": b, "dia_id": "D2:2", "text": "Fun!"},
            ],
            "session_3_date_time": "10:05 am on 20 June, 2023",  # date without turns: ignored
        },
        "qa": [
            {"question": "What does Ann fly?", "answer": "Kite", "evidence": ["D1:3"],
             "category": 4},
            {"question": "When?", "answer": 2023, "evidence": ["D2:1; D1:1"], "category": 2},
            {"question": "Who?", "answer": "Ann, Bob", "evidence": ["D:1:2"], "category": 1},
            {"question": "Did Bob fly?", "adversarial_answer": "Yes", "evidence": ["D2:2"],
             "category": 5},
        ],
    }


def write(tmp_path, data, name="tiny.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def tiny(tmp_path):
    return write(tmp_path, [sample("conv-x"), sample("conv-y", ("Cy", "Di"))])


# ------------------------------------------------------------------ parsing


def test_parse_locomo_date_edges():
    assert parse_locomo_date("1:56 pm on 8 May, 2023") == utc(2023, 5, 8, 13, 56)
    assert parse_locomo_date("12:05 am on 1 January, 2024") == utc(2024, 1, 1, 0, 5)
    assert parse_locomo_date("12:30 pm on 3 March, 2024") == utc(2024, 3, 3, 12, 30)
    for bad in ("yesterday", "13:00 pm on 1 May, 2023", "1:00 pm on 31 February, 2023"):
        with pytest.raises(ValueError, match="cannot parse"):
            parse_locomo_date(bad)


def test_sessions_turns_and_dates(tiny):
    conv = load_locomo(tiny)[0]
    assert conv.sample_id == "conv-x" and (conv.speaker_a, conv.speaker_b) == ("Ann", "Bob")
    assert [s.index for s in conv.sessions] == [1, 2, 10]
    assert conv.sessions[0].date_time == utc(2023, 5, 8, 13, 56)
    assert conv.sessions[0].date_text == "1:56 pm on 8 May, 2023"
    assert conv.sessions[1].date_time == utc(2023, 6, 12, 10, 5)
    assert conv.num_turns == 6
    assert conv.find_turn("D1:3").caption == "a photo of a red kite"
    assert conv.find_turn("D9:9") is None


def test_qa_fields_are_normalized(tiny):
    convs = load_locomo(tiny, categories=(1, 2, 3, 4, 5))
    qa = {q.question: q for q in convs[0].qa}
    assert qa["When?"].answer == "2023"  # ints become strings
    assert qa["When?"].evidence == ("D2:1", "D1:1")  # "D2:1; D1:1" split
    assert qa["Who?"].evidence == ("D1:2",)  # "D:1:2" repaired
    assert qa["Did Bob fly?"].answer == "Yes"
    assert qa["Did Bob fly?"].adversarial_answer == "Yes"
    assert qa["What does Ann fly?"].qid == "conv-x:q0"
    assert qa["Did Bob fly?"].qid == "conv-x:q3"
    assert all(q.fact_type is None and q.stale_answer is None for q in qa.values())


# ------------------------------------------------------------------ turn-pairs


def test_turn_pairs_are_non_overlapping_within_sessions(tiny):
    conv = load_locomo(tiny)[0]
    recs = turn_pairs(conv)
    assert [r.dia_ids for r in recs] == [("D1:1", "D1:2"), ("D1:3",), ("D2:1", "D2:2"), ("D10:1",)]
    first, odd = recs[0].pair, recs[1].pair
    assert first.user_text == "Ann: Hi Bob" and first.assistant_text == "Bob: Hi Ann"
    assert (first.session_id, first.turn_index, first.user_id) == ("session_1", 0, "conv-x")
    assert first.session_time == utc(2023, 5, 8, 13, 56) and first.source_model == "dataset"
    # the odd last turn pairs with an empty reply; its photo caption is carried in the text
    assert odd.user_text == "Ann: Look at this. [shares a photo of a red kite]"
    assert odd.assistant_text == "" and odd.turn_index == 1
    assert recs[2].pair.session_id == "session_2" and recs[2].pair.turn_index == 0
    assert len({r.pair.id for r in recs}) == 4
    assert first.text().startswith("[8 May 2023] Q: Ann: Hi Bob / A: Bob: Hi Ann")


def test_turn_pairs_user_id_override_is_validated(tiny):
    conv = load_locomo(tiny)[0]
    assert {r.pair.user_id for r in turn_pairs(conv, user_id="alice")} == {"alice"}
    with pytest.raises(InvalidRequest, match="user_id"):
        turn_pairs(conv, user_id="bad id!")


def test_evidence_pair_ids_maps_dia_ids_to_stored_pairs(tiny):
    conv = load_locomo(tiny, categories=(2,))[0]
    recs = turn_pairs(conv)
    (q,) = conv.qa  # evidence D2:1 then D1:1
    assert evidence_pair_ids(q, recs) == (recs[2].pair.id, recs[0].pair.id)


# ------------------------------------------------------------------ filters


def test_category_filter(tiny):
    assert [q.category for q in load_locomo(tiny)[0].qa] == [4, 2, 1]  # default 1-4
    assert [q.category for q in load_locomo(tiny, categories=(5,))[0].qa] == [5]
    with pytest.raises(InvalidRequest, match="categories"):
        load_locomo(tiny, categories=(0, 6))


def test_limit_keeps_first_questions_overall(tiny):
    two = load_locomo(tiny, limit=2)
    assert [c.sample_id for c in two] == ["conv-x"] and len(two[0].qa) == 2
    four = load_locomo(tiny, limit=4)
    assert [len(c.qa) for c in four] == [3, 1]
    assert len(sum((c.qa for c in load_locomo(tiny, limit=100)), ())) == 6
    with pytest.raises(InvalidRequest, match="limit"):
        load_locomo(tiny, limit=-1)


def test_sample_id_filter(tiny):
    assert [c.sample_id for c in load_locomo(tiny, sample_ids=["conv-y"])] == ["conv-y"]
    assert [c.sample_id for c in load_locomo(tiny, sample_ids="conv-y")] == ["conv-y"]
    with pytest.raises(InvalidRequest, match=r"conv-zz.*Available: conv-x, conv-y"):
        load_locomo(tiny, sample_ids=["conv-zz"])


def test_the_dataset_config_selects_all_conversations_or_refuses_an_empty_list(tiny, tmp_path):
    from memroute.config.schema import DatasetConfig
    from memroute.datasets.registry import DATASETS
    from memroute.errors import ConfigError

    def load(ids):
        cfg = DatasetConfig(name="locomo", path=str(tiny), sample_ids=ids, categories=[])
        return [c.sample_id for c in DATASETS.get("locomo").locomo(cfg, tmp_path)]

    assert load(["all"]) == ["conv-x", "conv-y"]
    assert load(["conv-y"]) == ["conv-y"]
    with pytest.raises(ConfigError, match=r"\[all\]") as e:
        load([])
    assert e.value.field == "dataset.sample_ids"


# ------------------------------------------------------------------ errors


def broken(tmp_path, mutate):
    data = [sample("conv-x"), sample("conv-41")]
    mutate(data[1])
    return write(tmp_path, data, "bad.json")


@pytest.mark.parametrize(
    ("mutate", "field", "problem"),
    [
        (lambda s: s["conversation"].update(session_2_date_time="someday"),
         "session_2_date_time", "cannot parse 'someday'"),
        (lambda s: s["conversation"].pop("session_1_date_time"), "session_1_date_time", "missing"),
        (lambda s: s["conversation"].pop("speaker_a"), "conversation.speaker_a", "missing"),
        (lambda s: s["conversation"]["session_1"][1].pop("dia_id"),
         "session_1[1].dia_id", "missing"),
        (lambda s: s["qa"][2].pop("category"), "qa[2].category", "missing"),
        (lambda s: s["qa"][0].update(category="4"), "qa[0].category", "expected int, got str"),
        (lambda s: s["qa"][1].pop("answer"), "qa[1].answer", "missing"),
        (lambda s: s["qa"][0].update(evidence="D1:1"), "qa[0].evidence", "expected list"),
        (lambda s: s["conversation"]["session_2"].append({"speaker": "Ann", "dia_id": "D1:1",
                                                          "text": "again"}),
         "session_2[2].dia_id", "duplicate dia_id 'D1:1'"),
        (lambda s: s.pop("qa"), "qa", "missing"),
    ],
)
def test_bad_samples_name_file_sample_and_field(tmp_path, mutate, field, problem):
    path = broken(tmp_path, mutate)
    with pytest.raises(DatasetError) as err:
        load_locomo(path, categories=(1, 2, 3, 4, 5))
    msg = str(err.value)
    assert msg.startswith(f"{path}: sample 2 (conv-41): {field}: ")
    assert problem in msg
    assert err.value.field == field


def test_bad_files(tmp_path):
    with pytest.raises(DatasetError, match="nope.json: dataset file not found"):
        load_locomo(tmp_path / "nope.json")
    bad_json = tmp_path / "broken.json"
    bad_json.write_text('[{"sample_id": ')
    with pytest.raises(DatasetError, match=r"broken.json: not valid JSON \(line 1"):
        load_locomo(bad_json)
    with pytest.raises(DatasetError, match="expected a JSON list of samples, got dict"):
        load_locomo(write(tmp_path, sample()))
    with pytest.raises(DatasetError, match="duplicate sample_id conv-x"):
        load_locomo(write(tmp_path, [sample(), sample()]))
    nameless = copy.deepcopy(sample())
    del nameless["sample_id"]
    with pytest.raises(DatasetError, match=r"sample 1: sample_id: missing"):
        load_locomo(write(tmp_path, [nameless]))


# ------------------------------------------------------------------ the real file


@pytest.fixture(scope="module")
def real_path():
    if not REAL_LOCOMO.is_file():
        pytest.skip(f"LoCoMo not present at {REAL_LOCOMO} (research data, never in the repo)")
    return REAL_LOCOMO


def test_real_locomo_conv26(real_path):
    (conv,) = load_locomo(real_path, sample_ids=["conv-26"])
    assert (conv.speaker_a, conv.speaker_b) == ("Caroline", "Melanie")
    assert len(conv.sessions) == 19 and conv.num_turns == 419
    assert len(conv.qa) == 152
    assert Counter(q.category for q in conv.qa) == {1: 32, 2: 37, 3: 13, 4: 70}
    pairs = turn_pairs(conv)
    assert len(pairs) == 214  # the paper's "214 turn-pairs"
    assert pairs[0].pair.text().startswith("[8 May 2023] Q: Caroline: Hey Mel!")
    # every evidence id (after repairing "D8:6; D9:17") points at a real turn
    known = {d for r in pairs for d in r.dia_ids}
    assert all(e in known for q in conv.qa for e in q.evidence)
    assert sum(1 for q in conv.qa if q.evidence) == 150  # two open-domain questions have none
    assert {q.answer for q in conv.qa if q.qid == "conv-26:q1"} == {"2022"}


def test_real_locomo_all_conversations(real_path):
    convs = load_locomo(real_path, categories=(1, 2, 3, 4, 5))
    assert [c.sample_id for c in convs][:3] == ["conv-26", "conv-30", "conv-41"]
    assert len(convs) == 10
    assert sum(len(c.qa) for c in convs) == 1986
    assert Counter(q.category for c in convs for q in c.qa)[5] == 446
    assert all(q.answer for c in convs for q in c.qa)
