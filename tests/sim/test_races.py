"""The race scenarios (faults aimed at protocol moments, embedlog/testing/simraces.py):
the switches the everyday scenarios do not catch are caught there, each at the first seed
found, and the aimed faults do happen.

CI budget: a few seconds per switch (docs/simulation.md has the figures).
"""

from __future__ import annotations

import pytest

from embedlog.testing.scenarios import SCENARIOS, UNSAFE
from embedlog.testing.sim import run_seed

# Each switch with the first seed (from 0) of its race scenario that violates an invariant
# with it and holds every invariant without it: `embedlog chaos --unsafe NAME --seeds 500`
# exits 1. Re-found after any change to the simulator or the protocol code
# (docs/simulation.md, the table).
FIRST = {
    # A fence lost to one bookie (the aimed losses): recovery reads it unfenced and gets
    # NoSuchEntry, closes the ledger at 9, and the old writer's held adds land there
    # afterwards: entries 2:10.. are acknowledged after the close
    # (NoDivergenceBetweenClientAndMetaData).
    "recovery-reads-without-fence": 76,
    # Limbo cleared up to the first add after the boot, which a resend of an older entry
    # does not bound: repair leaves acknowledged entry 0:0 with one copy in its write set
    # (AllCommittedEntriesReachAckQuorum).
    "limbo-clears-at-first-resend": 3,
    # BP-46 scenario 1: a bookie the recovery fenced reboots unfenced, and the writer's
    # entry 1:1 is acknowledged after the recovery closed the ledger at 0, with one
    # answer from its write set (NoDivergenceBetweenClientAndMetaData, AckedByAckQuorum).
    "no-fence-on-boot": 273,
    # Issue #12 race 1: a takeover's no-op leaves a bookie of the last fragment outside
    # its write set holding an old term's entry above it, and the stream read back holds
    # a writer's appends with a hole (StreamIsPrefixOfEachWriter).
    "dirty-entries-outside-noop-write-set": 9,
}


@pytest.mark.parametrize("switch", sorted(FIRST))
def test_each_race_switch_is_caught_at_its_first_seed(switch):
    scenario, seed = UNSAFE[switch].scenario, FIRST[switch]
    assert SCENARIOS[scenario].races
    assert seed < 500  # the bound
    caught = run_seed(seed, scenario, unsafe=switch)
    assert caught.violations, f"{switch} no longer breaks seed {seed} of {scenario}"
    # The same seed without the switch holds every invariant: the switch did it.
    clean = run_seed(seed, scenario, keep_trace=False)
    assert clean.ok, f"seed {seed} of {scenario} fails without {switch}: {clean.violations}"
    again = run_seed(seed, scenario, unsafe=switch, keep_trace=False)
    assert again.trace_hash == caught.trace_hash
    assert [str(v) for v in again.violations] == [str(v) for v in caught.violations]


def test_the_race_scenarios_aim_their_faults():
    # A race scenario that silently stopped aiming would catch nothing and pass vacuously.
    totals: dict[str, int] = {}
    for scenario, seeds in (("bounded-nojournal-races", 6), ("unbounded-races", 2)):
        for seed in range(seeds):
            result = run_seed(seed, scenario, keep_trace=False)
            for k, v in result.counts.items():
                totals[k] = totals.get(k, 0) + v
    for what in (
        "net.aimed_loss.fence",
        "net.aimed_loss.add",
        "net.late_add",
        "writer.pause",
        "fault.strike",
        "fault.aimed",
        "recovery.aimed",
        "probe.read",
        "recovery.blind.fence",
        "net.blind.fence",
        "net.gate_held",
        "net.held_fenced",
    ):
        assert totals.get(what, 0) > 0, what


def test_the_everyday_scenarios_draw_no_aimed_fault():
    result = run_seed(3, "bounded-nojournal", keep_trace=False)
    aimed = [k for k in result.counts if k.startswith(("net.aimed", "fault.strike", "writer.p"))]
    assert aimed == []
    assert not SCENARIOS["bounded-nojournal"].races
