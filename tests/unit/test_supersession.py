"""The supersession rules (memroute.memory.supersession): what a change statement replaces."""

from __future__ import annotations

from dataclasses import replace

import pytest

from memroute.memory.supersession import (
    apply_policy,
    as_update,
    marks_for,
    superseded_by,
)
from memroute.memory.values import values
from memroute.types import RetrievalHit, TurnPair, memory_of

T0 = 1_780_000_000
U = "alice"


def pair(i: int, user: str, answer: str = "Noted.", *, uid: str = U) -> TurnPair:
    return TurnPair(uid, f"s{i}", 0, user, answer, T0 + 3600 * i)


@pytest.mark.parametrize("text, kind", [
    ("My locker code is ZX-4471.", "code"),
    ("The standup moved to 9:15 am.", "time"),
    ("My dentist appointment is on 12 June 2027.", "date"),
    ("2027-06-12", "date"),
    ("We set the travel budget at $20,500.", "money"),
    ("We went with Northwind as our caterer.", "name"),
])
def test_value_kinds(text, kind):
    assert kind in {v.kind for v in values(text)[0]}


@pytest.mark.parametrize("text", [
    "What is my locker code now?",                 # a question
    "Quick question: has my locker code changed?",  # a question behind a prefix
    "My locker code is ZX-4471.",                  # no change cue
    "We also got a parrot now, Dumpling.",         # an addition, not a change
    "I changed my mind about it.",                 # no value
])
def test_not_an_update(text):
    assert as_update(text) is None


def test_an_update_supersedes_the_statement_and_the_answers_that_hold_the_old_value():
    old = [
        pair(0, "My locker code is ZX-4471."),
        pair(1, "What is my locker code?", "Your locker code is ZX-4471."),
        pair(2, "My bike lock code is QQ-1111."),               # another subject
        pair(3, "When is my dentist appointment?", "On 3 May."),  # another subject and kind
    ]
    new = pair(4, "I changed my locker code, it's QT-8812 now.")
    got = superseded_by(new, [memory_of(p) for p in old])
    assert got == [old[0].id, old[1].id]


def test_two_pets_stay_two_pets():
    rabbit = pair(0, "Our rabbit is called Wombat.")
    parrot = pair(1, "We adopted a parrot now, and named it Dumpling.")
    assert superseded_by(parrot, [memory_of(rabbit)]) == []
    # ...while renaming the rabbit replaces the rabbit's name only
    rename = pair(2, "We ended up renaming our rabbit to Clover.")
    assert superseded_by(rename, [memory_of(rabbit), memory_of(parrot)]) == [rabbit.id]


def test_a_newer_pair_is_never_superseded_and_marks_chain_in_time_order():
    first = pair(0, "My locker code is ZX-4471.")
    second = pair(1, "I changed my locker code, it's QT-8812 now.")
    third = pair(2, "New locker code: LM-5555. The old one no longer works.")
    later_statement = pair(3, "My locker code is AB-1234.")
    mems = [memory_of(p) for p in (first, second, third, later_statement)]
    marks = marks_for([third, second], mems)  # given out of order
    assert marks == {first.id: (second.id, second.session_time),
                     second.id: (third.id, third.session_time)}
    assert later_statement.id not in marks


def test_the_old_pair_already_saying_the_new_value_stays():
    old = pair(0, "Is my locker code QT-8812?", "Yes, your locker code is QT-8812.")
    new = pair(1, "I changed my locker code, it's QT-8812 now.")
    assert superseded_by(new, [memory_of(old)]) == []


def test_policy_excludes_or_ranks_below():
    a, b, c = (memory_of(pair(i, f"note {i}")) for i in range(3))
    hits = [RetrievalHit(a, 0.9), RetrievalHit(b, 0.8), RetrievalHit(c, 0.7)]
    marks = {a.id: (c.id, c.session_time)}
    assert [h.memory.id for h in apply_policy(hits, marks)] == [b.id, c.id]
    below = apply_policy(hits, marks, "rank_below")
    assert [h.memory.id for h in below] == [b.id, c.id, a.id]
    assert below[-1].memory.superseded_by == c.id


