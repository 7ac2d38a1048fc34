"""router.repeats=collapse: a question asked again is one memory, its most trusted copy."""

import pytest

from memroute.accounting.cost import Pricing
from memroute.config import RetrievalConfig, RouterConfig
from memroute.errors import ConfigError
from memroute.routing.repeats import collapse_repeats, trust_by
from memroute.routing.router import Router, Tier
from memroute.types import RetrievalHit, TurnPair, memory_of

from .fakes import FakeBackend, FakeRetriever

MAY_8 = 1715126400  # 2024-05-08
TRUST = trust_by(["small", "large"])


def hit(i, question, answer, model="small", score=None, day=0):
    pair = TurnPair("alice", "s1", i, question, answer, MAY_8 + day * 86400, source_model=model)
    return RetrievalHit(memory_of(pair), 10.0 - i if score is None else score)


def test_copies_of_a_question_collapse_to_the_strongest_tiers_at_the_best_rank():
    hits = [hit(0, "Sorry, I forgot: which city does my sister live in? I keep forgetting.",
                "Tbilisi", day=3),
            hit(1, "My sister moved again, to Tbilisi this time.", "Noted", day=1),
            hit(2, "Can you remind me: in what city is my sister living? Thanks!", "Tbilisi.",
                model="large", day=2),
            hit(3, "Hey, which city does my sister live in?", "Tbilisi", day=4)]
    out = collapse_repeats(hits, TRUST)
    assert [h.memory.turn_index for h in out] == [2, 1]       # the 1.5B's copy, first place
    assert out[0].score == hits[0].score


def test_ties_keep_the_newest_and_a_users_history_beats_every_tier():
    copies = [hit(0, "What is my building gate code?", "KH-9824", day=1),
              hit(1, "Remind me of my building gate code.", "KH-9824", day=5)]
    assert [h.memory.turn_index for h in collapse_repeats(copies, TRUST)] == [1]
    ingested = hit(2, "What's my building gate code?", "KH-9824", model="")
    both = [*copies, ingested]
    assert [h.memory.turn_index for h in collapse_repeats(both, TRUST)] == [2]


@pytest.mark.parametrize("other", [
    ("Which city does my cousin live in?", "Tbilisi"),       # another person, same answer
    ("Which city does my sister live in?", "Boise"),        # another answer: stale or current
])
def test_other_questions_and_other_answers_stay(other):
    first = hit(0, "In what city is my sister living?", "Tbilisi")
    out = collapse_repeats([first, hit(1, *other)], TRUST)
    assert len(out) == 2


def test_statements_are_never_collapsed():
    same = [hit(i, "My locker code is ZX-4471.", "Noted") for i in range(3)]
    assert len(collapse_repeats(same, TRUST)) == 3


def make(repeats, memories, statement_slot=False, statement_memories="none"):
    small = FakeBackend("small", answer="Tbilisi", logprob=-0.05)
    large = FakeBackend("large", answer="Tbilisi", logprob=-0.05)
    retriever = FakeRetriever()
    retriever.remember(memories)
    router = Router(
        [Tier("small", small, Pricing(0.5)), Tier("large", large, Pricing(8.0))],
        RouterConfig(tau=0.5, repeats=repeats, store_answers=False, statement_slot=statement_slot,
                     statement_memories=statement_memories),
        RetrievalConfig(top_k=3, probe_token_budget=512, token_budget=512),
        retriever,
    )
    return router, small


def test_the_router_fills_the_places_copies_leave():
    asked = [TurnPair("alice", "s1", i, q, "Boise", MAY_8 + i * 60, source_model="small")
             for i, q in enumerate(["Which city does my sister live in?",
                                    "Hey, which city does my sister live in?",
                                    "Sorry, which city does my sister live in? Thanks!"])]
    moved = TurnPair("alice", "s1", 9, "My sister moved to Tbilisi, what a city.", "Noted",
                     MAY_8 + 3600)
    router, small = make("keep", [*asked, moved])
    router.route("alice", "which city does my sister live in?", session_time=MAY_8 + 7200)
    prompt = small.prompts[-1][0].content
    assert prompt.count("Boise") == 3 and "Tbilisi" not in prompt   # copies crowd it out
    router.cfg.repeats = "collapse"
    res = router.route("alice", "which city does my sister live in?", session_time=MAY_8 + 7200)
    prompt = small.prompts[-1][0].content
    assert prompt.count("Boise") == 1 and "moved to Tbilisi" in prompt
    assert len(res.decision.memories) == 2


def test_escalation_collapses_for_the_tiers_above_the_first_only():
    asked = [TurnPair("alice", "s1", i, q, "Boise", MAY_8 + i * 60, source_model="large")
             for i, q in enumerate(["Which city does my sister live in?",
                                    "Hey, which city does my sister live in?"])]
    router, small = make("keep", asked)
    large = router.tiers[1].backend
    small.logprob = -3.0  # unsure: escalates
    router.route("alice", "which city does my sister live in?", session_time=MAY_8 + 7200)
    assert large.prompts[-1][0].content.count("Boise") == 2   # keep: both copies
    router.cfg.repeats = "escalation"
    router.route("alice", "which city does my sister live in?", session_time=MAY_8 + 7200)
    assert small.prompts[-1][0].content.count("Boise") == 2   # the probe reads both copies
    assert large.prompts[-1][0].content.count("Boise") == 1   # the escalation one


def test_a_bad_setting_is_a_config_error_naming_it():
    with pytest.raises(ConfigError) as e:
        make("dedupe", [])
    assert e.value.field == "router.repeats"
    with pytest.raises(ConfigError) as e:
        make("keep", [], statement_memories="subject_only")
    assert e.value.field == "router.statement_memories" and "none, subject, all" in str(e.value)


