"""Table tests of BP-46's pure rules (embedlog/bookie/integrity.py)."""

from __future__ import annotations

import pytest

from embedlog.bookie.integrity import (
    Protection,
    assigned_entries,
    fragment_ranges,
    owes_entries,
    protection_for,
    repair_target,
    suspicion_reasons,
    takeover_needed,
)
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState


def md(**kw):
    base = dict(
        ledger_id=7,
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        fragments=[(0, ("a", "b", "c")), (10, ("a", "d", "c"))],
    )
    base.update(kw)
    return LedgerMetadata(**base)


@pytest.mark.parametrize(
    ("unclean", "nojournal", "cookies", "pending", "suspicious"),
    [
        (False, False, (), False, False),  # clean stop
        (True, False, (), False, False),  # crash with the journal on: nothing acked is lost
        (True, True, (), False, True),  # crash while adds skipped the journal
        (False, True, (), False, False),  # clean stop without the journal: all flushed
        (False, False, ("directory x has no cookie",), False, True),  # wiped disk
        (False, False, (), True, True),  # fixcookie or an interrupted phase one
    ],
)
def test_suspicion(unclean, nojournal, cookies, pending, suspicious):
    reasons = suspicion_reasons(
        unclean_shutdown=unclean,
        ran_without_journal=nojournal,
        cookie_problems=cookies,
        protection_pending=pending,
    )
    assert bool(reasons) is suspicious


@pytest.mark.parametrize(
    ("state", "unbounded", "owes", "skip", "expected"),
    [
        (LedgerState.OPEN, False, True, False, Protection(fence=True, limbo=True, term=None)),
        (LedgerState.IN_RECOVERY, False, True, False, Protection(True, True, None)),
        # Closed ledgers are fenced too: BP scenario 1 happens on a closed ledger.
        (LedgerState.CLOSED, False, True, False, Protection(True, True, None)),
        # Unbounded: the term is the fence; the current writer keeps writing.
        (LedgerState.OPEN, True, True, False, Protection(False, True, 5)),
        (LedgerState.CLOSED, True, True, False, Protection(True, True, None)),
        # Nothing of it owed here: a closed ledger is fenced all the same (a recovery
        # that fenced this bookie may have closed it without it; seed 924), an open
        # stream gets its term, an open bounded ledger nothing.
        (LedgerState.CLOSED, False, False, False, Protection(True, False, None)),
        (LedgerState.CLOSED, True, False, False, Protection(True, False, None)),
        (LedgerState.OPEN, True, False, False, Protection(False, False, 5)),
        (LedgerState.OPEN, False, False, False, Protection(False, False, None)),
        # The unsafe switch drops the fence, never the limbo.
        (LedgerState.OPEN, False, True, True, Protection(False, True, None)),
        (LedgerState.OPEN, True, True, True, Protection(False, True, None)),
        (LedgerState.CLOSED, False, False, True, Protection(False, False, None)),
    ],
)
def test_protection(state, unbounded, owes, skip, expected):
    m = md(state=state, unbounded=unbounded, term=5 if unbounded else -1)
    assert protection_for(m, owes=owes, skip_fence=skip) == expected


def test_fragment_ranges_clip_to_last_entry():
    m = md()
    assert list(fragment_ranges(m, 14)) == [(0, 9, ("a", "b", "c")), (10, 14, ("a", "d", "c"))]
    assert list(fragment_ranges(m, 4)) == [(0, 4, ("a", "b", "c"))]
    assert list(fragment_ranges(m, -1)) == []


def test_assigned_entries_follow_round_robin_write_sets():
    m = md()
    # E3 WQ2: entry e goes to ensemble[e%3], ensemble[(e+1)%3].
    got = dict(assigned_entries(m, "b", 12))
    assert sorted(got) == [0, 1, 3, 4, 6, 7, 9]  # "b" leaves the ensemble at entry 10
    assert got[0] == ["a"] and got[1] == ["c"]
    d = dict(assigned_entries(m, "d", 12))
    assert sorted(d) == [10, 12]  # ensemble (a, d, c): 10 -> d,c ... 11 -> c,a ... 12 -> a,d


def test_repair_target():
    assert repair_target(md(state=LedgerState.CLOSED, last_entry_id=12), "b") == 12
    assert repair_target(md(), "b") is None  # open bounded: recover first
    ub = md(unbounded=True, term=3)
    assert repair_target(ub, "b") == 9  # "b" is not in the last fragment: settled below it
    assert repair_target(ub, "a") is None  # still written to "a": take it over first
    # After a takeover that recovered up to its no-op at 14, everything "a" may have
    # acknowledged is at or below 14 (or was truncated): copy up to 14.
    assert repair_target(ub, "a", recovered_end=14) == 14
    assert repair_target(ub, "b", recovered_end=14) == 9  # not in the last fragment


@pytest.mark.parametrize(
    ("state", "bookie", "settled", "needed"),
    [
        # Listed only in a fragment the writer left: the metadata says what it owes.
        (LedgerState.OPEN, "b", False, False),
        # Still written to: the end is settled by a takeover (and never twice a boot).
        (LedgerState.OPEN, "a", False, True),
        (LedgerState.OPEN, "a", True, False),
        # Not listed at all: an ensemble change may still add it.
        (LedgerState.OPEN, "z", False, True),
        (LedgerState.OPEN, "z", True, False),
        # A takeover in flight may publish a last fragment that adds "b", with entries
        # it wrote back to "b" before the disk was lost (simulator seed 85).
        (LedgerState.IN_RECOVERY, "b", False, True),
        (LedgerState.IN_RECOVERY, "b", True, False),
        (LedgerState.CLOSED, "a", False, False),
    ],
)
def test_takeover_needed(state, bookie, settled, needed):
    ub = md(
        unbounded=True, term=3, state=state, last_entry_id=12 if state is LedgerState.CLOSED else -1
    )
    assert takeover_needed(ub, bookie, settled=settled) is needed
    assert takeover_needed(md(state=state), bookie, settled=settled) is False  # bounded: recovered


@pytest.mark.parametrize(
    ("state", "bookie", "held", "protect"),
    [
        (LedgerState.OPEN, "b", False, True),  # listed
        (LedgerState.CLOSED, "b", False, True),  # listed: what it owes is known
        (LedgerState.OPEN, "z", True, True),  # an ensemble change adding it may land
        (LedgerState.OPEN, "z", False, False),  # nothing of it here, nothing in flight
        (LedgerState.CLOSED, "z", True, False),  # closed without it: owes nothing
        # A recovery in flight may have written back to it in memory, and a crash without
        # the journal took even the ledger's record (simulator seed 189).
        (LedgerState.IN_RECOVERY, "z", False, True),
    ],
)
def test_owes_entries(state, bookie, held, protect):
    m = md(state=state, last_entry_id=12 if state is LedgerState.CLOSED else -1)
    assert owes_entries(m, bookie, held=held) is protect
