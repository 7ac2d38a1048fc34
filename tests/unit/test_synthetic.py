import itertools
import json
import re
from collections import Counter
from datetime import UTC, datetime

import pytest

from memroute.errors import InvalidRequest
from memroute.datasets.generate import synthetic
from memroute.datasets import load_locomo, turn_pairs
from memroute.eval.metrics import normalize_answer

NEGATION = re.compile(r"\b(never|don't|not|no)\b", re.IGNORECASE)
LOCOMO_DATE = re.compile(r"\d{1,2}:\d{2} [ap]m on \d{1,2} [A-Z][a-z]+, \d{4}")


@pytest.fixture(scope="module", params=[0, 11, 23])
def samples(request):
    return synthetic.generate(num_users=4, sessions_per_user=6, seed=request.param)


@pytest.fixture(scope="module")
def convs(samples, tmp_path_factory):
    path = synthetic.write_json(samples, tmp_path_factory.mktemp("synth") / "synth.json")
    return load_locomo(path, categories=(1, 2, 3, 4, 5))


def test_deterministic_for_a_seed_and_different_across_seeds():
    samples = synthetic.generate(seed=0)
    assert json.dumps(synthetic.generate(seed=0)) == json.dumps(samples)
    other = synthetic.generate(seed=1)
    assert json.dumps(other) != json.dumps(samples)
    answers = {q["answer"] for s in samples for q in s["qa"]}
    assert answers != {q["answer"] for s in other for q in s["qa"]}


def test_load_locomo_reads_the_written_file(samples, convs):
    assert [c.sample_id for c in convs] == [s["sample_id"] for s in samples]
    assert sum(len(c.qa) for c in convs) == sum(len(s["qa"]) for s in samples)
    for conv in convs:
        assert conv.speaker_b == "Assistant" and conv.speaker_a in synthetic.FIRST_NAMES
        assert len(conv.sessions) == 6
        times = [s.date_time for s in conv.sessions]
        assert times == sorted(times) and len(set(times)) == 6
        assert all(datetime.fromtimestamp(t, tz=UTC).year == 2024 for t in times)
        assert all(LOCOMO_DATE.fullmatch(s.date_text) for s in conv.sessions)
        # gaps of days to weeks, not minutes
        assert min(b - a for a, b in itertools.pairwise(times)) >= 4 * 86400


def test_user_and_assistant_alternate_and_sessions_have_enough_pairs(convs):
    for conv in convs:
        for session in conv.sessions:
            speakers = [t.speaker for t in session.turns]
            assert speakers[0::2] == [conv.speaker_a] * (len(speakers) // 2)
            assert speakers[1::2] == ["Assistant"] * (len(speakers) // 2)
            assert len(speakers) % 2 == 0
            assert 10 <= len(speakers) // 2 <= 20


def test_every_user_has_all_fact_types(convs):
    for conv in convs:
        types = Counter(q.fact_type for q in conv.qa)
        assert set(types) == set(synthetic.FACT_TYPES)
        assert 8 <= len(conv.qa) <= 10
        assert types["correction"] == 1


def test_categories_follow_the_documented_mapping(convs):
    for q in (q for c in convs for q in c.qa):
        assert q.category == (2 if q.fact_type in ("date", "correction") else 4)


def test_evidence_turns_carry_the_answer(convs):
    for conv in convs:
        pairs = {d: r.pair for r in turn_pairs(conv) for d in r.dia_ids}
        for q in conv.qa:
            assert q.evidence, q
            turns = [conv.find_turn(e) for e in q.evidence]
            assert all(t is not None and t.speaker == conv.speaker_a for t in turns)
            planted = turns[0].text
            if q.fact_type == "negative":
                assert q.answer == "No"
                assert NEGATION.search(planted), planted
            else:
                assert q.answer in planted
                # the assistant's acknowledgement restates it, so the stored pair carries it twice
                assert q.answer in pairs[q.evidence[0]].assistant_text
                # the probe is paraphrased: it does not give the answer away
                assert normalize_answer(q.answer) not in normalize_answer(q.question)


def test_correction_keeps_the_stale_value_and_orders_evidence_new_first(convs):
    for conv in convs:
        (q,) = [q for q in conv.qa if q.fact_type == "correction"]
        assert q.stale_answer and q.stale_answer != q.answer
        new, old = q.evidence
        assert int(new[1:].split(":")[0]) > int(old[1:].split(":")[0])  # later session
        assert q.answer in conv.find_turn(new).text
        assert q.stale_answer in conv.find_turn(old).text
        assert q.answer not in conv.find_turn(old).text
    for q in (q for c in convs for q in c.qa if q.fact_type != "correction"):
        assert q.stale_answer is None and len(q.evidence) == 1


def test_values_differ_across_users(convs):
    answers = [q.answer for c in convs for q in c.qa if q.fact_type != "negative"]
    assert len(answers) == len(set(answers))


def test_answers_appear_only_where_planted(convs):
    # small talk never mentions a user's planted values, so the evidence is the only source
    for conv in convs:
        for q in conv.qa:
            if q.fact_type == "negative":
                continue
            # a whole mention: "45" is not in "$45,000", "818" is not in "XY-8181"
            mention = re.compile(
                rf"(?<![\w$-])(?<!\d[,.:]){re.escape(q.answer)}(?![\w-])(?![,.:]\d)"
            )
            holders = {
                t.dia_id
                for s in conv.sessions
                for t in s.turns
                if t.speaker == conv.speaker_a and mention.search(t.text)
            }
            assert holders == {q.evidence[0]}, (q, holders)


def test_limits_and_bounds():
    two = synthetic.generate(num_users=1, sessions_per_user=2, seed=5)
    (qa,) = [q for q in two[0]["qa"] if q["fact_type"] == "correction"]
    assert [e.split(":")[0] for e in qa["evidence"]] == ["D2", "D1"]
    biggest = synthetic.generate(num_users=synthetic.MAX_USERS, seed=7)
    assert len({s["conversation"]["speaker_a"] for s in biggest}) == synthetic.MAX_USERS
    with pytest.raises(InvalidRequest, match="num_users"):
        synthetic.generate(num_users=synthetic.MAX_USERS + 1)
    with pytest.raises(InvalidRequest, match="sessions_per_user"):
        synthetic.generate(sessions_per_user=1)