def sister_asked(model="small"):
    return [TurnPair("alice", "s1", i, q, "Tbilisi", MAY_8 + i * 60, source_model=model)
            for i, q in enumerate(["Which city does my sister live in?",
                                   "Hey, which city does my sister live in?",
                                   "Sorry, which city does my sister live in? Thanks!"])]


MOVED = TurnPair("alice", "s1", 9, "My sister moved to Tbilisi.", "Noted", MAY_8 + 3600)


def test_a_statement_on_the_subject_takes_the_last_place_copies_would_fill():
    router, small = make("keep", [*sister_asked(), MOVED])
    large = router.tiers[1].backend
    res = router.route("alice", "which city does my sister live in?", session_time=MAY_8 + 7200)
    assert "Tbilisi" in small.prompts[-1][0].content
    assert res.decision.answered_tier == 1 and not large.prompts[-1][0].content.count("Q:")
    # The small tier's own copies are no evidence for it, and the large one is shown none of
    # them: without the user's statement the right answer was escalated and then invented.
    router.cfg.statement_slot = True
    res = router.route("alice", "which city does my sister live in?", session_time=MAY_8 + 7200)
    prompt = small.prompts[-1][0].content
    assert prompt.count("Tbilisi") == 3 and "moved to Tbilisi" in prompt
    assert len(res.decision.memories) == 3 and res.decision.answered_tier == 0
    small.logprob = -3.0  # unsure: the escalation reads the statement too
    res = router.route("alice", "which city does my sister live in?", session_time=MAY_8 + 7200)
    assert res.decision.answered_tier == 1 and "moved to Tbilisi" in large.prompts[-1][0].content


@pytest.mark.parametrize("other", [
    # another person: no shared subject word
    TurnPair("alice", "s1", 9, "My cousin moved to Tbilisi.", "Noted", MAY_8 + 3600),
    TurnPair("alice", "s1", 9, "Did my sister move to Tbilisi?", "Yes", MAY_8 + 3600),  # asks
])
def test_only_a_statement_on_the_subject_takes_the_slot(other):
    router, small = make("keep", [*sister_asked(), other], statement_slot=True)
    router.route("alice", "which city does my sister live in?", session_time=MAY_8 + 7200)
    assert small.prompts[-1][0].content.lower().count("which city does my sister") == 3


def test_no_slot_for_a_turn_that_asks_nothing_or_one_already_holding_a_statement():
    router, small = make("keep", [*sister_asked(), MOVED], statement_slot=True,
                         statement_memories="all")
    router.route("alice", "My sister loves her city.", session_time=MAY_8 + 7200)
    prompt = small.prompts[-1][0].content
    assert "which city does my sister" in prompt and "moved to Tbilisi" not in prompt
    on_top = TurnPair("alice", "s1", 8, "My sister lives in a city by the sea.", "Noted",
                      MAY_8 + 1800)
    router, small = make("keep", [*sister_asked()[:2], on_top, MOVED], statement_slot=True)
    router.route("alice", "which city does my sister live in?", session_time=MAY_8 + 7200)
    prompt = small.prompts[-1][0].content
    assert "by the sea" in prompt and "moved to Tbilisi" not in prompt


COUSIN = TurnPair("alice", "s1", 10, "My cousin lives in Boise.", "Noted", MAY_8 + 3000)


@pytest.mark.parametrize("scope, shown", [
    ("none", []),                                  # the default: an acknowledgement reads nothing
    ("subject", ["moved to Tbilisi"]),             # those sharing a subject word ("sister")
    ("all", ["moved to Tbilisi", "cousin lives in Boise"]),
])
def test_a_turn_that_only_states_reads_what_statement_memories_says(scope, shown):
    router, small = make("keep", [MOVED, COUSIN], statement_memories=scope)
    res = router.route("alice", "My sister loves her new flat.", session_time=MAY_8 + 7200)
    prompt = small.prompts[-1][0].content
    assert [s for s in ("moved to Tbilisi", "cousin lives in Boise") if s in prompt] == shown
    assert len(res.decision.memories) == len(shown)
    # A question and a task read their memories whatever the scope.
    router.route("alice", "Draft a note to my sister about her city.", session_time=MAY_8 + 7200)
    assert "moved to Tbilisi" in small.prompts[-1][0].content
    router.route("alice", "Where does my sister live?", session_time=MAY_8 + 7200)
    assert "moved to Tbilisi" in small.prompts[-1][0].content


def test_a_turn_that_only_states_is_asked_for_an_acknowledgement():
    # Seed 31: told to answer "with a name, date, number or short phrase" and shown no memory,
    # the 0.5B acknowledged "My warranty number is GD-3464." with "John Doe", unsure: escalated.
    router, small = make("keep", [MOVED])
    router.route("alice", "My warranty number is GD-3464.", session_time=MAY_8 + 7200)
    assert small.prompts[-1][0].content == router.cfg.statement_prompt
    assert "short confirmation" in router.cfg.statement_prompt
    router.route("alice", "Where does my sister live?", session_time=MAY_8 + 7200)
    assert small.prompts[-1][0].content.startswith(router.cfg.system_prompt)
    router.route("alice", "Draft a note to my sister.", session_time=MAY_8 + 7200)  # a task
    assert small.prompts[-1][0].content.startswith(router.cfg.system_prompt)
    # the client's own system prompt wins, and an empty statement_prompt is the system prompt
    router.route("alice", "My warranty number is GD-3464.", session_time=MAY_8, system="Be terse.")
    assert small.prompts[-1][0].content == "Be terse."
    router.cfg.statement_prompt = ""
    router.route("alice", "My warranty number is GD-3464.", session_time=MAY_8 + 7200)
    assert small.prompts[-1][0].content == router.cfg.system_prompt