def marked_memories(first, update):
    """The user's memories after ``update`` superseded what it replaces, by id."""
    mems = {m.id: m for m in map(memory_of, (first, update))}
    for old_id, (by, until) in marks_for([update], mems.values()).items():
        mems[old_id] = replace(mems[old_id], superseded_by=by, valid_until=until)
    return mems


def test_an_answer_that_restates_a_replaced_value_is_born_superseded():
    from memroute.memory.supersession import restated_marks

    first = pair(0, "My best friend just moved to Innsbruck.", "Noted.")
    update = pair(1, "My best friend moved again, to Lisbon this time.", "Noted.")
    mems = marked_memories(first, update)
    stale = pair(2, "Which city does my best friend live in?", "Innsbruck")
    right = pair(3, "Which city does my best friend live in?", "Lisbon")
    other = pair(4, "What is 17 times 3?", "51")
    marks = restated_marks([stale, right, other], mems.values())
    assert marks == {stale.id: (update.id, stale.session_time)}


def test_a_statement_is_not_born_superseded_by_what_a_model_replied_to_it():
    # seed 24: the 0.5B acknowledged a budget by echoing memory lines with the old landlord.
    from memroute.memory.supersession import restated_marks

    first = pair(0, "My landlord is Dagny Haddad.", "Noted.")
    update = pair(1, "I have a new landlord now: Rosalind Holmberg.", "Noted.")
    mems = marked_memories(first, update)
    budget = pair(2, "We set the renovation budget at $36,500.",
                  "[7 March 2024] Q: My landlord is Dagny Haddad. / A: Dagny Haddad")
    asked = pair(3, "Who is my landlord?", "My landlord is Dagny Haddad.")
    marks = restated_marks([budget, asked], mems.values())
    assert marks == {asked.id: (update.id, asked.session_time)}


def test_a_reply_echoing_memory_lines_does_not_get_a_pair_superseded():
    # seed 25: the move was superseded by the car rental update through the 0.5B's echo.
    moved = pair(0, "My best friend just moved to Porto.",
                 "[11 March 2024] Q: What is my car rental number? / A: QS-8185")
    asked = pair(1, "What is my car rental number?", "QS-8185")
    update = pair(2, "They reissued my car rental number, it's BP-6815 now.", "Noted.")
    assert superseded_by(update, [memory_of(moved), memory_of(asked)]) == [asked.id]


def test_a_change_statement_is_shown_without_a_reply_that_contradicts_it():
    from memroute.routing.prompt import memory_line

    wrong = memory_of(pair(0, "My best friend moved again, to Lisbon this time.", "Innsbruck"))
    fine = memory_of(pair(1, "I changed my locker code, it's QT-8812 now.", "Noted: QT-8812."))
    assert memory_line(RetrievalHit(wrong, 1.0)).endswith("Q: My best friend moved again, to Lisbon this time.")
    assert "Innsbruck" not in memory_line(RetrievalHit(wrong, 1.0), dates=False)
    assert memory_line(RetrievalHit(fine, 1.0)) == f"- {fine.text}"


def test_a_turn_that_tells_and_then_asks_is_read_without_its_question():
    old = pair(0, "My gym membership costs $33 a month. How can I make the most of it?")
    new = pair(1, "My gym just raised my membership to $45 a month. Is that still worth it?")
    assert superseded_by(new, [memory_of(old)]) == [old.id]
    # a question alone still states nothing
    assert as_update("Did my gym raise my membership to $45 now?") is None


