"""Whether a bookie may have lost what it acknowledged is the history's to say
(simlosses.py): which events may cost it, and which boot answers for them."""

from __future__ import annotations

import pytest

from embedlog.testing.simlosses import LossRecord, may_lose_acked


@pytest.mark.parametrize(
    ("event", "journal", "loses"),
    [
        ("wipe", True, True),
        ("wipe", False, True),
        ("rot", False, True),
        ("rot", True, True),
        ("crash", False, True),
        ("crash", True, False),  # the journal was synced before each ack
        ("unclean-stop", False, True),
        ("unclean-stop", True, False),
        ("boot-failed-on-disk", False, True),
        ("boot-failed-on-disk", True, False),
    ],
)
def test_which_events_may_cost_acknowledged_entries(event, journal, loses):
    assert may_lose_acked(event, journal=journal) is loses


def _boot(record: LossRecord, bid: str = "b1") -> bool:
    record.boot_begins(bid)
    return record.booted(bid)


def test_a_clean_history_loses_nothing_whatever_the_bookie_says():
    record = LossRecord(journal=True)
    assert not _boot(record)
    record.happened("b1", "crash")  # with the journal: nothing acknowledged is lost
    record.happened("b1", "unclean-stop")
    assert not _boot(record)


def test_a_loss_is_answered_for_by_the_next_successful_boot_only():
    record = LossRecord(journal=False)
    assert not _boot(record)
    record.happened("b1", "crash")
    record.happened("b2", "wipe")
    # Failed boots settle nothing: the one that succeeds after them answers for the crash.
    record.boot_begins("b1")
    record.boot_begins("b1")
    record.happened("b1", "boot-failed-on-disk")
    assert _boot(record)
    assert not _boot(record)  # settled
    assert _boot(record, "b2")


def test_an_event_after_a_boot_began_is_the_next_boots():
    record = LossRecord(journal=False)
    record.boot_begins("b1")
    # Crashed after it began serving, before the oracle heard it booted.
    record.happened("b1", "crash")
    assert not record.booted("b1")
    assert _boot(record)


def test_a_wipe_is_a_loss_with_the_journal_too():
    record = LossRecord(journal=True)
    record.happened("b1", "wipe")
    record.boot_begins("b1")  # fails (the cookie fix, the metadata): nothing settled
    assert _boot(record)
    assert not _boot(record)
