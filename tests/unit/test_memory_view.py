"""What of a stored turn-pair the prompt shows: date labels (router.memory_dates) and replies."""

import pytest

from memroute.config import RouterConfig
from memroute.errors import ConfigError
from memroute.routing.memory_view import asks_stated_time, needs_date, shown_reply
from memroute.routing.prompt import (MemoryLayout, build_messages, memory_layout,
                                     select_within_budget)
from memroute.types import Memory, RetrievalHit, TurnPair

from .test_grounding import MAY_8, make


def hit(text, source_model="", mid=1, t=0):
    return RetrievalHit(Memory(mid, "alice", text, t, source_model=source_model), 1.0)


@pytest.mark.parametrize("question, asks", [
    ("Hey, what date is my vet appointment? Just checking.", True),
    ("When is my physio appointment? Do you know?", True),
    ("Quick question: when does my weekly call with my mom start?", True),
    ("At what time is the school pickup?", True),
    ("On which day is my dentist appointment?", True),
    ("When did Caroline go to the LGBTQ support group?", False),   # when it happened: labels
    ("What is my insurance claim number?", False),
    ("10 January 1986: which day of the week is that?", False),
])
def test_a_question_asking_a_stated_date_or_time(question, asks):
    assert asks_stated_time(question) is asks


def test_a_relative_time_word_needs_the_label():
    assert needs_date("[8 May 2023] Q: I went to a support group yesterday / A: Great!")
    assert needs_date("[8 May 2023] Q: We're going camping next month / A: Fun")
    assert not needs_date("[4 March 2024] Q: I booked my vet appointment for 15 March 2024. / A: Ok")


VET = hit("[4 March 2024] Q: I rescheduled the vet appointment to 9 April 2024. / A: Got it.",
          mid=1, t=1709563697)
CLAIM = hit("[4 March 2024] Q: My insurance claim number is NZ-9217. / A: NZ-9217",
            mid=2, t=1709565706)
GYM = hit("[3 March 2024] Q: I joined the gym yesterday / A: Nice!", mid=3, t=1709480248)


def block(question, dates="auto"):
    layout = MemoryLayout(dates=dates).for_question(question)
    return build_messages("sys", question, [VET, CLAIM, GYM], layout=layout)[0].content


def test_auto_drops_the_labels_a_stated_date_question_would_copy():
    text = block("Hey, what date is my vet appointment?")
    assert "[4 March 2024]" not in text           # the label the 1.5B answered with
    assert "9 April 2024" in text and "NZ-9217" in text
    assert "[3 March 2024] Q: I joined the gym yesterday" in text  # resolves "yesterday"


def test_auto_keeps_every_label_for_other_questions():
    for question in ("What is my insurance claim number?", "When did I join the gym?"):
        assert block(question).count("[") == 3
    assert block("Hey, what date is my vet appointment?", dates="all").count("[") == 3
    assert block("What is my insurance claim number?", dates="none").count("[") == 0


def test_a_stated_date_question_is_told_today_only_beside_a_dated_memory():
    # The 0.5B answered "On what day is my father's birthday?" with the "Today is" date.
    today = MemoryLayout(dates="auto", today=True)
    asked = "On what day is my vet appointment?"
    bare = build_messages("sys", asked, [VET, CLAIM], layout=today.for_question(asked),
                          now=MAY_8)[0].content
    assert "Today is" not in bare and "9 April 2024" in bare
    # "yesterday" keeps its label, and today's date stays beside it.
    dated = build_messages("sys", asked, [VET, GYM], layout=today.for_question(asked),
                           now=MAY_8)[0].content
    assert "Today is" in dated and "[3 March 2024]" in dated
    other = "What is my insurance claim number?"
    assert "Today is" in build_messages("sys", other, [VET, CLAIM],
                                        layout=today.for_question(other), now=MAY_8)[0].content


@pytest.mark.parametrize("value, mode", [(True, "all"), (False, "none"), ("false", "none"),
                                         ("relative", "relative"), ("auto", "auto")])
def test_memory_dates_takes_the_old_switch_and_the_modes(value, mode):
    assert memory_layout(RouterConfig(memory_dates=value)).dates == mode


def test_a_bad_memory_dates_names_the_setting():
    with pytest.raises(ConfigError) as e:
        memory_layout(RouterConfig(memory_dates="sometimes"))
    assert e.value.field == "router.memory_dates"


def test_a_models_reply_stating_what_the_change_did_not_is_not_shown():
    # Seed 13: the 1.5B answered the update with a date label; the 0.5B then copied it.
    wrong = Memory(1, "alice", "[2 March 2024] Q: From now on the weekly call with my mom is at "
                               "8:30 am. / A: 1 March 2024", 0, source_model="large")
    assert shown_reply(wrong) == ""
    ack = Memory(2, "alice", "[2 March 2024] Q: From now on the weekly call with my mom is at "
                             "8:30 am. / A: Got it, 8:30 am.", 0, source_model="large")
    assert shown_reply(ack) == ""              # a statement's acknowledgement: the turn is it
    plain = Memory(3, "alice", "[2 March 2024] Q: What time is the call? / A: 8:30 am", 0,
                   source_model="large")
    assert shown_reply(plain) == "8:30 am"     # a question's answer: not a change's reply
    ingested = Memory(4, "alice", "[2 March 2024] Q: I moved to Boston last week. / A: I was "
                                  "there in 2019!", 0)
    assert shown_reply(ingested) == "I was there in 2019!"   # a history's turn, not a model's


