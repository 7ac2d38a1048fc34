"""router.grounding: a lower tier's answer must be read from a trusted source, not sound sure."""

import pytest

from memroute.accounting.cost import Pricing
from memroute.config import RetrievalConfig, RouterConfig
from memroute.errors import ConfigError
from memroute.routing.grounding import client_texts, grounded, on_subject, sources, subject_words
from memroute.routing.router import Router, Tier
from memroute.text.answers import holds_value
from memroute.types import Memory, Message, RetrievalHit, TurnPair

from .fakes import FakeBackend, FakeRetriever

MAY_8 = 1715126400  # 2024-05-08


def hit(text, source_model="", mid=1):
    return RetrievalHit(Memory(mid, "alice", text, 0, source_model=source_model), 1.0)


def test_the_memorys_date_label_is_no_source_for_a_date():
    # The shadow log's case: the 0.5B answered with the label of the memory it was shown.
    hits = [hit("[1 March 2024] Q: My dentist appointment is on 8 May 2024. / A: Noted!")]
    texts = sources(hits, untrusted_models=())
    assert grounded("1 March 2024", texts, 0.5) is False
    assert grounded("8 May 2024", texts, 0.5) is True
    assert grounded("It is on 8 May 2024.", texts, 0.5) is True


def test_an_answer_of_the_questions_own_words_is_an_echo():
    # seed 24: "Rabbit" for "what's our rabbit called?" was accepted, the statement holding
    # "rabbit"; the 2,000-request trace: "10 days" for a count of days, both wrong.
    texts = ["We named our new rabbit Sprocket."]
    asked = "One more thing: what's our rabbit called? I keep forgetting."
    assert grounded("Rabbit", texts, 0.5) is True  # without the question: read
    assert grounded("Rabbit", texts, 0.5, question=asked) is False
    assert grounded("Sprocket", texts, 0.5, question=asked) is True
    assert grounded("10 days", ["10 days"], 0.5,
                    question="Count the days from 9 September 2021 to 10 January 2022.") is False
    assert grounded("Yes.", texts, 0.5, question=asked) is None  # nothing to check


def test_a_year_cut_from_a_date_is_not_read():
    # seed 30: "2024" for "When is my doctor appointment?", shown "A: 9 May 2024", accepted
    # 11 times and copied by the repeats.
    texts = sources([hit("[1 March 2024] Q: I booked my doctor appointment for 9 May 2024. / "
                         "A: Noted.")], untrusted_models=())
    assert grounded("2024", texts, 0.5) is False
    assert grounded("9 May 2024", texts, 0.5) is True
    assert grounded("2024", ["Appointment: May 9, 2024", "on 2024-05-09"], 0.5) is False
    # a year the text says on its own, or a number that is no year, is read as before
    assert grounded("2024", ["We moved to Lisbon in 2024, on 9 May 2024."], 0.5) is True
    assert grounded("$1,500", ["The budget is $1,500."], 0.5) is True
    # a month is a month's name, not any word starting like one ("markets", "decades")
    assert grounded("2024", ["We opened 9 markets 2024 alone."], 0.5) is True
    assert grounded("2024", ["Renewed on 9 Sept. 2024."], 0.5) is False


def test_an_iso_date_reads_as_the_date_it_writes():
    # seed 31: the 0.5B's "2024-04-09" for "9 April 2024" was escalated as unread.
    texts = ["I booked my doctor appointment for 9 April 2024."]
    assert grounded("2024-04-09", texts, 0.5) is True
    assert grounded("2024-04-19", texts, 0.5) is False
    assert grounded("2024-13-09", texts, 0.5) is False  # no month 13: numbers, not a date
    assert holds_value("On 2024-04-09.", ["9 April 2024"]) is True


def test_a_month_cut_from_a_date_is_not_read():
    # seed 38: "May 2024" for "When is my car service appointment?", shown "9 May 2024",
    # accepted twice; "May" for a birthday on "9 May" once.
    texts = ["I booked the car service for 9 May 2024.", "My grandmother's birthday is 9 May."]
    assert grounded("May 2024", texts, 0.5) is False
    assert grounded("May", texts, 0.5) is False
    assert grounded("9 May 2024", texts, 0.5) is True
    assert grounded("May 9th", texts, 0.5) is True
    # a month the text says on its own is read as before
    assert grounded("May", ["We moved the wedding to May."], 0.5) is True
    assert grounded("May 2024", ["The launch is in May 2024."], 0.5) is True


