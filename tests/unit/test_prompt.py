from memroute.routing.prompt import (
    MEMORY_HEADER,
    build_messages,
    render_memory_block,
    select_within_budget,
)
from memroute.types import Memory, RetrievalHit

from .fakes import words


def hit(i, text, t):
    return RetrievalHit(Memory(i, "u", text, t, session_id="s", turn_index=i), score=1.0 / (i + 1))


HITS = [
    hit(0, "[1 May 2024] Q: my dog is Rex / A: noted", 200),
    hit(1, "[2 May 2024] Q: " + "long " * 50 + "/ A: ok", 100),
    hit(2, "[3 May 2024] Q: I live in Oslo / A: nice", 300),
]


def block_tokens(hits):
    return words(render_memory_block(hits))


def test_budget_is_respected_and_rank_order_kept():
    budget = 40
    chosen = select_within_budget(HITS, budget, words)
    # the long second memory does not fit, the shorter third one still does
    assert [h.memory.id for h in chosen] == [0, 2]
    assert block_tokens(chosen) <= budget


def test_zero_budget_injects_nothing():
    assert select_within_budget(HITS, 0, words) == []
    assert select_within_budget([], 100, words) == []


def test_large_budget_takes_everything():
    assert len(select_within_budget(HITS, 10_000, words)) == 3


def test_two_served_pairs_in_the_same_second_keep_the_order_they_were_recorded():
    """Served pairs share session "live" and whole-second session times, and their turn index
    is a hash: the later one (by created_at) must read last, whatever the hashes say."""
    def served(i, text, turn, created):
        return RetrievalHit(Memory(i, "u", text, 500, created_at=created, session_id="live",
                                   turn_index=turn), 1.0)

    older = served(1, "[1 May 2024] Q: What was my parcel code? / A: HV-100", 9_000, 500.10)
    newer = served(2, "[1 May 2024] Q: My locker code is HV-200. / A: Noted", 1_000, 500.90)
    for hits in ([older, newer], [newer, older]):
        assert render_memory_block(hits).splitlines()[-1].endswith("Noted")


def test_block_is_chronological_and_messages_carry_it_in_system():
    block = render_memory_block(HITS)
    lines = block.splitlines()
    assert lines[0] == MEMORY_HEADER
    assert [ln[:15] for ln in lines[1:]] == ["- [2 May 2024] ", "- [1 May 2024] ", "- [3 May 2024] "]
    msgs = build_messages("sys", "what is my dog's name?", HITS[:1])
    assert [m.role for m in msgs] == ["system", "user"]
    assert "Rex" in msgs[0].content and msgs[1].content == "what is my dog's name?"
    assert build_messages("sys", "q")[0].content == "sys"


def test_each_order_puts_its_memories_in_its_place():
    from memroute.routing.prompt import NEWEST_HEADER, RELEVANCE_HEADER, MemoryLayout

    def ids(order):
        lines = render_memory_block(HITS, MemoryLayout(order=order)).splitlines()
        return lines[0], [next(h.memory.id for h in HITS if line.endswith(h.memory.text))
                          for line in lines[1:]]

    assert ids("chronological") == (MEMORY_HEADER, [1, 0, 2])    # by session time: 100, 200, 300
    assert ids("newest_first") == (NEWEST_HEADER, [2, 0, 1])
    assert ids("relevance") == (RELEVANCE_HEADER, [0, 1, 2])      # retrieval rank as given
