"""The journal's behaviour, written once for both back ends.

Each case is a plain function of ``make_journal``: ``make_journal(**kwargs)`` opens another
journal on the test's one database (another connection to the SQLite file, another
:class:`PostgresJournal` on the PostgreSQL database: two journals stand for two processes or
replicas), and the fixture closes them all at teardown (:func:`opened_journals`).
``tests/unit/test_journal.py`` (SQLite) and ``tests/integration/test_journal_postgres.py``
run :data:`CASES` as they are, and call the other cases from tests that add what only their
back end has (a pragma, ``claim``) or that pass its own sizes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator

import pytest

from memroute.errors import InvalidRequest
from memroute.journal import JournalError
from memroute.types import TurnPair

T0 = 1683504000
ALICE, BOB, CAROL = "acme:alice", "acme:bob", "globex:carol"


def pair(user: str = ALICE, turn: int = 0, text: str = "hello", answer: str = "hi", **kw):
    return TurnPair(user, kw.pop("session", "s1"), turn, text, answer, T0 + turn, **kw)


@contextlib.contextmanager
def opened_journals(open_journal: Callable[..., object]) -> Iterator[Callable[..., object]]:
    """A ``make_journal(**kwargs)`` that calls ``open_journal(**kwargs)``; closes them all."""
    opened: list = []

    def make(**kwargs):
        j = open_journal(**kwargs)
        opened.append(j)
        return j

    try:
        yield make
    finally:
        for j in opened:
            j.close()


def run_threads(n: int, target: Callable[[int], None]) -> None:
    """``target(k)`` for k < n in threads at once; fails with the errors any of them raised."""
    errors: list[BaseException] = []

    def wrapped(k: int) -> None:
        try:
            target(k)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=wrapped, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors


# ------------------------------------------------------- cases that return a journal to check


def append_is_committed_and_survives_a_restart(make_journal):
    """Returns the journal opened after the restart, for the back end's durability checks."""
    j = make_journal()
    pairs = [pair(turn=i, text=f"fact {i}") for i in range(3)]
    seqs = j.append(pairs)
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    other = make_journal()  # committed when append returned: another connection sees it at once
    assert [(e.seq, e.pair) for e in other.pending()] == list(zip(seqs, pairs))
    j.close()
    reopened = make_journal()  # a restart (the file / schema exists)
    assert [(e.seq, e.pair) for e in reopened.pending()] == list(zip(seqs, pairs))
    return reopened


def closed_journal_raises_journal_error(make_journal):
    """Returns the closed journal, for the back end's own methods."""
    j = make_journal()
    j.close()
    assert j.closed
    j.close()  # twice is harmless
    for call in (lambda: j.append([pair()]), j.pending, lambda: j.mark_flushed([1])):
        with pytest.raises(JournalError):
            call()
    return j


def concurrent_appends_record_each_pair_once(make_journal, *, journals: int, clients: int,
                                             per_client: int) -> None:
    """``clients`` threads over ``journals`` journals (one: threads of a process; more: replicas),
    each appending its pairs one request at a time, retries and a pair every client sends."""
    opened = [make_journal() for _ in range(journals)]
    shared = pair("acme:shared", 0)
    seqs: dict[int, set[int]] = {}
    lock = threading.Lock()

    def client(k: int) -> None:
        j = opened[k % journals]
        mine = [pair(f"acme:user{k}", i, text=f"client {k} fact {i}") for i in range(per_client)]
        for p in [*mine, shared, *mine[:3], shared]:
            [s] = j.append([p])
            with lock:
                seqs.setdefault(p.id, set()).add(s)

    run_threads(clients, client)
    j = opened[0]
    assert j.stats().total == clients * per_client + 1
    assert all(len(s) == 1 for s in seqs.values())  # every retry got the original seq
    assert sorted(e.pair.id for e in j.pending()) == sorted(seqs)
    assert len({e.seq for e in j.pending()}) == len(seqs)