def test_a_date_s_month_must_be_read_too():
    # seed 35: "2024-12-12" for "12 April 2024" held the day and the year, 2 of its 3 terms.
    texts = ["I booked my car service appointment for 12 April 2024."]
    assert grounded("2024-12-12", texts, 0.5) is False
    assert grounded("12 December 2024", texts, 0.5) is False
    assert grounded("12 April 2024", texts, 0.5) is True
    assert grounded("April 12", texts, 0.5) is True


def test_the_verb_may_names_no_month():
    # A source that writes its date in digits names no month to hold the answer to; "may" as a
    # verb does not make it name one, and "May" beside a day or a year does.
    verb = ["I may fly out on 8/5/2024."]
    assert grounded("5 August 2024", verb, 0.5) is True
    assert grounded("5 August 2024", ["I fly out on 8/5/2024."], 0.5) is True
    month = ["I fly out on 8 May 2024."]
    assert grounded("8 August 2024", month, 0.5) is False
    assert grounded("8 May 2024", month, 0.5) is True
    # nor does the verb in an answer claim the month of May
    assert grounded("You may go on 12 April 2024.", ["My visit is on 12 April 2024."], 0.5) is True


def test_every_number_must_come_from_one_source():
    texts = ["My car budget is $37,000.", "I bought the car in 2019."]
    assert grounded("Your car budget is $37,000.", texts, 0.5) is True
    # each number is somewhere, but no one source holds both: a stitched answer is not read
    assert grounded("$37,000 in 2019", texts, 0.5) is False
    assert grounded("Your car budget is $38,000.", texts, 0.5) is False


def test_the_questions_own_words_are_no_claim():
    # 2,000-request trace: "59 squared is 3481." was escalated, each turn of "Q: What is 59
    # squared? / A: 3481" holding only one of its numbers; the 59 is what the user asked.
    stored = hit("[12 March 2024] Q: What is 59 squared? / A: 3481", source_model="large")
    asked = "Can you remind me: what's the square of 59? Thanks!"
    texts = sources([stored], untrusted_models=("small",), question=asked, closest=True)
    assert grounded("59 squared is 3481.", texts, 0.5) is False      # without the question
    assert grounded("59 squared is 3481.", texts, 0.5, question=asked) is True
    assert grounded("59 squared is 3418.", texts, 0.5, question=asked) is False
    assert grounded("61 squared is 3481.", texts, 0.5, question=asked) is False  # 61: a claim
    # what the question did not supply must still come from one source
    cars = ["My car budget is $37,000.", "I bought the car in 2019."]
    assert grounded("$37,000 in 2019", cars, 0.5, question="What is my car budget?") is False


def test_the_share_of_words_one_source_must_hold():
    texts = ["My sister Maya lives in Lisbon."]
    assert grounded("Maya lives in Lisbon.", texts, 0.5) is True
    assert grounded("Maya moved to Porto with her partner Joao.", texts, 0.5) is False
    assert grounded("Maya moved to Porto with her partner Joao.", texts, 0.0) is True


@pytest.mark.parametrize("answer, stated", [
    ("August 20th", "My grandmother's birthday is 20 August."),
    ("10:45am", "Yoga starts at 10:45 every Tuesday."),
    ("2:30 PM", "School pickup is at 2:30."),
    ("$38,000", "We set the wedding budget at 38000 dollars."),
    ("Oct 4", "Dad's birthday is on 4 October."),
    ("2024-05-08", "The appointment is on 8/5/2024."),
])
def test_a_value_in_another_format_is_the_same_value(answer, stated):
    assert grounded(answer, [stated], 0.5) is True


def test_a_different_number_in_the_same_format_is_not():
    assert grounded("August 21st", ["My grandmother's birthday is 20 August."], 0.5) is False
    assert grounded("10:15am", ["Yoga starts at 10:45 every Tuesday."], 0.5) is False


def test_an_answer_with_no_kept_word_is_not_judged():
    assert grounded("Yes.", ["anything"], 0.5) is None
    assert grounded("", [], 0.5) is None