def test_a_reply_not_shown_grounds_nothing():
    # The stored update pair's reply "1 March 2024" must not let the small tier's copy through.
    update = TurnPair("alice", "s1", 0, "From now on the weekly call with my mom is at 8:30 am.",
                      "1 March 2024", MAY_8 - 86400, source_model="large")
    router, small, _ = make("1 March 2024", memories=[update])
    res = router.route("alice", "when does my weekly call with my mom start?", session_time=MAY_8)
    assert res.calls[0].grounded is False and res.decision.answered_tier == 1
    prompt = small.prompts[0][0].content
    assert "8:30 am" in prompt and "1 March 2024" not in prompt


def test_a_models_reply_to_a_statement_of_fact_is_not_shown():
    # Seed 17: the 0.5B acknowledged a locker code with a name from its memory block, and a
    # later question about an eye exam got that name back. Stop 48: acknowledgements in full
    # sentences became the answer style of the questions.
    def memory(q, a, model="small"):
        return Memory(1, "alice", f"[2 March 2024] Q: {q} / A: {a}", 0, source_model=model)

    note = "Note this down: my locker code is ZY-1685."
    assert shown_reply(memory(note, "Octavia Castellano")) == ""
    assert shown_reply(memory("For the record, the claim number is 88-1204.", "CL-5530")) == ""
    assert shown_reply(memory(note, "Got it, ZY-1685.")) == ""
    assert shown_reply(memory("We set the travel budget at $17,000.",
                              "The travel budget was set at $17,000.")) == ""
    assert shown_reply(memory(note, "Octavia Castellano", model="")) == "Octavia Castellano"
    # a task's reply is the work a later step reads, values and all
    task = "Draft a short message to my landlord about the rent of $1,200."
    draft = "Dear Mr Smith, the rent of $1,200 will be paid on 1 May."
    assert shown_reply(memory(task, draft)) == draft
    step = "Step 2: Extract the invoice total from the contract of Alder Corp."
    assert shown_reply(memory(step, "INV-204: $5,300")) == "INV-204: $5,300"
    asked = "What is my locker code?"
    assert shown_reply(memory(asked, "Octavia Castellano")) == "Octavia Castellano"
    line = MemoryLayout().line(hit(f"[2 March 2024] Q: {note} / A: Octavia Castellano", "small"))
    assert line == f"- [2 March 2024] Q: {note}"


def test_a_datasets_reply_to_a_statement_is_shown():
    # LoCoMo's pairs are two people talking (source_model "dataset"): the second speaker's
    # reply is part of the record, whatever values it adds.
    talk = Memory(1, "conv-26", "[8 May 2023] Q: Caroline: I went to the support group on "
                                "7 May. / A: Melanie: I painted a sunrise in 2022!", 0,
                  source_model="dataset")
    assert shown_reply(talk) == "Melanie: I painted a sunrise in 2022!"


def test_a_models_reply_echoing_the_memory_block_is_not_shown():
    # Seed 17: the 0.5B answered "My sister moved again, to Tbilisi this time." with a line of
    # its memory block, another pair's question included.
    echo = "[3 March 2024] Q: Can you remind me: where does my sister live? / A: Tbilisi"
    moved = "My sister moved again, to Tbilisi this time."

    def memory(a, model="small", q=moved):
        return Memory(1, "alice", f"[4 March 2024] Q: {q} / A: {a}", 0, source_model=model)

    assert shown_reply(memory(echo)) == ""
    assert shown_reply(memory(echo, q="Where does my sister live?")) == ""
    assert shown_reply(memory("[5 March 2024] Q: Note this down: my mailbox code")) == ""
    assert shown_reply(memory("Tbilisi", q="Where does my sister live?")) == "Tbilisi"
    asked = "Where does my sister live?"
    assert shown_reply(memory(echo, "dataset", asked)) == echo   # people may quote
    line = MemoryLayout().line(hit(f"[4 March 2024] Q: {moved} / A: {echo}", "small"))
    assert line == f"- [4 March 2024] Q: {moved}"


def test_a_question_whose_reply_is_hidden_is_left_out_of_the_block():
    def pair(i, q, a="Tbilisi", model="small"):
        return hit(f"[{i} March 2024] Q: {q} / A: {a}", model, mid=i, t=i)

    bare = pair(1, "Sorry, I forgot: which city does my sister live in? I keep forgetting.")
    stated = pair(2, "My sister moved again, to Tbilisi this time.", "Noted")
    mixed = pair(3, "My gym raised my membership to $45. Is it still worth it?", "Yes")
    strong = pair(4, "Which city does my sister live in?", model="large")
    echo = pair(5, "Where does my sister live?", "[1 March 2024] Q: Where is she? / A: Lyon",
                model="large")
    hits = [bare, stated, mixed, strong, echo]
    escalation = MemoryLayout(replies_hidden_from=frozenset({"small"}))
    kept = select_within_budget(hits, 1000, lambda t: len(t.split()), escalation)
    assert kept == [stated, mixed, strong]                    # bare question and echo left out
    assert select_within_budget(hits, 1000, lambda t: len(t.split())) == [bare, stated, mixed,
                                                                          strong]
