"""router.read_echoes: an answer that copies a memory line is read as what the line says."""

import pytest

from memroute.accounting.cost import Pricing
from memroute.config import RetrievalConfig, RouterConfig
from memroute.routing.echo import answer_in_echo, read_echo
from memroute.routing.request import RouteRequest
from memroute.routing.router import Router, Tier
from memroute.types import ModelReply, ToolCall, TurnPair

from .fakes import FakeBackend, FakeRetriever

MAY_8 = 1715126400  # 2024-05-08
GATE = "Remind me of my building gate code. I keep forgetting."


@pytest.mark.parametrize("copy, answer", [
    # a statement of the user's: its one code the question does not name
    ("[1 March 2024] Q: The code for my gate is UB-3795, just so you know. / A", "UB-3795"),
    ("- [15 March 2024] Q: My building gate code is UB-3795.", "UB-3795"),
    # a question's line: the reply it shows
    ("[16 March 2024] Q: What code opens my gate? / A: UB-3795", "UB-3795"),
    ("Q: Which city does my sister live in? / A: Tbilisi", "Tbilisi"),
    # a statement holding no code, or two: the statement
    ("Q: We set the wedding budget at $42,000.", "We set the wedding budget at $42,000."),
    ("[2 May 2024] Q: Gate UB-3795, garage GR-1100. / A: Noted.", "Gate UB-3795, garage GR-1100."),
])
def test_a_copied_line_answers_with_what_it_says(copy, answer):
    assert answer_in_echo(copy, GATE) == answer


@pytest.mark.parametrize("text", [
    "UB-3795",
    "The code is UB-3795.",
    "- [2 March 2024] Q: What is my gate code? / A:",  # a question, no reply: nothing to read
    "Q: My gate code is UB-3795.\n- Q: My garage code is GR-1100.",  # several lines
    "Quote: the Q: in the memo",
])
def test_an_answer_that_copies_no_line_or_nothing_readable_is_left_alone(text):
    assert answer_in_echo(text, GATE) == text


def test_the_question_s_own_code_is_not_the_answer():
    copy = "Q: The code AB-1 replaced XY-9 on my gate."
    assert answer_in_echo(copy, "What replaced code AB-1?") == "XY-9"


def test_a_tool_call_is_left_as_it_is():
    call = ToolCall(id="c1", name="search", arguments="{}")
    reply = ModelReply("Q: My gate code is UB-3795.", "small", [-0.1], 5, 1, tool_calls=[call])
    assert read_echo(reply, GATE) is reply


def test_a_reply_cut_at_max_tokens_is_left_as_it_is():
    cut = "[24 March 2024] Q: Remind me of my office door code. / A: NG"
    reply = ModelReply(cut, "large", [-0.1] * 12, 40, 12, finish_reason="length")
    assert read_echo(reply, GATE) is reply
    assert read_echo(ModelReply(cut, "large", [-0.1] * 12, 40, 12), GATE).text == "NG"


def test_a_reply_whose_tokens_the_client_sees_is_left_as_it_is():
    copy = "[8 May 2024] Q: My building gate code is UB-3795."
    reply = ModelReply(copy, "small", [-0.1] * 3, 40, 3, token_texts=copy.split(" ", 2))
    assert read_echo(reply, GATE) is reply


def make(read_echoes, copy):
    small = FakeBackend("small", answer=copy, logprob=-0.05)
    large = FakeBackend("large", answer="UB-3795", logprob=-0.05)
    retriever = FakeRetriever()
    retriever.remember([TurnPair("alice", "s1", 0, "My building gate code is UB-3795.", "Noted.",
                                 MAY_8)])
    router = Router([Tier("small", small, Pricing(0.5)), Tier("large", large, Pricing(8.0))],
                    RouterConfig(tau=0.5, store_answers=False, read_echoes=read_echoes),
                    RetrievalConfig(top_k=3, probe_token_budget=512, token_budget=512), retriever)
    return router


def test_the_router_judges_and_returns_what_the_copy_says():
    copy = "[8 May 2024] Q: My building gate code is UB-3795."
    res = make(True, copy).route("alice", GATE, session_time=MAY_8 + 86400)
    assert res.decision.answered_tier == 0 and res.answer == "UB-3795"
    assert res.calls[0].answer == "UB-3795" and res.calls[0].grounded is True
    assert res.calls[0].output_tokens == len(copy.split())  # what it generated is what it costs
    # Off: the copy is judged as it is; the gate reads no source in a whole line, so it escalates.
    res = make(False, copy).route("alice", GATE, session_time=MAY_8 + 86400)
    assert res.decision.answered_tier == 1 and res.calls[0].answer == copy


def test_a_copy_of_a_line_the_tier_may_not_read_from_still_escalates():
    # The copied reply's value is in no trusted source: read, it is ungrounded as before.
    copy = "[8 May 2024] Q: What is my gate code? / A: ZZ-0000"
    res = make(True, copy).route("alice", GATE, session_time=MAY_8 + 86400)
    assert res.decision.answered_tier == 1 and res.calls[0].answer == "ZZ-0000"
    assert res.calls[0].grounded is False


def test_a_failure_reading_one_copy_fails_that_request_alone(monkeypatch):
    import memroute.routing.router as router_module

    def read(reply, question):
        if "poison" in question:
            raise RuntimeError("cannot read")
        return read_echo(reply, question)

    monkeypatch.setattr(router_module, "read_echo", read)
    router = make(True, "[8 May 2024] Q: My building gate code is UB-3795.")
    out = router.route_each([RouteRequest("alice", GATE, session_time=MAY_8 + 86400),
                             RouteRequest("alice", f"{GATE} poison", session_time=MAY_8 + 86400)])
    assert out[0].answer == "UB-3795"
    assert isinstance(out[1], RuntimeError)