def test_only_a_stronger_tiers_stored_answer_is_evidence():
    # What the small tier (or one as cheap) said before is what a wrong answer would have left.
    own = hit("[1 May 2024] Q: what is 5 % of 840? / A: 420", source_model="small")
    stronger = hit("[2 May 2024] Q: what is 5 % of 840? / A: 42", source_model="large", mid=2)
    ingested = hit("[3 May 2024] Q: my locker? / A: Locker 2291, noted.", mid=3)
    texts = sources([own, stronger, ingested], untrusted_models={"small"})
    assert grounded("420", texts, 0.5) is False
    assert grounded("42", texts, 0.5) is True
    assert grounded("2291", texts, 0.5) is True  # no model wrote it: an ingested history
    # the user's own turn is always a source, whoever answered it
    assert "what is 5 % of 840?" in texts


def test_a_stored_answer_grounds_only_a_question_on_its_subject():
    # Seed 11's shadow log: "5106", the large tier's answer to "What is 63 x 82?", grounded the
    # small tier's "5106" as a renovation budget.
    product = hit("[2 May 2024] Q: What is 63 x 82? / A: 5106", source_model="large")
    budget = hit("[3 May 2024] Q: What's my renovation budget? / A: 12000 euros",
                 source_model="large", mid=2)
    hits = [product, budget]
    for_budget = sources(hits, {"small"}, question="Remind me what my renovation budget is.")
    assert grounded("5106", for_budget, 0.5) is False
    assert grounded("12000 euros", for_budget, 0.5) is True  # shares "renovation", "budget"
    for_product = sources(hits, {"small"}, question="Compute 63 times 82.")
    assert grounded("5106", for_product, 0.5) is True  # the numbers are its subject
    assert grounded("12000 euros", for_product, 0.5) is False
    # an ingested history's turns are statements, not answers to a question: always sources
    ingested = hit("[1 May 2024] Q: How was the trip? / A: We paid 5106 for the flights.", mid=3)
    assert grounded("5106", sources([ingested], {"small"}, question="My budget?"), 0.5) is True


def test_asking_words_are_no_subject():
    assert subject_words("Tell me again: what do I need to remember about my car?") == {"car"}
    assert subject_words("Remind me what my renovation budget is.") == {"renov", "budget"}
    assert subject_words("How much is 29 multiplied by 43?") >= {"29", "43"}


def test_the_filler_a_question_is_wrapped_in_is_no_subject():
    # The trace's wrappers made every wrapped question "on the subject" of every other one.
    assert subject_words("Quick question: what is my gate code? I keep forgetting.") == {
        "gate", "code"}
    wrapped = hit("[1 May 2024] Q: Sorry, I forgot: what is my locker number? Just checking. / "
                  "A: 41", source_model="large")
    assert on_subject([wrapped], "Quick question: how old is my cat? Thanks!") == []
    assert on_subject([wrapped], "Hey, which locker is mine?") == [wrapped]


def test_the_clients_turns_and_tool_results_are_sources():
    history = [Message("user", "Book the table for 7 pm.")]
    tail = [Message("tool", '{"confirmation": "QX-4417"}')]
    texts = sources([], (), client_texts(history, tail))
    assert grounded("Your confirmation is QX-4417.", texts, 0.5) is True
    assert grounded("7 pm", texts, 0.5) is True


# -- in the router -------------------------------------------------------------------------------


def make(small_answer, grounding="memory", memories=(), small_model="small"):
    small = FakeBackend(small_model, answer=small_answer, logprob=-0.05)  # c ~ 0.98: confident
    large = FakeBackend("large", answer="8 May 2024", logprob=-0.05)
    retriever = FakeRetriever()
    retriever.remember(list(memories))
    router = Router(
        [Tier("small", small, Pricing(0.5)), Tier("large", large, Pricing(8.0))],
        RouterConfig(tau=0.5, grounding=grounding, store_answers=True),
        RetrievalConfig(top_k=5, probe_token_budget=256, token_budget=512),
        retriever,
    )
    return router, small, large


APPOINTMENT = TurnPair("alice", "s1", 0, "My dentist appointment is on 8 May 2024.", "Noted!",
                       MAY_8 - 60 * 86400)