def test_a_shared_name_does_not_keep_a_replaced_amount_current():
    old = pair(0, "I've saved $800 toward a trip to Estonia. How can I save faster?")
    new = pair(1, "My savings for the Estonia trip are now at $1,300! Am I on track?")
    assert superseded_by(new, [memory_of(old)]) == [old.id]
    # ...but a pair that already holds the new amount stays current
    same = pair(2, "Is $1,300 enough for the Estonia trip savings?", "Yes, $1,300 is plenty.")
    later = pair(3, "My savings for the Estonia trip are now at $1,300!")
    assert superseded_by(later, [memory_of(same)]) == []


def test_an_amount_written_without_its_sign_is_the_same_money():
    # seed 35: the 0.5B answered "36,500" for "$36,500", and "$40,500" left that answer current
    old = [pair(0, "We set the renovation budget at $36,500."),
           pair(1, "How much is the renovation budget?", "36,500"),
           pair(2, "How much is the renovation budget?", "40,500"),    # already the new amount
           pair(3, "What is our renovation budget?", "$40.5k")]        # so is this
    new = pair(4, "We changed the renovation budget to $40,500.")
    assert superseded_by(new, [memory_of(p) for p in old]) == [old[0].id, old[1].id]
    # ...and a grouped number is one amount, not two codes sharing their "000"
    goal = pair(5, "My step goal is 10,000 a day.")
    assert superseded_by(pair(6, "My step goal is now 12,000."), [memory_of(goal)]) == [goal.id]


def test_a_date_in_iso_form_is_the_same_date():
    # seed 36: the 0.5B answered "2024-05-17", and "rescheduled to 20 May 2024" left it current
    old = [pair(0, "What date is my car service appointment?", "2024-05-17"),
           pair(1, "What date is my car service appointment?", "2024-05-20"),  # the new date
           pair(2, "When is my car service appointment?", "On May 20th.")]     # so is this
    new = pair(3, "I rescheduled the car service appointment to 20 May 2024.")
    assert superseded_by(new, [memory_of(p) for p in old]) == [old[0].id]


def test_a_change_of_year_alone_is_another_date():
    old = [pair(0, "When is the conference?", "12 October 2026"),
           pair(1, "When is the conference?", "On 12 October."),  # no year: the new date too
           pair(2, "When is the conference?", "2027-10-12")]      # the new date in ISO form
    new = pair(3, "The conference moved to 12 October 2027.")
    assert superseded_by(new, [memory_of(p) for p in old]) == [old[0].id]


def test_when_it_happened_is_not_what_it_is_about():
    old = pair(0, "My locker code is ZX-4471.")
    new = pair(1, "My locker code changed this week, it's QT-8812 now.")
    assert superseded_by(new, [memory_of(old)]) == [old.id]


def test_raised_as_an_adjective_is_no_change_cue():
    old = pair(0, "I spent $1,130 on topsoil for the garden makeover this week.")
    new = pair(1, "I spent $430 on raised beds for the garden makeover this week.")
    assert as_update(new.user_text) is None
    assert superseded_by(new, [memory_of(old)]) == []


def test_a_move_that_names_nothing_else_replaces_where_the_user_lives():
    home = pair(0, "I live in Bologna, and the rent keeps going up. Should I consider moving?")
    asked = pair(1, "Is Lisbon expensive to live in?", "Housing is the main cost; the rest is moderate.")
    move = pair(2, "We finally moved to Providence last weekend! What should I set up first?")
    # the question about Lisbon asserts nothing, and "Housing" opening a long answer is no name
    assert superseded_by(move, [memory_of(home), memory_of(asked)]) == [home.id]
    # a friend's move is about the friend, not the user's home
    friend = pair(3, "My best friend moved to Lisbon last month.")
    assert superseded_by(friend, [memory_of(home)]) == []


def fixed_similarity(table: dict[tuple[str, str], float]):
    """``similar`` from a table of (update, older) statement cosines; unlisted pairs: 0.05."""
    calls = []

    def similar(text, others):
        calls.append((text, list(others)))
        return [table.get((text, o), 0.05) for o in others]

    similar.calls = calls
    return similar