# ------------------------------------------------------------- cases run as they are: CASES


def pending_order_limits_and_mark_flushed(make_journal) -> None:
    j = make_journal()
    a = j.append([pair(ALICE, i) for i in range(4)])
    b = j.append([pair(BOB, i) for i in range(2)])
    assert [e.seq for e in j.pending()] == a + b
    assert [e.seq for e in j.pending(3)] == a[:3]
    assert [e.seq for e in j.pending(max_seq=a[1])] == a[:2]
    assert [e.seq for e in j.pending_for_user(BOB)] == b
    assert [e.seq for e in j.pending_for_user(ALICE, limit=2)] == a[2:]  # newest 2, oldest first
    assert j.mark_flushed([a[0], a[2], b[1]]) == 3
    assert j.mark_flushed([a[0]]) == 0  # already flushed
    assert j.mark_flushed([]) == 0
    assert [e.seq for e in j.pending()] == [a[1], a[3], b[0]]
    s = j.stats()
    assert (s.total, s.pending, s.flushed, s.failed, s.last_seq) == (6, 3, 3, 0, b[1])
    assert s.oldest_pending_age_s is not None and s.oldest_pending_age_s >= 0
    j.mark_flushed([e.seq for e in j.pending()])
    assert j.stats().oldest_pending_age_s is None and j.pending_count() == 0
    with pytest.raises(InvalidRequest):
        j.pending_for_user('x" or 1')


def retried_pair_is_recorded_once_and_allocates_no_seq(make_journal) -> None:
    j = make_journal()
    p = pair(created_at=1.0)
    [seq] = j.append([p])
    # A retry records the same turn a moment later: same id, same content.
    assert j.append([dataclasses.replace(p, created_at=2.0), p]) == [seq, seq]
    assert j.stats().total == 1
    j.mark_flushed([seq])
    assert j.append([p]) == [seq] and j.pending_count() == 0  # no second write either
    [other] = j.append([pair(turn=1)])
    assert other == seq + 1  # the no-op retries consumed no seq


def changed_content_replaces_the_entry_with_a_new_seq(make_journal) -> None:
    j = make_journal()
    p = pair(answer="first")
    [old] = j.append([p])
    # The flusher read the old version; the entry is replaced before it marks it.
    [new] = j.append([dataclasses.replace(p, assistant_text="second")])
    assert new > old and j.last_seq() == new
    assert j.mark_flushed([old]) == 0  # the written version is gone: the new one stays pending
    assert [e.pair.assistant_text for e in j.pending()] == ["second"]
    assert j.stats().total == 1
    j.mark_flushed([new])
    [newer] = j.append([dataclasses.replace(p, assistant_text="third")])  # flushed, then changed
    assert newer > new and [e.seq for e in j.pending()] == [newer]


def prune_flushed_keeps_pending(make_journal) -> None:
    now = [1000.0]
    j = make_journal(clock=lambda: now[0])
    a, b = j.append([pair(turn=1), pair(turn=2)])
    j.mark_flushed([a])
    now[0] += 100
    assert j.prune_flushed(older_than_s=200) == 0
    assert j.prune_flushed(older_than_s=50) == 1
    assert [e.seq for e in j.pending()] == [b] and j.stats().total == 1
    [again] = j.append([pair(turn=1)])  # re-appended after the prune: journaled again
    assert again > b


