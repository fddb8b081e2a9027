"""The oracle learns what a suspicious boot must protect from the history (the metadata
as the boot began), not from the bookie's limbo flags (issue #31 item 1): a test-only
mutant of BP-46 phase one that leaves closed ledgers out of limbo is caught, where an
oracle that trusted the flags forgot exactly the acknowledgements it had to check."""

from __future__ import annotations

from phase_one_mutants import closed_ledgers_out_of_limbo, recovered_ledgers_out_of_limbo
from seed_search import caught_then_clean

from embedlog.testing import simfaults
from embedlog.testing.sim import run_seed

SCENARIO = "bounded-nojournal"
# The first seed (from 0) the mutant violates; a change may move it: the test then
# searches up to SEARCH seeds and says where to pin it.
FIRST = 85
SEARCH = 300


def _violations(seed: int) -> list[str]:
    with closed_ledgers_out_of_limbo():
        return [str(v) for v in run_seed(seed, SCENARIO, keep_trace=False).violations]


def test_a_boot_that_leaves_an_owed_ledger_out_of_limbo_is_caught(monkeypatch):
    found = ((s, v) for s in [FIRST, *range(SEARCH)] if (v := _violations(s)))
    seed, violations = next(found, (None, []))
    assert seed is not None, f"the mutant is not caught in {SEARCH} seeds of {SCENARIO}"
    if seed != FIRST:
        print(f"the mutant is caught at seed {seed} now (pinned: {FIRST})")
    assert any(v.startswith("NoNegativeForAckedEntry") for v in violations), violations
    assert run_seed(seed, SCENARIO, keep_trace=False).ok  # the real phase one holds
    # An oracle that took the protected ledgers from what the boot did (its limbo flags)
    # instead of the history forgets the acknowledgements the mutant's boot left
    # unprotected: without the history's record it sees nothing.
    monkeypatch.setattr(simfaults.DiskNemesis, "boot_begins", lambda self, bid: None)
    assert _violations(seed) == []


# A write-back reached a bookie the metadata does not list yet (the recovery keeps its
# replacements in memory until it closes), which crashed without the journal and lost
# it; its boot left the ledger unprotected, and once the close listed it, it answered
# NoSuchLedger. Only the race scenarios' end probe asks that bookie for every entry its
# write sets give it (a final reader asks one bookie that has the entry).
RECOVERED_FIRST = 133
RECOVERED_SCENARIO = "bounded-nojournal-races"


def test_a_boot_that_leaves_a_ledger_under_recovery_out_of_limbo_is_caught():
    caught_then_clean(
        recovered_ledgers_out_of_limbo,
        RECOVERED_SCENARIO,
        RECOVERED_FIRST,
        SEARCH,
        "NoNegativeForAckedEntry",
        "probe.read",
    )
