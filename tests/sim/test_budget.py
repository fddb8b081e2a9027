"""The fault budget's decisions, as tables: what a history may still break."""

from __future__ import annotations

import pytest

from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.testing.simbudget import FaultBudget


def budget(*, lossy: int = 1, journal: bool = False, max_down: int = 2) -> FaultBudget:
    return FaultBudget(max_down=max_down, lossy_bookies=lossy, journal=journal)


@pytest.mark.parametrize(("down", "allowed"), [(0, True), (1, True), (2, False), (3, False)])
def test_a_bookie_may_go_down_while_the_ensemble_leaves_a_spare(down: int, allowed: bool) -> None:
    assert budget(max_down=2).may_take_down(down) is allowed


@pytest.mark.parametrize(
    ("lost", "reserved", "bid", "allowed"),
    [
        ((), None, "b1", True),  # the budget is untouched
        (("b1",), None, "b1", True),  # it lost its data already: costs nothing more
        (("b1",), None, "b2", False),  # a second lossy bookie is over the budget of one
        ((), "b1", "b1", True),  # held for a compound aim's wipe: that aim may
        ((), "b1", "b2", False),  # ... and nobody else meanwhile
    ],
)
def test_a_wipe_stays_within_the_lossy_budget(
    lost: tuple[str, ...], reserved: str | None, bid: str, allowed: bool
) -> None:
    b = budget(lossy=1)
    for x in lost:
        b.lost_data(x)
    if reserved is not None:
        b.reserve_lossy(reserved)
    assert b.may_wipe(bid) is allowed


def test_a_released_reservation_frees_the_budget() -> None:
    b = budget(lossy=1)
    b.reserve_lossy("b1")
    b.release_lossy("b1")
    assert b.may_wipe("b2")


def test_one_aims_release_leaves_anothers_reservation() -> None:
    # Two compound aims at once (budget of two): the first to end must not free the
    # budget the other still holds for its victim.
    b = budget(lossy=2)
    b.reserve_lossy("b1")
    b.reserve_lossy("b2")
    b.release_lossy("b2")
    b.lost_data("b3")
    assert b.may_wipe("b1")
    assert not b.may_wipe("b4")


def test_two_aims_holding_one_victim_hold_it_until_both_end() -> None:
    b = budget(lossy=1)
    b.reserve_lossy("b1")
    b.reserve_lossy("b1")
    b.release_lossy("b1")
    assert not b.may_wipe("b2")
    b.release_lossy("b1")
    assert b.may_wipe("b2")


@pytest.mark.parametrize(("journal", "allowed"), [(True, True), (False, False)])
def test_a_crash_loses_data_only_without_the_journal(journal: bool, allowed: bool) -> None:
    b = budget(lossy=1, journal=journal)
    b.lost_data("b1")
    assert b.may_lose("b2") is allowed
    assert b.may_lose("b1")


def md(*fragments: tuple[int, tuple[str, ...]]) -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=1, ensemble_size=3, write_quorum=3, ack_quorum=2, fragments=fragments
    )


@pytest.mark.parametrize(
    ("lost", "aborted", "lossy"),
    [
        ((), (), []),
        (("a",), (), []),  # one of AQ = 2: the other copy is there
        (("a", "b"), (), [("a", "b", "c")]),  # AQ of the first ensemble
        (("a",), ("b",), [("a", "b", "c")]),  # an abandoned boot counts as lossy here
        (("a", "d"), (), [("a", "c", "d")]),  # only the second ensemble
    ],
)
def test_an_ensemble_is_lossy_once_ack_quorum_of_its_bookies_lost_data(
    lost: tuple[str, ...], aborted: tuple[str, ...], lossy: list[tuple[str, ...]]
) -> None:
    b = budget(lossy=3)
    for x in lost:
        b.lost_data(x)
    for x in aborted:
        b.boot_aborted(x)
    assert b.lossy_fragments(md((0, ("a", "b", "c")), (10, ("a", "c", "d")))) == lossy
    assert b.lost_disks() == set(lost)  # an abandoned boot lost nothing on disk


def test_holds_of_a_nemesis_step_and_of_a_compound_aim() -> None:
    b = budget()
    b.busy("b1", True, combo=False)
    b.busy("b2", True)
    assert (b.is_busy("b1"), b.held_by_combo("b1")) == (True, False)
    assert (b.is_busy("b2"), b.held_by_combo("b2")) == (True, True)
    b.busy("b2", False)
    assert not b.is_busy("b2") and not b.held_by_combo("b2")


def test_unrecoverable_ledgers_are_remembered() -> None:
    b = budget()
    b.unrecoverable(7)
    assert b.is_unrecoverable(7) and not b.is_unrecoverable(8)