def recently_flushed_entries_are_read_while_asked_for(make_journal) -> None:
    now = [1000.0]
    j = make_journal(clock=lambda: now[0])
    a, b, c = j.append([pair(turn=1), pair(turn=2), pair(turn=3)])
    j.mark_flushed([a, b])
    now[0] += 1.5
    assert [e.seq for e in j.pending_for_user(ALICE)] == [c]  # flushed ones left the pending read
    assert [e.seq for e in j.pending_for_user(ALICE, flushed_within_s=2.0)] == [a, b, c]
    assert [e.seq for e in j.pending_for_user(ALICE, 2, flushed_within_s=2.0)] == [b, c]
    now[0] += 1.0  # 2.5 s after the flush: the store shows them everywhere by now
    assert [e.seq for e in j.pending_for_user(ALICE, flushed_within_s=2.0)] == [c]
    assert j.pending_for_user(BOB, flushed_within_s=2.0) == []
    with pytest.raises(ValueError, match="flushed_within_s"):
        j.pending_for_user(ALICE, flushed_within_s=-1)


def a_failing_listener_does_not_undo_the_ack(make_journal) -> None:
    j = make_journal()
    seen: list[int] = []

    def broken(n: int) -> None:
        raise RuntimeError("boom")

    j.add_listener(broken)
    j.add_listener(seen.append)
    assert len(j.append([pair(turn=1), pair(turn=2)])) == 2
    j.append([pair(turn=1)])  # nothing new: no wake-up
    j.remove_listener(seen.append)
    j.append([pair(turn=3)])
    assert seen == [2] and j.pending_count() == 3


def claims_lease_entries_to_one_owner(make_journal) -> None:
    """Claims are the same on both back ends (one implementation): oldest first, one live lease
    per entry, the owner's own again, released or marked claims free, erased ones never."""
    j, other = make_journal(), make_journal()
    seqs = j.append([pair(turn=i) for i in range(4)] + [pair(BOB, 0)])
    assert [e.seq for e in j.claim(2, owner="a", lease_s=30)] == seqs[:2]
    assert [e.seq for e in other.claim(2, owner="b", lease_s=30)] == seqs[2:4]
    assert [e.seq for e in j.claim(5, owner="a", lease_s=30)] == [*seqs[:2], seqs[4]]
    assert other.release(seqs, owner="b") == 2 and other.release(seqs, owner="b") == 0
    assert j.mark_flushed(seqs[:2]) == 2  # marking ends the lease with the entry
    j.erase_user(BOB, actor="ops")
    assert [e.seq for e in other.claim(10, owner="c", lease_s=30)] == seqs[2:4]
    assert j.claim(10, owner="d", lease_s=30) == []
    assert j.shared == other.shared and isinstance(j.shared, bool)


def settled_seq_counts_other_writers_once_settled(make_journal) -> None:
    """What a replica's cached memories are checked against: the user's highest seq another
    flusher wrote at least ``settled_s`` ago."""
    now = [1000.0]
    j = make_journal(clock=lambda: now[0])
    a, b, c = j.append([pair(turn=1), pair(turn=2), pair(BOB, 0)])
    assert j.settled_seq(ALICE) == 0  # nothing flushed
    assert [e.seq for e in j.claim(1, owner="me", lease_s=30)] == [a]
    j.mark_flushed([a])
    assert j.settled_seq(ALICE) == a and j.settled_seq(ALICE, writer="me") == 0  # my own write
    assert [e.seq for e in j.claim(5, owner="other", lease_s=30)] == [b, c]
    j.mark_flushed([b, c])
    assert j.settled_seq(ALICE, 2.0, writer="me") == 0  # not yet visible to every reader
    now[0] += 2.5
    assert j.settled_seq(ALICE, 2.0, writer="me") == b and j.settled_seq(BOB, 2.0) == c
    assert j.pending_for_user(ALICE) == []  # the kept writer does not make it pending again


CASES = [
    pending_order_limits_and_mark_flushed,
    retried_pair_is_recorded_once_and_allocates_no_seq,
    changed_content_replaces_the_entry_with_a_new_seq,
    prune_flushed_keeps_pending,
    recently_flushed_entries_are_read_while_asked_for,
    a_failing_listener_does_not_undo_the_ack,
    claims_lease_entries_to_one_owner,
    settled_seq_counts_other_writers_once_settled,
]
