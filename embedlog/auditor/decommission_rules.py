"""Decommissioning a bookie: its decisions as pure functions (tests: test_decommission_rules.py).

What is left to do for one ledger (``ledger_plan``), which replacement the cluster can
offer (``unplaceable``), and how a fragment that holds no entries is rewritten
(``swap_in_empty_fragments``). The copying and the swaps of fragments that hold entries
are re-replication's (``embedlog.auditor.replication``), and which fragments those are is
``rules.fragment_ranges``: one rule, one place.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from attrs import frozen

from embedlog.auditor.rules import fragment_ranges, replacement_exclusions
from embedlog.errors import NotEnoughBookiesError
from embedlog.ledger.placement import BookieInfo, PlacementPolicy
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState


@frozen
class LedgerPlan:
    """What a ledger still needs before it no longer lists the bookie."""

    # A fragment that holds entries and is sealed (any of a closed ledger, all but the last
    # of an open one) lists the bookie: copy its part, then swap (re-replication).
    sealed: bool = False
    # First entries of fragments that list the bookie and hold no entries at all (past a
    # closed ledger's end): nothing to copy, only the ensemble to rewrite.
    empty: tuple[int, ...] = ()
    # The last fragment of a ledger that is not closed lists the bookie. Its writer owns it
    # (or its recovery does): only that writer's ensemble change, or the ledger's close,
    # seals it. We wait.
    open_last: bool = False
    # Recovery (or an unbounded takeover) is rewriting the ledger: no swap now
    # (rules.may_swap_bookies); it ends with a CAS of its own, and then we go on.
    recovering: bool = False

    @property
    def done(self) -> bool:
        return not (self.sealed or self.empty or self.open_last)


def ledger_plan(md: LedgerMetadata, bookie: str) -> LedgerPlan:
    """What ``md`` still needs before no fragment of it lists ``bookie``."""
    if bookie not in md.bookies():
        return LedgerPlan()
    checked = {first for first, _last, ensemble in fragment_ranges(md) if bookie in ensemble}
    frags = md.fragments
    open_last = not md.is_closed and bookie in frags[-1][1]
    writers = 1 if not md.is_closed else 0  # an open ledger's last fragment is its writer's
    empty = tuple(
        first
        for first, ensemble in frags[: len(frags) - writers]
        if bookie in ensemble and first not in checked
    )
    return LedgerPlan(
        sealed=bool(checked),
        empty=empty,
        open_last=open_last,
        recovering=md.state is LedgerState.IN_RECOVERY,
    )


def unplaceable(
    md: LedgerMetadata,
    bookie: str,
    available: Mapping[str, BookieInfo],
    placement: PlacementPolicy,
) -> str | None:
    """Why no bookie of ``available`` can take ``bookie``'s place in ``md``, or None.

    The sealed fragments are asked as re-replication will ask (one replacement for all of
    them, outside every one of their ensembles); an open ledger's last fragment as its
    writer's ensemble change will (outside that ensemble). ``available``: the writable
    bookies, without ``bookie``.
    """
    pool = {b: info for b, info in available.items() if b != bookie}
    ranges = [r for r in fragment_ranges(md) if bookie in r[2]]
    asks: list[tuple[tuple[str, ...], set[str]]] = []
    if ranges:
        asks.append((ranges[0][2], replacement_exclusions(ranges)))
    plan = ledger_plan(md, bookie)
    if plan.open_last:
        asks.append((md.last_fragment[1], set()))
    for first in plan.empty:
        asks.append((tuple(md.ensembles[first]), set()))
    for ensemble, exclude in asks:
        try:
            placement.replace_bookie(
                list(ensemble), ensemble.index(bookie), md.write_quorum, pool, exclude
            )
        except NotEnoughBookiesError:
            others = sorted(pool)
            return (
                f"ledger {md.ledger_id} (ensemble size {md.ensemble_size}, write quorum "
                f"{md.write_quorum}) has {bookie} in the ensemble {list(ensemble)}, and no "
                f"other writable bookie can take its place ({len(others)} remain: "
                f"{', '.join(others) or 'none'})"
            )
    return None


def swap_in_empty_fragments(
    md: LedgerMetadata, bookie: str, new: str, firsts: Collection[int]
) -> LedgerMetadata | None:
    """``md`` with ``new`` in ``bookie``'s place in the fragments starting at ``firsts``
    that still list it and still hold no entries (``ledger_plan(...).empty``); None when
    none is left so. Nothing else changes (an open ledger's last fragment is never one of
    them). ValueError if ``new`` already sits in such a fragment."""
    still = set(ledger_plan(md, bookie).empty) & set(firsts)
    if not still:
        return None
    frags = []
    for first, ensemble in md.fragments:
        if first in still:
            if new in ensemble:
                raise ValueError(
                    f"ledger {md.ledger_id}: {new} is already in the ensemble {list(ensemble)}"
                )
            ensemble = tuple(new if b == bookie else b for b in ensemble)
        frags.append((first, ensemble))
    return md.evolve(fragments=tuple(frags))
