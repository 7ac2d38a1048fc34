"""The retrieval query of a turn inside a conversation (memroute.retrieval.followup)."""

import pytest

from memroute.retrieval.followup import needs_context, proper_names, retrieval_query
from memroute.types import Message, ToolCall


def _chat(*turns: tuple[str, str]) -> list[Message]:
    return [Message(role, content) for role, content in turns]  # type: ignore[arg-type]


HISTORY = _chat(
    ("system", "You are a helpful assistant. Remember Zanzibar."),
    ("user", "When did Caroline go to the LGBTQ support group?"),
    ("assistant", "Caroline went to the support group on 7 May 2023."),
)


def test_self_contained_question_is_unchanged():
    for q in (
        "When did Melanie paint a sunrise?",
        "What did Caroline say about her mom?",  # "her" has its antecedent in the question
        "How long did it take for Jon to open his studio?",  # expletive "it", a name present
        "What are the new shoes that Melanie got used for?",  # relative "that"
        "Is Deborah married?",  # short, but names who it is about
    ):
        assert retrieval_query(q, HISTORY) == q
        assert retrieval_query(q, HISTORY) is q  # nothing built when nothing is added
        assert not needs_context(q)


def test_pronoun_follow_up_gets_the_antecedent_name_first_question_kept_first():
    q = "When did she paint a sunrise?"
    out = retrieval_query(q, HISTORY)
    assert out.startswith(q)
    assert "Caroline" in out
    # by default only the name is added, not the previous topic
    assert "LGBTQ" not in out and "support" not in out
    assert needs_context(q)
    assert retrieval_query("What did his brother give him?", HISTORY).endswith("Caroline")


def test_referent_turns_adds_the_previous_user_turn_and_optionally_the_answer():
    q = "When did she paint a sunrise?"
    out = retrieval_query(q, HISTORY, referent="turns")
    assert out == f"{q} When did Caroline go to the LGBTQ support group?"
    with_answer = retrieval_query(q, HISTORY, referent="turns", assistant=True)
    assert with_answer.startswith(out)
    assert with_answer.endswith("on 7 May 2023.")


def test_short_and_elliptical_turns_get_the_previous_turn_text():
    for q in ("Why?", "Since when?", "And Melanie?", "What about the painting class?"):
        out = retrieval_query(q, HISTORY)
        assert out == f"{q} When did Caroline go to the LGBTQ support group?", q
        assert needs_context(q)


def test_pronoun_before_any_name_is_unresolved():
    q = "What did she tell Melanie?"
    assert retrieval_query(q, HISTORY) == f"{q} Caroline"
    # a quoted title is not an antecedent
    q2 = 'What is "Little Women" about according to her?'
    assert retrieval_query(q2, HISTORY) == f"{q2} Caroline"


def test_names_most_recent_turn_first_and_max_names():
    history = _chat(
        ("user", "What did Melanie paint?"),
        ("assistant", "A sunrise."),
        ("user", "Did Caroline and Jon visit Paris?"),
        ("assistant", "Yes."),
    )
    q = "What did she bring back?"
    assert retrieval_query(q, history) == f"{q} Caroline Jon Paris"
    assert retrieval_query(q, history, max_names=1) == f"{q} Caroline"
    assert retrieval_query(q, history, user_turns=2) == f"{q} Caroline Jon Paris Melanie"


def test_always_and_never():
    q = "When did Melanie paint a sunrise?"
    prev = "When did Caroline go to the LGBTQ support group?"
    assert retrieval_query(q, HISTORY, when="always") == f"{q} {prev}"
    assert retrieval_query("Why?", HISTORY, when="never") == "Why?"
    with pytest.raises(ValueError):
        retrieval_query("Why?", HISTORY, when="sometimes")  # type: ignore[arg-type]


def test_context_is_capped_in_characters_at_a_word_boundary():
    long_turn = "Did Caroline mention " + " ".join(f"word{i}" for i in range(200)) + "?"
    history = _chat(("user", long_turn), ("assistant", "Yes."))
    q = "Why?"
    out = retrieval_query(q, history, max_chars=50)
    assert out.startswith(q + " ")
    added = out[len(q) + 1 :]
    assert len(added) <= 50
    assert long_turn.startswith(added)
    assert not added.endswith(" ")
    assert long_turn[len(added)] == " "  # cut between words
    # the question itself is never cut
    long_q = "Why " + "really " * 100 + "?"
    assert retrieval_query(long_q, HISTORY).startswith(long_q.rstrip())
    assert retrieval_query("Why?", HISTORY, max_chars=0) == "Why?"


def test_system_and_tool_messages_are_ignored():
    history = [
        Message("system", "Talk about Zanzibar."),
        Message("user", "When did Caroline go to the support group?"),
        Message("assistant", "", tool_calls=(ToolCall("c1", "lookup", "{}"),)),
        Message("tool", "Zanzibar Ltd: 42 results", tool_call_id="c1"),
        Message("assistant", "On 7 May 2023."),
        Message("system", "Mention Quito."),
    ]
    out = retrieval_query("Why?", history, assistant=True)
    assert out == "Why? When did Caroline go to the support group? On 7 May 2023."
    names = retrieval_query("When did she start?", history)
    assert names == "When did she start? Caroline"
    assert "Zanzibar" not in out + names and "Quito" not in out + names


def test_empty_or_userless_history_returns_the_question():
    for history in ([], _chat(("system", "Be brief.")), _chat(("assistant", "Hello Caroline!"))):
        assert retrieval_query("Why did she go?", history) == "Why did she go?"
        assert retrieval_query("Why?", history, when="always") == "Why?"


def test_no_name_in_the_previous_turn_adds_nothing_for_a_pronoun():
    history = _chat(("user", "what did i say about the weather?"), ("assistant", "That it rained."))
    assert retrieval_query("When did she start?", history) == "When did she start?"
    # assistant=True falls back to the names of the last answer
    history2 = _chat(("user", "who called?"), ("assistant", "Your sister Maria called."))
    assert retrieval_query("When did she call?", history2, assistant=True).endswith(" Maria")


def test_proper_names():
    assert proper_names("When did Caroline's mom meet Jon in Paris on Monday?") == ["Caroline", "Jon", "Paris"]
    assert proper_names("Caroline went home. I think Melanie's kids and the US team") == ["Melanie"]
    assert proper_names("Caroline's kids") == ["Caroline"]  # sentence-initial possessive
    assert proper_names("") == []
