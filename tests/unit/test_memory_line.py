"""One reading of a memory line for the store, the gate, the echo reader and the mock engine."""

from __future__ import annotations

import pytest

from memroute.text.memory_line import (MemoryLine, echoes_memory, last_bulleted_line,
                                       parse_memory_line, split_memory_text)
from memroute.types import TurnPair


@pytest.mark.parametrize("user, reply", [
    ("What is my locker code?", "Your locker code is ZX-4471."),
    ("My locker code is ZX-4471.", ""),  # a stored pair whose reply was empty
    ("Two\nlines of mine", "and a reply\nover two lines"),
    ("Which is better, B / A", "B."),  # the separator's look inside the user's turn
    ("Pick one", "A or B / A: B"),  # ... and inside the reply: the first separator splits
])
def test_a_stored_pair_splits_into_what_was_written(user: str, reply: str):
    text = TurnPair("u", "s", 0, user, reply, 1_714_521_600).text()
    assert split_memory_text(text) == (user, reply)


@pytest.mark.parametrize("text, line", [
    # the prompt's bullet, with and without the reply it shows
    ("- [2 May 2024] Q: What is my code? / A: QT-8812", MemoryLine("What is my code?", "QT-8812")),
    ("- [2 May 2024] Q: My code is QT-8812.", MemoryLine("My code is QT-8812.", "")),
    # a copy cut before its reply (the 0.5B, 2,000-request trace)
    ("[1 March 2024] Q: The code for my storage unit is GG-9512, just so you know. / A",
     MemoryLine("The code for my storage unit is GG-9512, just so you know.", "")),
    # no date label, no reply
    ("Q: We set the wedding budget at $42,000.",
     MemoryLine("We set the wedding budget at $42,000.", "")),
    ("- Q: Where do I park? / A: Level 3", MemoryLine("Where do I park?", "Level 3")),
    # LoCoMo's session label
    ("[D1:3, 1:56 pm on 8 May, 2023] Q: Hi! / A: Hello.", MemoryLine("Hi!", "Hello.")),
])
def test_a_memory_line_in_any_of_its_shapes(text: str, line: MemoryLine):
    assert parse_memory_line(text) == line


@pytest.mark.parametrize("text", [
    "Your locker code is ZX-4471.",
    "FAQ: the gym opens at 6 am.",
    "[1 May 2024] Summary: the user moved to Porto.",
    "The answer is Q: 4",
])
def test_text_that_is_no_memory_line_is_not_read_as_one(text: str):
    assert parse_memory_line(text) is None


def test_the_last_bulleted_line_of_a_prompt_is_its_newest_memory():
    prompt = ("Answer briefly.\nMemories (oldest first):\n"
              "- [1 May 2024] Q: My code is QT-8812. / A: Noted.\n"
              "  - not a memory line\n"
              "- [2 May 2024] Q: My code is now QT-9000.\n")
    assert last_bulleted_line(prompt) == "[2 May 2024] Q: My code is now QT-9000."
    assert last_bulleted_line("No memories here.\n- a plain bullet") is None


def test_a_text_that_is_no_turn_pair_is_all_turn_without_its_date():
    summary = "[May 2024] Summary: moved to Porto."
    assert split_memory_text(summary) == ("Summary: moved to Porto.", "")
    assert split_memory_text("plain note") == ("plain note", "")


@pytest.mark.parametrize("reply, echoes", [
    ("[11 March 2024] Q: What is my car rental number? / A: QS-8185", True),
    ("Q: We set the wedding budget at $42,000.", True),
    ("- [2 May 2024] Q: My code is QT-8812.", True),
    ("Sure. Q: What is my code? / A: QT-8812", True),
    ("Your code is QT-8812.", False),
    ("FAQ: the gym opens at 6 am.", False),
    ("Is it A/B testing? A: yes", False),
])
def test_a_reply_that_copies_a_memory_line_is_told_apart(reply: str, echoes: bool):
    assert echoes_memory(reply) is echoes
