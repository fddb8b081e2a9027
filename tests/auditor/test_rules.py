"""The auditor's pure rules: assigned entries, missing entries, marks, ensemble rewrites."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from embedlog.auditor.checker import Violation, placement_problems
from embedlog.auditor.rules import (
    analysis_stands,
    assigned_entries,
    bookies_to_ask,
    copy_sources,
    format_ids,
    fragment_ranges,
    may_swap_bookies,
    missing_entries,
    slot_entries,
    swap_bookie,
    underreplicated_too_long,
)
from embedlog.ledger.placement import RackAwarePlacement, RandomPlacement
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.metadata.striping import write_set
from embedlog.wire.availability import AvailabilityOfEntries


def closed(fragments, last, e=3, wq=2, aq=2) -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=7,
        ensemble_size=e,
        write_quorum=wq,
        ack_quorum=aq,
        fragments=fragments,
        state=LedgerState.CLOSED,
        last_entry_id=last,
    )


def open_(fragments, state=LedgerState.OPEN, e=3, wq=2, **kw) -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=7,
        ensemble_size=e,
        write_quorum=wq,
        ack_quorum=2,
        fragments=fragments,
        state=state,
        **kw,
    )


A, B, C = ("a", "b", "c"), ("a", "d", "c"), ("e", "d", "c")


@given(
    st.integers(1, 6).flatmap(
        lambda e: st.tuples(
            st.just(e),
            st.integers(1, e),
            st.integers(0, e - 1),
            st.integers(0, 40),
            st.integers(-1, 40),
        )
    )
)
def test_slot_entries_match_write_sets(args) -> None:
    e, wq, index, first, last = args
    want = [x for x in range(first, last + 1) if index in write_set(x, e, wq)]
    assert list(slot_entries(first, last, e, wq, index)) == want


def test_fragment_ranges_end_where_the_next_begins_and_at_the_last_entry() -> None:
    md = closed([(0, ("a", "b", "c")), (5, ("a", "d", "c")), (12, ("e", "d", "c"))], last=9)
    assert fragment_ranges(md) == [(0, 4, ("a", "b", "c")), (5, 9, ("a", "d", "c"))]
    assert fragment_ranges(closed([(0, ("a", "b", "c"))], last=-1)) == []


@pytest.mark.parametrize(
    ("md", "ranges"),
    [
        # Closed: every fragment, the last one ending at the last entry.
        (closed([(0, A), (5, B), (12, C)], last=20), [(0, 4, A), (5, 11, B), (12, 20, C)]),
        # Open or recovering: the sealed ones only, each ending where the next begins.
        (open_([(0, A), (5, B), (12, C)]), [(0, 4, A), (5, 11, B)]),
        (open_([(0, A), (5, B)], state=LedgerState.IN_RECOVERY), [(0, 4, A)]),
        (open_([(0, A)]), []),  # nothing sealed yet
        # Unbounded, trimmed from the front: nothing below the first fragment exists.
        (
            open_([(1000, A), (1500, B), (2000, C)], unbounded=True, term=4),
            [(1000, 1499, A), (1500, 1999, B)],
        ),
        (
            closed([(1000, A), (1500, B), (2000, C)], last=2100),
            [(1000, 1499, A), (1500, 1999, B), (2000, 2100, C)],
        ),
    ],
)
def test_fragment_ranges_by_state(md, ranges) -> None:
    assert fragment_ranges(md) == ranges


def test_open_ledger_assignments_stop_before_the_last_fragment() -> None:
    # Trimmed to entry 10, sealed up to 15, written by d, b, c from 16 on.
    md = open_([(10, A), (16, ("d", "b", "c"))], unbounded=True, term=2)
    # E3 WQ2: entry x goes to slots x%3 and (x+1)%3, from 10 to 15 only.
    assert assigned_entries(md) == {
        "a": [11, 12, 14, 15],
        "b": [10, 12, 13, 15],
        "c": [10, 11, 13, 14],
    }
    assert bookies_to_ask(md) == ["a", "b", "c"]  # d is only in the last fragment


@pytest.mark.parametrize(
    ("analysed", "latest", "stands"),
    [
        (open_([(0, A), (5, B)]), open_([(0, A), (5, B), (9, C)]), True),  # the writer moved on
        (open_([(0, A), (5, B)]), closed([(0, A), (5, B)], last=7), True),  # and closed it
        (open_([(0, A), (5, B)]), open_([(0, ("z", "b", "c")), (5, B)]), False),  # a swap
        (open_([(0, A), (5, B), (9, C)]), open_([(5, B), (9, C)]), False),  # a trim
        (closed([(0, A)], last=5), closed([(0, ("z", "b", "c"))], last=5), False),
        (open_([(0, A)]), open_([(0, A), (4, B)]), True),  # nothing was checked
    ],
)
def test_analysis_stands_while_checked_fragments_are_unchanged(analysed, latest, stands) -> None:
    assert analysis_stands(analysed, latest) is stands


@pytest.mark.parametrize(
    ("state", "may"),
    [(LedgerState.CLOSED, True), (LedgerState.OPEN, True), (LedgerState.IN_RECOVERY, False)],
)
def test_no_swap_while_a_recovery_rewrites_the_ledger(state, may) -> None:
    assert may_swap_bookies(open_([(0, A), (5, B)], state=state)) is may


def test_assigned_entries_follow_round_robin_per_fragment() -> None:
    md = closed([(0, ("a", "b", "c")), (3, ("a", "d", "c"))], last=5)
    # E3 WQ2: entry e goes to slots e%3 and (e+1)%3.
    assert assigned_entries(md) == {
        "a": [0, 2, 3, 5],
        "b": [0, 1],
        "c": [1, 2, 4, 5],
        "d": [3, 4],
    }


def test_missing_counts_only_bookies_that_answered() -> None:
    md = closed([(0, ("a", "b", "c"))], last=5)
    held = {
        "a": AvailabilityOfEntries.from_entry_ids([0, 2, 3]),  # lacks 5
        "b": AvailabilityOfEntries.from_entry_ids([]),  # ENOLEDGER: lacks 0,1,3,4
        # "c" did not answer: unknown, never missing
    }
    assert missing_entries(md, held) == {"a": [5], "b": [0, 1, 3, 4]}
    full = {b: AvailabilityOfEntries.from_entry_ids(ids) for b, ids in assigned_entries(md).items()}
    assert missing_entries(md, full) == {}


def test_underreplicated_too_long_is_strictly_over_the_threshold() -> None:
    assert not underreplicated_too_long(100.0, 160.0, 60.0)
    assert underreplicated_too_long(100.0, 160.5, 60.0)


def test_format_ids_collapses_runs_and_truncates() -> None:
    assert format_ids([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert format_ids(list(range(0, 40, 2)), limit=3) == "0,2,4,... (+17 more entries)"


def test_copy_sources_prefer_the_write_set_and_skip_the_target() -> None:
    md = closed([(0, ("a", "b", "c"))], last=5)
    held = {b: AvailabilityOfEntries.from_entry_ids(range(6)) for b in ("a", "b", "c")}
    assert copy_sources(md, 0, "a", held) == ["b", "c"]  # b is in entry 0's write set
    assert copy_sources(md, 1, "b", held) == ["c", "a"]
    held["c"] = AvailabilityOfEntries.from_entry_ids([])
    assert copy_sources(md, 1, "b", held) == ["a"]
    assert copy_sources(md, 1, "b", {"b": held["b"]}) == []


def test_swap_bookie_in_a_closed_ledger_rewrites_every_fragment() -> None:
    md = closed([(0, A), (3, B)], last=5)
    out = swap_bookie(md, "a", "e", fragment_ranges(md))
    assert out is not None
    assert out.fragments == ((0, ("e", "b", "c")), (3, ("e", "d", "c")))
    with pytest.raises(ValueError, match="already in the ensemble"):
        swap_bookie(md, "a", "d", fragment_ranges(md))
    assert swap_bookie(md, "zz", "e", fragment_ranges(md)) is None


def test_swap_bookie_in_an_open_ledger_keeps_the_writers_part() -> None:
    md = open_([(0, A), (5, B), (9, A)], unbounded=True, term=3, last_entry_id=-1)
    copied = fragment_ranges(md)  # (0-4) and (5-8); "a" is in every fragment
    out = swap_bookie(md, "a", "z", copied)
    assert out is not None
    swapped = ((0, ("z", "b", "c")), (5, ("z", "d", "c")))
    assert out.fragments == (*swapped, (9, A))  # never the last one
    assert (out.state, out.term, out.unbounded) == (LedgerState.OPEN, 3, True)

    # The writer started a fragment before our CAS: the copied one is still sealed as it was.
    rolled = md.with_ensemble(12, C)
    out = swap_bookie(rolled, "a", "z", copied)
    assert out is not None and out.fragments == (*swapped, (9, A), (12, C))
    # Trimmed meanwhile: what is left of the copied fragments is swapped, then nothing.
    out = swap_bookie(rolled.evolve(fragments=((5, B), (9, A), (12, C))), "a", "z", copied)
    assert out is not None and out.fragments == ((5, ("z", "d", "c")), (9, A), (12, C))
    assert swap_bookie(rolled.evolve(fragments=((9, A), (12, C))), "a", "z", copied) is None
    # Swapped by another auditor meanwhile: not ours to touch.
    other = md.evolve(fragments=((0, ("y", "b", "c")), (5, ("y", "d", "c")), (9, A)))
    assert swap_bookie(other, "a", "z", copied) is None


def test_placement_problems_by_fragment() -> None:
    md = closed([(0, ("a", "b", "c"))], last=5)
    racks = {"a": {"rack": "/r1"}, "b": {"rack": "/r1"}, "c": {"rack": "/r2"}}
    problems = placement_problems(RackAwarePlacement(), md, racks)
    assert problems and all("fragment starting at entry 0" in p for p in problems)
    assert placement_problems(RandomPlacement(), md, racks) == []
    spread = {"a": {"rack": "/r1"}, "b": {"rack": "/r2"}, "c": {"rack": "/r3"}}
    assert placement_problems(RackAwarePlacement(), md, spread) == []
    # A bookie without registration has no known rack: its fragment is not judged.
    assert placement_problems(RackAwarePlacement(), md, {"a": racks["a"], "b": racks["b"]}) == []


def test_violation_unpacks_as_a_triple() -> None:
    category, ledger_id, detail = Violation("durability", 3, "x")
    assert (category, ledger_id, detail) == ("durability", 3, "x")
    assert Violation("placement", 1, "y") == ("placement", 1, "y")


@st.composite
def ledgers_and_holdings(draw):
    e = draw(st.integers(1, 5))
    wq = draw(st.integers(1, e))
    last = draw(st.integers(-1, 60))
    low = draw(st.sampled_from([0, 0, 7]))  # 7: an unbounded ledger trimmed from the front
    starts = sorted(draw(st.sets(st.integers(low + 1, 60), max_size=3)))
    pool = [f"b{i}" for i in range(7)]
    frags = [(low, tuple(draw(st.permutations(pool))[:e]))]
    frags += [(s, tuple(draw(st.permutations(pool))[:e])) for s in starts]
    if draw(st.booleans()):
        md = closed(frags, last, e=e, wq=wq, aq=1)
        checked = range(low, last + 1)
    else:  # open: only the entries below the last fragment are sealed
        md = open_(frags, e=e, wq=wq)
        checked = range(low, frags[-1][0])
    truth = {}
    for eid in checked:
        ens = md.ensemble_for(eid)
        for i in write_set(eid, e, wq):
            truth.setdefault(ens[i], set()).add(eid)
    held = {}
    for b in pool:
        if draw(st.booleans()):  # this bookie answered
            have = truth.get(b, set()) - draw(st.sets(st.integers(0, 60)))
            have |= draw(st.sets(st.integers(0, 70), max_size=5))  # extra entries are harmless
            held[b] = AvailabilityOfEntries.from_entry_ids(have)
    return md, truth, held


@given(ledgers_and_holdings())
def test_missing_entries_match_a_brute_force_count(case) -> None:
    md, truth, held = case
    want = {
        b: sorted(ids - set(held[b].entry_ids()))
        for b, ids in truth.items()
        if b in held and ids - set(held[b].entry_ids())
    }
    assert missing_entries(md, held) == want
    assert assigned_entries(md) == {b: sorted(ids) for b, ids in truth.items()}
