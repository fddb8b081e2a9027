"""Table tests for the unbounded protocol's pure rules (embedlog/unbounded/rules.py)."""

from __future__ import annotations

import pytest

from embedlog.bookie.terms import lafr_recorded
from embedlog.ledger.recovery import older_leftover
from embedlog.unbounded import rules
from embedlog.wire.entry import FLAG_NOOP, FLAG_TERM, TERM, split_term


@pytest.mark.parametrize(
    ("stored", "asked", "accepted"),
    [(-1, 1, True), (1, 1, True), (1, 2, True), (2, 1, False), (5, 4, False)],
)
def test_bookie_accepts_equal_or_higher_terms(stored, asked, accepted):
    assert rules.bookie_accepts_term(stored, asked) is accepted


@pytest.mark.parametrize(
    ("stored", "asked", "lafr", "known", "recorded"),
    [
        (2, 2, 5, 3, True),  # the bookie's own term, higher: recorded
        (2, 2, 3, 3, False),  # never lowered, nor rewritten
        (2, 2, 2, 3, False),
        (3, 2, 9, 3, False),  # a deposed writer's, once the bookie raised its term
        (2, 3, 9, 3, False),  # a term the bookie has not raised to (WRITE_LAC never raises)
        (-1, 2, 9, -1, False),  # a ledger the bookie holds without a term (a fence read's)
    ],
)
def test_a_write_lac_records_a_lafr_of_the_bookies_own_term_only(
    stored, asked, lafr, known, recorded
):
    assert lafr_recorded(stored, asked, lafr, known) is recorded


def test_answers_of_another_term_are_discarded():
    assert rules.response_counts(3, 3)
    assert not rules.response_counts(3, 2)
    assert not rules.response_counts(3, 4)


@pytest.mark.parametrize(
    ("lafr", "first", "start"),
    [(-1, 0, -1), (5, 0, 5), (-1, 100, 99), (120, 100, 120), (50, 100, 99)],
)
def test_recovery_starts_at_lafr_or_the_last_fragment(lafr, first, start):
    assert rules.recovery_start(lafr, first) == start


@pytest.mark.parametrize(
    ("entry", "acks", "first", "hold", "passes"),
    [
        (10, 3, 0, -1, True),  # whole write set (WQ 3) confirmed
        (10, 2, 0, -1, False),  # only an ack quorum
        (10, 2, 11, -1, True),  # below the last fragment: committed
        (10, 3, 5, 7, False),  # an untracked entry still in the last fragment holds it
        (10, 3, 8, 7, True),  # ... until it lies below the last fragment
    ],
)
def test_lafr_passes(entry, acks, first, hold, passes):
    assert rules.lafr_passes(entry, acks, 3, first, hold) is passes


@pytest.mark.parametrize(
    ("entry", "first", "limit", "due"),
    [
        (9, 0, 10, False),
        (10, 0, 10, True),
        (25, 20, 10, False),
        (30, 20, 10, True),
        (10_000, 0, None, False),
    ],
)
def test_rollover_due(entry, first, limit, due):
    assert rules.rollover_due(entry, first, limit) is due


def test_trim_plan_drops_whole_fragments_below_only():
    frags = [(0, ("a",)), (10, ("b",)), (20, ("c",)), (30, ("d",))]
    assert rules.trim_plan(frags, 0) == (tuple(frags), (), 0)
    assert rules.trim_plan(frags, 15) == (tuple(frags[1:]), tuple(frags[:1]), 10)
    assert rules.trim_plan(frags, 20) == (tuple(frags[2:]), tuple(frags[:2]), 20)
    # the last fragment stays, however far the trim point lies
    assert rules.trim_plan(frags, 10**9) == (tuple(frags[3:]), tuple(frags[:3]), 30)


def test_no_ops_are_invisible():
    assert rules.visible(False) and not rules.visible(True)


A, B, C, D = ("a",), ("b",), ("c",), ("d",)


@pytest.mark.parametrize(
    ("ours", "at_start", "fresh", "expected"),
    [
        # nothing changed under the takeover
        ([(0, A), (5, B)], [(0, A), (5, B)], [(0, A), (5, B)], ((0, A), (5, B))),
        # a trim dropped the first fragment; the write-back replaced a bookie at 7
        ([(0, A), (5, B), (7, C)], [(0, A), (5, B)], [(5, B)], ((5, B), (7, C))),
        # a trim of a stream with three fragments, write-back unchanged
        ([(0, A), (5, B), (9, C)], [(0, A), (5, B), (9, C)], [(9, C)], ((9, C),)),
        # the last fragment changed: another writer, never rebased
        ([(0, A), (5, B)], [(0, A), (5, B)], [(0, A), (5, D)], None),
        ([(0, A), (5, B)], [(0, A), (5, B)], [(0, A), (5, B), (8, D)], None),
    ],
)
def test_rebase_fragments_after_a_trim(ours, at_start, fresh, expected):
    assert rules.rebase_fragments(ours, at_start, fresh) == expected


@pytest.mark.parametrize(
    ("entry_term", "floor", "leftover"),
    [
        (1, 0, False),  # nothing recovered yet
        (2, 2, False),  # the same term as the entry below
        (3, 2, False),  # a newer term after an older one (its takeover recovered them)
        (1, 2, True),  # an older term above a newer term's entry: never acknowledged
        (None, 1, False),  # an entry without a term is never judged a leftover
    ],
)
def test_older_leftover(entry_term, floor, leftover):
    assert older_leftover(entry_term, floor) is leftover


def test_entries_carry_their_term():
    termed = TERM.pack(7) + b"payload"
    assert split_term(FLAG_TERM, termed) == (7, b"payload")
    assert split_term(FLAG_TERM | FLAG_NOOP, TERM.pack(3)) == (3, b"")
    assert split_term(0, b"payload") == (None, b"payload")  # bounded ledgers' entries


@pytest.mark.parametrize(
    ("lafr", "at_start", "recovery", "sent"),
    [
        (5, 2, False, 5),  # a term's writer: its LAFR, the metadata places every write set
        (5, 2, True, 2),  # a takeover's write-back: what it started from, not its progress
        (2, 2, True, 2),
        (-1, -1, True, -1),
    ],
)
def test_a_takeover_s_recovery_writes_do_not_advance_the_lafr(lafr, at_start, recovery, sent):
    # Its write sets exist only in its memory until the closing CAS; an aborted takeover
    # would leave a LAFR that a later takeover trusts over a write set holding two
    # payloads (the simulator's seed 393 of `unbounded`).
    assert rules.lafr_to_send(lafr, at_start, recovery=recovery) == sent
