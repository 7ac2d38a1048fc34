"""Failure causes: each cause on a hand-built row, and the precedence when several apply."""

import polars as pl
import pytest

from memroute.eval.causes import CAUSES, add_causes, is_hedged, label_cause, matches_stale


def row(**kw):
    base = dict(
        f1=0.0, prediction="Berlin", reference="Paris", stale_answer=None,
        evidence_injected=True, on_small=True, escalated=False,
    )
    base.update(kw)
    return base


def cause(**kw):
    return label_cause(**row(**kw))


def test_correct_answers_have_no_cause_and_the_threshold_is_configurable():
    assert cause(f1=0.5) is None
    assert cause(f1=0.49) == "confident_wrong_cheap"
    assert label_cause(**row(f1=0.4), wrong_below=0.3) is None


@pytest.mark.parametrize(
    "kw, expected",
    [
        ({"evidence_injected": False}, "not_retrieved"),
        ({"evidence_compacted": True, "compacted_text": "[8 May 2023] Summary: moved abroad."},
         "compacted_away"),
        ({"prediction": "Lyon", "reference": "Paris", "stale_answer": "Lyon"}, "stale_value"),
        ({"prediction": "I don't know"}, "hedged"),
        ({"prediction": ""}, "hedged"),
        ({}, "confident_wrong_cheap"),
        ({"on_small": False, "escalated": True}, "escalated_still_wrong"),
        # no gold evidence (None): not a retrieval miss; cheap tier -> other
        ({"evidence_injected": None}, "other"),
        # the large model alone (cold_large) on a question without evidence
        ({"evidence_injected": None, "on_small": False}, "other"),
    ],
)
def test_each_cause(kw, expected):
    assert cause(**kw) == expected


def test_precedence_when_several_apply():
    # missing evidence wins over a stale value, a hedge and an escalation
    assert cause(evidence_injected=False, prediction="not sure, Lyon", stale_answer="Lyon",
                 on_small=False, escalated=True) == "not_retrieved"
    # a stale value wins over a hedge and over escalation
    assert cause(prediction="not sure, maybe Lyon", stale_answer="Lyon", escalated=True,
                 on_small=False) == "stale_value"
    # a hedge wins over escalation and over the cheap tier
    assert cause(prediction="I cannot tell", escalated=True, on_small=False) == "hedged"
    assert cause(prediction="It is not mentioned") == "hedged"


def test_cold_rows_with_evidence_are_not_retrieved():
    # cold conditions inject nothing: evidence_injected is False whenever the question has evidence
    assert cause(evidence_injected=False, on_small=True) == "not_retrieved"


def test_stale_needs_the_old_value_to_beat_the_current_one():
    assert matches_stale("lives in Lyon now", "Lyon", "Paris")  # contained, F1 < 0.5
    assert matches_stale("Lyon France", "Lyon", "Paris")  # F1 0.67
    # naming both values is verbose, not stale
    assert not matches_stale("moved from Lyon to Paris", "Lyon", "Paris")
    assert not matches_stale("Lyon", None, "Paris")
    assert not matches_stale("Marseille", "Lyon", "Paris")
    # the LoCoMo normalization applies (case, punctuation, articles)
    assert matches_stale("The Blue Car!", "blue car", "red bike")


@pytest.mark.parametrize(
    "text", ["I don't know.", "I do not know", "Not sure", "There is no information about it",
             "I can't say", "unable to determine", "It was not mentioned", "unknown", "I don\u2019t know"],
)
def test_hedges(text):
    assert is_hedged(text)


@pytest.mark.parametrize("text", ["Paris", "7 May 2023", "knows Bob", "no later than Friday"])
def test_not_hedges(text):
    assert not is_hedged(text)


def test_add_causes_on_a_frame_gives_one_cause_per_wrong_row():
    df = pl.DataFrame([
        row(f1=1.0, prediction="Paris"),
        row(evidence_injected=False),
        row(evidence_compacted=True, compacted_text="Summary: the user moved."),
        row(prediction="Lyon", stale_answer="Lyon"),
        row(prediction="no idea, I don't know"),
        row(),
        row(on_small=False, escalated=True),
        row(evidence_injected=None),
    ])
    out = add_causes(df)
    assert out["correct"].to_list() == [True] + [False] * 7
    assert out["cause"].to_list() == [None, *CAUSES]
    assert out.schema["cause"] == pl.String


def test_a_summary_that_still_holds_the_answer_is_not_compacted_away():
    kept = "[8 May 2023] Summary: the user lives in Paris now."
    assert cause(evidence_compacted=True, compacted_text=kept) == "confident_wrong_cheap"
    # evidence also injected verbatim (evidence_compacted False): the summary is not to blame
    assert cause(evidence_compacted=False, compacted_text="moved") == "confident_wrong_cheap"
    # never injected at all comes first
    assert cause(evidence_injected=False, evidence_compacted=True) == "not_retrieved"
    # a summary that kept only the superseded value: the compaction lost the correction
    assert cause(prediction="Lyon", stale_answer="Lyon", evidence_compacted=True,
                 compacted_text="Summary: lives in Lyon.") == "compacted_away"
