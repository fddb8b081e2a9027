"""Disk faults in whole simulated histories: each is drawn within a bound of seeds, the
bookies survive them, and every invariant holds (the disk itself: test_simdisk.py)."""

from __future__ import annotations

import pytest

from embedlog.testing.sim import run_seed

SEEDS = 60
FAULTS = {
    "bounded": ("fault.torn_tail", "fault.disk_full", "fault.fsync_error", "fault.wipe"),
    # Without the journal data its files hold only state records: torn tails are rare
    # there (2 in 300 seeds), so this scenario is not held to them.
    "bounded-nojournal": ("fault.disk_full", "fault.fsync_error", "fault.wipe"),
}


@pytest.mark.parametrize("scenario", sorted(FAULTS))
def test_each_disk_fault_happens_and_every_invariant_holds(scenario):
    totals: dict[str, int] = {}
    torn_journals = 0
    for seed in range(SEEDS):
        result = run_seed(seed, scenario)
        assert result.ok, (
            f"seed {seed} of {scenario}: {[str(v) for v in result.violations]}; replay: "
            f"embedlog chaos --seeds 1 --start {seed} --scenario {scenario} --trace"
        )
        for k, v in result.counts.items():
            totals[k] = totals.get(k, 0) + v
        torn_journals += _torn_journal_boots(result.trace)
    for fault in FAULTS[scenario]:
        assert totals.get(fault, 0) > 0, (fault, totals)
    if scenario == "bounded":
        # A bookie whose journal a crash tore boots again, and its replay takes the torn
        # tail for what it is: no damage, so no suspicious boot for it.
        assert torn_journals > 0
    # Wiped bookies came back through the cookie fix, into BP-46 phase one.
    assert totals.get("bp46.phase_one", 0) >= totals["fault.wipe"] > 0


def _torn_journal_boots(trace: list[str]) -> int:
    """How many bookies booted after a crash tore their journal; fails if one of those
    boots found journal damage."""
    torn: set[str] = set()
    booted = 0
    for line in trace:
        words = line.split(" ", 4)
        if words[1:4:2] == ["disk-fault", "torn_tail"] and ".jnl" in line:
            torn.add(words[2])
        elif words[1] == "booted" and words[2] in torn:
            torn.discard(words[2])
            assert "journal /" not in line, line  # JournalDamage names the file
            booted += 1
    return booted