def test_a_confident_answer_read_from_nowhere_escalates():
    router, _, large = make("1 March 2024", memories=[APPOINTMENT])
    res = router.route("alice", "when is my dentist appointment?", session_time=MAY_8 - 86400)
    assert res.decision.answered_tier == 1 and res.answer == "8 May 2024"
    small_call = res.calls[0]
    assert small_call.confidence > 0.9 and not small_call.accepted
    assert small_call.grounded is False
    # with grounding off the same confident answer is kept: the confidence rule alone
    router, _, large = make("1 March 2024", grounding="off", memories=[APPOINTMENT])
    res = router.route("alice", "when is my dentist appointment?", session_time=MAY_8 - 86400)
    assert res.decision.answered_tier == 0 and res.calls[0].grounded is None


def test_a_grounded_confident_answer_stays_on_the_small_tier():
    router, _, large = make("8 May 2024.", memories=[APPOINTMENT])
    res = router.route("alice", "when is my dentist appointment?", session_time=MAY_8 - 86400)
    assert res.decision.answered_tier == 0 and res.calls[0].grounded is True
    assert not large.prompts


def test_the_router_escalates_an_echo_of_the_question():
    rabbit = TurnPair("alice", "s1", 0, "We named our new rabbit Sprocket.", "Noted!",
                      MAY_8 - 60 * 86400)
    router, _, large = make("Rabbit", memories=[rabbit])
    res = router.route("alice", "what's our rabbit called?", session_time=MAY_8 - 86400)
    assert res.calls[0].grounded is False and res.decision.answered_tier == 1


def test_the_large_tiers_stored_answer_lets_the_small_one_answer_the_repeat():
    # Amortization through the router's own write path: the first time only the large tier's
    # answer is kept and stored; it then grounds the small tier's answer to the repeat.
    router, _, large = make("42")
    large.answer = "42"
    first = router.route("alice", "what is 5 % of 840?", session_time=MAY_8)
    assert first.decision.answered_tier == 1 and first.calls[0].grounded is False
    again = router.route("alice", "what is 5 % of 840?", session_time=MAY_8 + 60)
    assert again.decision.answered_tier == 0 and again.calls[0].grounded is True
    assert len(large.prompts) == 1


def test_the_large_tiers_answer_to_another_question_is_no_evidence():
    product = TurnPair("alice", "s1", 0, "What is 63 x 82?", "5106", MAY_8, source_model="large")
    router, _, large = make("5106", memories=[product])
    res = router.route("alice", "what is my renovation budget?", session_time=MAY_8 + 60)
    assert res.decision.answered_tier == 1 and res.calls[0].grounded is False
    res = router.route("alice", "compute 63 times 82", session_time=MAY_8 + 120)
    assert res.decision.answered_tier == 0 and res.calls[0].grounded is True


def test_a_users_question_on_another_subject_is_no_evidence():
    # Seed 15: the 0.5B answered "What date is my grandmother's birthday?" with the date of a
    # weekday question the user had asked; the question held the date, not the birthday.
    weekday = hit("[3 March 2024] Q: 24 January 2029: which day of the week is that? / A: Wednesday")
    texts = sources([weekday], (), question="What date is my grandmother's birthday?")
    assert grounded("24 January 2029", texts, 0.5) is False
    texts = sources([weekday], (), question="What day of the week is 24 January 2029?")
    assert grounded("24 January 2029", texts, 0.5) is True
    said = hit("[3 March 2024] Q: My grandmother's birthday is on 6 December. Any gift ideas?")
    texts = sources([said], (), question="What is my car budget?")
    assert grounded("6 December", texts, 0.5) is False   # a statement too: seed 18's RS-7316
    texts = sources([said], (), question="When is my grandmother's birthday?")
    assert grounded("6 December", texts, 0.5) is True


def test_the_small_tiers_own_stored_answer_is_no_evidence_for_it():
    stored = TurnPair("alice", "s1", 0, "what is 5 % of 840?", "420", MAY_8, source_model="small")
    router, _, large = make("420", memories=[stored])
    res = router.route("alice", "what is 5 % of 840?", session_time=MAY_8 + 60)
    assert res.decision.answered_tier == 1 and res.calls[0].grounded is False