CAR_OLD = "I drive a Kia Niro and it's getting old."
CAR_NEW = "I traded in my old car for a Mazda 3 today."


def test_an_update_worded_apart_supersedes_by_meaning_only_with_a_similarity():
    old = pair(0, CAR_OLD + " When is it worth replacing?", "When repairs cost more than it is worth.")
    other = pair(1, "I am learning Spanish verbs this month.")  # holds a name, unrelated
    new = pair(2, CAR_NEW + " What maintenance should I plan?")
    older = [memory_of(old), memory_of(other)]
    assert superseded_by(new, older) == []  # no word of the update is in the old statement
    similar = fixed_similarity({(CAR_NEW, CAR_OLD): 0.43})
    assert superseded_by(new, older, similar) == [old.id]
    # each side is compared by what it states, without its question
    assert similar.calls == [(CAR_NEW, [CAR_OLD, "I am learning Spanish verbs this month."])]
    assert marks_for([new], [*older, memory_of(new)], similar) == {
        old.id: (new.id, new.session_time)}


def test_by_meaning_needs_a_statement_that_stands_out():
    cousin = "My cousin just moved to Edinburgh."
    older = [pair(0, "My grandfather just moved to Galway."), pair(1, "My sister lives in Lyon.")]
    new = pair(2, cousin)
    # alike, but none ahead of the next by the margin: sibling facts, none replaced
    alike = fixed_similarity({(cousin, older[0].user_text): 0.59, (cousin, older[1].user_text): 0.50})
    assert superseded_by(new, [memory_of(p) for p in older], alike) == []
    # below the floor, however far ahead
    faint = fixed_similarity({(cousin, older[0].user_text): 0.33})
    assert superseded_by(new, [memory_of(p) for p in older], faint) == []


def test_by_meaning_never_replaces_another_thing_of_the_users():
    sister = pair(0, "My sister lives in Lyon.")
    brother = pair(1, "My brother just moved to Tallinn.")
    # the only candidate, and similar: still another person's home
    similar = fixed_similarity({(brother.user_text, sister.user_text): 0.48})
    assert superseded_by(brother, [memory_of(sister)], similar) == []
    # the update's "my houseplant" is in the older statement: the same thing, worded apart
    plants_old = pair(2, "I have 9 houseplants in my apartment.")
    plants_new = pair(3, "My houseplant collection is up to 14 now!")
    similar = fixed_similarity({(plants_new.user_text, plants_old.user_text): 0.57})
    assert superseded_by(plants_new, [memory_of(plants_old)], similar) == [plants_old.id]


def test_by_meaning_waits_for_the_words():
    stated = pair(0, "My locker code is ZX-4471.")
    alike = pair(1, "The gym gave me a wristband, number WB-7713.")
    new = pair(2, "I changed my locker code, it's QT-8812 now.")
    similar = fixed_similarity({(new.user_text, alike.user_text): 0.9})
    # rules 3-4 found the statement: rule 5 adds nothing, and is not even asked
    assert superseded_by(new, [memory_of(stated), memory_of(alike)], similar) == [stated.id]
    assert similar.calls == []


def test_a_quoted_title_is_a_value_and_starting_the_next_one_replaces_it():
    assert values("I'm halfway through 'The Burning Quarry'.")[0][0].kind == "title"
    assert values("My kids' Soccer game is at 5 pm.")[0][0].kind == "time"  # no quote pair
    old = pair(0, "I'm halfway through 'The Burning Quarry'. Any tips to read more consistently?")
    new = pair(1, "I started reading 'The Paper Harbor' this week and I can't put it down.")
    assert as_update(new.user_text) is not None  # "started": a new state begins
    similar = fixed_similarity({(new.user_text, "I'm halfway through 'The Burning Quarry'."): 0.5})
    assert superseded_by(new, [memory_of(old)], similar) == [old.id]
    # a book started too is an addition, not a replacement
    assert as_update("I also started reading 'Dune' this week.") is None
