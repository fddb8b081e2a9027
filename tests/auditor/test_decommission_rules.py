"""Decommissioning's decisions as tables: what a ledger still needs, whether the remaining
bookies can take the bookie's place, and the rewrite of fragments without entries."""

from __future__ import annotations

import pytest

from embedlog.auditor.decommission_rules import (
    LedgerPlan,
    ledger_plan,
    swap_in_empty_fragments,
    unplaceable,
)
from embedlog.ledger.placement import RackAwarePlacement, RandomPlacement
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState

OPEN, RECOVERING, CLOSED = LedgerState.OPEN, LedgerState.IN_RECOVERY, LedgerState.CLOSED


def md(fragments, state=CLOSED, last=-1, e=3, wq=2, unbounded=False) -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=7,
        ensemble_size=e,
        write_quorum=wq,
        ack_quorum=2,
        fragments=[(first, tuple(ens)) for first, ens in fragments],
        state=state,
        last_entry_id=last,
        unbounded=unbounded,
    )


ABC, ABD, BCD, CDE = ("a", "b", "c"), ("a", "b", "d"), ("b", "c", "d"), ("c", "d", "e")


@pytest.mark.parametrize(
    ("fragments", "state", "last", "want"),
    [
        # not listed anywhere: nothing to do
        ([(0, BCD)], CLOSED, 9, LedgerPlan()),
        # a closed ledger's only fragment
        ([(0, ABC)], CLOSED, 9, LedgerPlan(sealed=True)),
        # a closed ledger's fragment past its end holds nothing: only the ensemble changes
        ([(0, BCD), (10, ABC)], CLOSED, 9, LedgerPlan(empty=(10,))),
        # an empty closed ledger: every fragment is empty
        ([(0, ABC)], CLOSED, -1, LedgerPlan(empty=(0,))),
        # open: the sealed fragment is copied, the last one is the writer's
        ([(0, ABC), (10, BCD)], OPEN, -1, LedgerPlan(sealed=True)),
        ([(0, BCD), (10, ABC)], OPEN, -1, LedgerPlan(open_last=True)),
        ([(0, ABC), (10, ABD)], OPEN, -1, LedgerPlan(sealed=True, open_last=True)),
        # a recovery is rewriting it: no swap until it ends
        ([(0, ABC), (10, ABD)], RECOVERING, -1, LedgerPlan(True, (), True, True)),
        # a recovering ledger that does not list it needs nothing, recovering or not
        ([(0, BCD)], RECOVERING, -1, LedgerPlan()),
    ],
)
def test_ledger_plan(fragments, state, last, want) -> None:
    plan = ledger_plan(md(fragments, state, last), "a")
    assert plan == want
    assert plan.done == (want == LedgerPlan())


def test_a_plan_is_done_only_when_no_fragment_lists_the_bookie() -> None:
    for fragments, state in [([(0, ABC)], OPEN), ([(0, BCD), (5, ABC)], CLOSED)]:
        assert not ledger_plan(md(fragments, state, last=3), "a").done


def infos(*ids: str, racks: dict[str, str] | None = None) -> dict[str, dict[str, object]]:
    return {b: {"rack": (racks or {}).get(b, "/default-rack")} for b in ids}


@pytest.mark.parametrize("policy", [RackAwarePlacement(), RandomPlacement()])
@pytest.mark.parametrize(
    ("fragments", "state", "available", "refused"),
    [
        # E=3 with b, c and d left: d can take a's place
        ([(0, ABC)], CLOSED, ("b", "c", "d"), False),
        # only the ensemble's other members are left: nobody can
        ([(0, ABC)], CLOSED, ("b", "c"), True),
        # the decommissioned bookie itself is never a candidate
        ([(0, ABC)], CLOSED, ("a", "b", "c"), True),
        # sealed fragments get one replacement outside all of them (re-replication's rule)
        ([(0, ABC), (10, ABD)], CLOSED, ("b", "c", "d"), True),
        ([(0, ABC), (10, ABD)], CLOSED, ("b", "c", "d", "e"), False),
        # the open last fragment: the writer's ensemble change needs a bookie outside it
        ([(0, BCD), (10, ABC)], OPEN, ("b", "c"), True),
        ([(0, BCD), (10, ABC)], OPEN, ("b", "c", "d"), False),
        # an empty fragment past a closed ledger's end still needs a bookie for its ensemble
        ([(0, BCD), (10, ABC)], CLOSED, ("b", "c"), True),
        # not listed: nothing to place
        ([(0, CDE)], CLOSED, (), False),
    ],
)
def test_unplaceable(policy, fragments, state, available, refused) -> None:
    why = unplaceable(md(fragments, state, last=12), "a", infos(*available), policy)
    assert (why is not None) == refused, why
    if refused:
        assert "ledger 7" in why and "ensemble size 3" in why and "no other writable" in why


def test_swap_in_empty_fragments_leaves_fragments_with_entries_alone() -> None:
    before = md([(0, ABC), (10, ABD)], CLOSED, last=9)
    after = swap_in_empty_fragments(before, "a", "e", [10])
    assert after is not None
    assert after.fragments == ((0, ABC), (10, ("e", "b", "d")))
    assert ledger_plan(after, "a") == LedgerPlan(sealed=True)
    # nothing left to do there: None; fragments named that hold entries are never touched
    assert swap_in_empty_fragments(after, "a", "d", [10]) is None
    assert swap_in_empty_fragments(before, "a", "e", [0]) is None


def test_swap_in_empty_fragments_never_touches_an_open_ledgers_last_fragment() -> None:
    open_md = md([(0, BCD), (10, ABC)], OPEN)
    assert swap_in_empty_fragments(open_md, "a", "e", [10]) is None


def test_swap_in_empty_fragments_refuses_a_bookie_twice_in_an_ensemble() -> None:
    with pytest.raises(ValueError, match="already in the ensemble"):
        swap_in_empty_fragments(md([(0, ABC)], CLOSED, last=-1), "a", "b", [0])