def test_a_request_without_a_question_mark_is_gated_too():
    router, _, _ = make("7056")
    res = router.route("alice", "One more thing: compute 84 to the power of 2. Thanks!")
    assert res.decision.answered_tier == 1 and res.calls[0].grounded is False


def test_a_statement_is_not_gated():
    router, _, large = make("Got it, 8 June then.", memories=[APPOINTMENT])
    res = router.route("alice", "My dentist moved the appointment to 8 June 2024.",
                       session_time=MAY_8)
    assert res.decision.answered_tier == 0 and res.calls[0].grounded is None
    assert not large.prompts


def test_the_last_tier_is_recorded_but_never_refused():
    router, _, large = make("1 March 2024", memories=[APPOINTMENT])
    large.answer = "Sometime in spring."
    res = router.route("alice", "when is my dentist appointment?", session_time=MAY_8 - 86400)
    assert res.decision.answered_tier == 1 and res.answer == "Sometime in spring."
    assert res.calls[1].accepted and res.calls[1].grounded is False


@pytest.mark.parametrize("field, value", [("grounding", "retrieval"), ("grounding_share", 1.5),
                                          ("escalation_memories", "some"),
                                          ("first_tier_memories", "subject_only")])
def test_a_bad_grounding_setting_names_its_field(field, value):
    with pytest.raises(ConfigError) as e:
        Router([Tier("small", FakeBackend("small"), Pricing(0.5))],
               RouterConfig(**{field: value}), RetrievalConfig(), FakeRetriever())
    assert e.value.field == f"router.{field}"


def test_the_response_and_the_replay_row_say_the_gate_refused():
    from memroute.api.responses import memroute_report
    from memroute.eval.replay.outcome import TierPrice, from_memroute_report, from_route_result

    router, _, _ = make("1 March 2024", memories=[APPOINTMENT])
    res = router.route("alice", "when is my dentist appointment?", session_time=MAY_8 - 86400)
    report = memroute_report(res)
    verdicts = [(c["accepted"], c["grounded"]) for c in report["calls"]]
    assert verdicts == [(False, False), (True, True)]
    prices = [TierPrice(0.5, 8.0), TierPrice(8.0, 235.0)]
    assert from_route_result(res, prices, [0, 1]).ungrounded
    assert from_memroute_report(res.answer, report, prices).ungrounded
    router, _, _ = make("8 May 2024", memories=[APPOINTMENT])
    res = router.route("alice", "when is my dentist appointment?", session_time=MAY_8 - 86400)
    assert not from_route_result(res, prices, [0, 1]).ungrounded


def test_a_bare_yaml_off_gets_told_to_quote_it():
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RouterConfig),
                                              OmegaConf.create("grounding: off")))
    with pytest.raises(ConfigError, match='write "off"'):
        Router([Tier("small", FakeBackend("small"), Pricing(0.5))], cfg, RetrievalConfig(),
               FakeRetriever())


def test_a_code_must_be_read_whole():
    # Seed 17: the 0.5B answered "NQ-1391" for the ticket stated as "NJ-1391"; the number alone
    # was in the source.
    texts = ["My support ticket number is NJ-1391."]
    assert grounded("NQ-1391", texts, 0.5) is False
    assert grounded("nj-1391", texts, 0.5) is True
    assert grounded("It's NJ-1391.", texts, 0.5) is True
    assert grounded("2024-05-08", ["The appointment is on 8/5/2024."], 0.5) is True  # a date


def test_a_date_question_is_not_on_the_subject_of_another_days_question():
    # Seed 17: "26 January 2027" for the car service, read from a day-count question.
    count = hit("[2 March 2024] Q: Count the days from 9 October 2026 to 26 January 2027. / "
                "A: 109 days", source_model="large")
    booked = hit("[3 March 2024] Q: I booked my car service appointment for 4 May 2024. / A: Noted",
                 source_model="small", mid=2)
    texts = sources([count, booked], {"small"}, question="On which day is my car service appointment?")
    assert grounded("26 January 2027", texts, 0.5) is False
    assert grounded("4 May 2024", texts, 0.5) is True


def test_an_escalation_does_not_see_the_cheaper_tiers_replies():
    # Seed 18: the 0.5B's "RS-7316" (a gate code) for the emergency fund target was stored, and
    # the 1.5B, asked because the 0.5B was unsure the next time, copied it from that memory.
    wrong = TurnPair("alice", "s1", 0, "How much is the emergency fund target?", "RS-7316",
                     MAY_8 - 86400, source_model="small")
    fund = TurnPair("alice", "s1", 1, "What did we set the emergency fund target at?",
                    "$39,500", MAY_8 - 2 * 86400, source_model="large")
    router, small, large = make("I am not sure", memories=[wrong, fund])
    small.logprob = -3.0  # unsure: escalates
    res = router.route("alice", "Remind me, how much is the emergency fund target?",
                       session_time=MAY_8)
    assert res.decision.answered_tier == 1
    assert "RS-7316" in small.prompts[0][0].content        # the small tier sees its own reply
    escalation = large.prompts[0][0].content
    assert "RS-7316" not in escalation
    assert "How much is the emergency fund target?" not in escalation  # a bare question: left out
    assert "target at? / A: $39,500" in escalation           # a stronger tier's reply stays
    router.cfg.cheaper_replies = True
    router.route("alice", "Remind me, how much is the emergency fund target?", session_time=MAY_8)
    assert "RS-7316" in large.prompts[1][0].content


def test_an_escalation_reads_only_memories_on_the_questions_subject():
    sister = TurnPair("alice", "s1", 0, "My sister is in Tbilisi now.", "Noted", MAY_8 - 86400,
                      source_model="large")
    squared = TurnPair("alice", "s1", 1, "What is 76 squared?", "5776", MAY_8 - 3600,
                       source_model="large")
    router, small, large = make("I am not sure", memories=[sister, squared])
    small.logprob = -3.0  # unsure: escalates
    router.cfg.escalation_memories = router.cfg.first_tier_memories = "all"
    router.route("alice", "What is 76 squared?", session_time=MAY_8)
    assert "Tbilisi" in small.prompts[0][0].content          # "all": the probe reads everything
    assert "Tbilisi" in large.prompts[0][0].content          # "all": so does the escalation
    router.cfg.escalation_memories = "subject"               # the default
    router.route("alice", "What is 76 squared?", session_time=MAY_8 + 60)
    escalation = large.prompts[-1][0].content
    assert "76 squared" in escalation and "Tbilisi" not in escalation
    router.route("alice", "Which city does my sister live in?", session_time=MAY_8 + 120)
    escalation = large.prompts[-1][0].content
    assert "Tbilisi" in escalation and "76 squared" not in escalation


def test_the_first_tier_reads_only_memories_on_the_subject():
    rabbit = TurnPair("alice", "s1", 0, "Our rabbit is called Fennel.", "Noted", MAY_8 - 86400,
                      source_model="large")
    hamster = TurnPair("alice", "s1", 1, "What is our hamster called?", "Waffles", MAY_8 - 3600,
                       source_model="large")
    router, small, _ = make("Fennel", memories=[rabbit, hamster])
    router.route("alice", "What is my rabbit's name?", session_time=MAY_8)
    probe = small.prompts[0][0].content                      # the default: "subject"
    assert "Fennel" in probe and "Waffles" not in probe
    router.cfg.first_tier_memories = "all"
    router.route("alice", "What is my rabbit's name?", session_time=MAY_8 + 60)
    assert "Waffles" in small.prompts[-1][0].content


def test_the_same_question_of_another_thing_is_not_read():
    # seed 31: "Krakow" for "Where does my cousin live?", read off the grandfather's question.
    grandpa = hit("[2 May 2024] Q: Where does my grandfather live? / A: Krakow",
                  source_model="large", mid=1)
    moved = hit("[3 May 2024] Q: My cousin just moved to Busan. / A: Noted", mid=2,
                source_model="large")
    cousin = hit("[4 May 2024] Q: Quick question: where does my cousin live? / A: Busan",
                 source_model="small", mid=3)
    said = hit("[1 May 2024] Q: Where does your grandfather live? / A: Krakow", mid=4)
    assert on_subject([grandpa, moved, cousin, said], "Where does my cousin live?") == [
        moved, cousin, said]  # a dataset's turn is the speaker's own words: kept
    # a reworded copy of the same question stays when it names nothing of its own
    code = hit("[2 May 2024] Q: What's the code for my mailbox? / A: TW-5432",
               source_model="large")
    assert on_subject([code], "Which code opens my mailbox?") == [code]
    # numbers decide for a question that has them
    product = hit("[2 May 2024] Q: What's the product of 34 and 53? / A: 1802",
                  source_model="large")
    assert on_subject([product], "Can you remind me: what is 34 times 53?") == [product]
    assert on_subject([product], "What is 37 times 53?") == []


def test_closest_grounding_reads_only_the_statement_closest_to_the_question():
    garage = TurnPair("alice", "s1", 0, "My garage door code is YC-4149.", "Noted",
                      MAY_8 - 2 * 86400, source_model="large")
    gate = TurnPair("alice", "s1", 1, "I changed my building gate code, it's EJ-9569 now.",
                    "Noted", MAY_8 - 86400, source_model="large")
    router, _, large = make("EJ-9569", memories=[garage, gate])
    question = "Which code opens my garage door?"
    router.cfg.grounding = "memory"
    res = router.route("alice", question, session_time=MAY_8)
    assert res.decision.answered_tier == 0           # "memory": the gate's "code" grounds it
    router.cfg.grounding = "closest"                 # the default
    res = router.route("alice", question, session_time=MAY_8 + 60)
    assert res.decision.answered_tier == 1 and res.calls[0].grounded is False
    router.retriever.pairs = [garage, gate]          # the escalation's stored answer left out
    router.tiers[0].backend.answer = "YC-4149"
    res = router.route("alice", question, session_time=MAY_8 + 120)
    assert res.decision.answered_tier == 0 and res.calls[0].grounded is True


def test_closest_prefers_the_source_naming_the_questions_own_thing():
    # seed 35: each source shares one subject word ("live", "cousin"); "Boise" was read.
    friend = hit("[4 April 2024] Q: My best friend lives in Boise. / A: Noted.", "small", 1)
    cousin = hit("[9 March 2024] Q: My cousin moved again, to Porto this time. / A: Noted.",
                 "small", 2)
    question = "Hey, where does my cousin live? Thanks!"
    texts = sources([friend, cousin], {"small"}, question=question, closest=True)
    assert texts == ["My cousin moved again, to Porto this time."]
    assert grounded("Boise", texts, 0.5, question) is False
    assert grounded("Porto", texts, 0.5, question) is True
    # without the closest rule both stay sources
    assert len(sources([friend, cousin], {"small"}, question=question)) == 2


def test_closest_reads_the_thing_an_adjective_stands_before():
    # "my old roommate" is the roommate: read as "old", it ranked first a source on "my old
    # neighbour" that also shares "live", and "Salzburg" held for the roommate's city.
    neighbour = hit("[4 April 2024] Q: My old neighbour lives in Salzburg. / A: Noted.", "small", 1)
    roommate = hit("[9 March 2024] Q: My roommate moved to Bergen. / A: Noted.", "small", 2)
    question = "Which city does my old roommate live in?"
    texts = sources([neighbour, roommate], {"small"}, question=question, closest=True)
    assert texts == ["My roommate moved to Bergen."]
    assert grounded("Salzburg", texts, 0.5, question) is False


def test_closest_breaks_a_tie_by_the_words_a_source_adds():
    # seed 37: each statement shares two subject words with the question; "22,500" was read.
    car = hit("[11 March 2024] Q: We set the car budget at $22,500. / A: Noted.", "small", 1)
    renovation = hit("[8 March 2024] Q: Our renovation budget is $39,000. / A: Noted.", "small", 2)
    question = "What did we set the renovation budget at? I keep forgetting."
    texts = sources([car, renovation], {"small"}, question=question, closest=True)
    assert texts == ["Our renovation budget is $39,000."]
    assert grounded("22,500", texts, 0.5, question) is False
    assert grounded("$39,000", texts, 0.5, question) is True
    # a statement's value is none of its own words: it ties with a stronger tier's answer
    code = hit("[1 March 2024] Q: My locker code is ZX-4471. / A: Noted.", "small", 3)
    asked = hit("[2 March 2024] Q: Remind me of my locker code. / A: ZX-4471", "large", 4)
    texts = sources([code, asked], {"small"}, question="What is my locker code?", closest=True)
    assert "My locker code is ZX-4471." in texts and "ZX-4471" in texts
