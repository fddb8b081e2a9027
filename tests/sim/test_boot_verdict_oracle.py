"""Whether a bookie may have lost what it acknowledged is taken from the history's
faults, never from the bookie's verdict on its own boot (issue #31 item 1): a test-only
mutant whose boot, with nothing wrong (the journal on, no fault), reports journal damage
and drops its tombstones is caught when its old writer's late add brings a deleted
ledger back. An oracle that trusted the verdict forgave it."""

from __future__ import annotations

from verdict_mutants import damage_verdict_drops_tombstones, oracle_trusting_the_verdict

from embedlog.testing.oracle_streams import DELETE_RULE
from embedlog.testing.sim import run_seed

SCENARIO = "unbounded-streams"  # journal on, no wipes: every boot's verdict should be clean
# The first seed (from 0) where the mutant is caught and the trusting oracle forgives it;
# a change may move it: the test then searches up to SEARCH seeds and says where to pin it.
FIRST = 48
SEARCH = 300


def _invariants(seed: int, *, trusting: bool = False) -> list[str]:
    with damage_verdict_drops_tombstones():
        if not trusting:
            result = run_seed(seed, SCENARIO, keep_trace=False)
        else:
            with oracle_trusting_the_verdict():
                result = run_seed(seed, SCENARIO, keep_trace=False)
    return [v.invariant for v in result.violations]


def test_a_boot_whose_own_verdict_excuses_what_it_lost_is_caught():
    for seed in [FIRST, *range(SEARCH)]:
        caught = _invariants(seed)
        if DELETE_RULE in caught and not _invariants(seed, trusting=True):
            break
    else:
        raise AssertionError(f"the mutant is not caught in {SEARCH} seeds of {SCENARIO}")
    if seed != FIRST:
        print(f"the mutant is caught at seed {seed} of {SCENARIO} now (pinned: {FIRST})")
    assert run_seed(seed, SCENARIO, keep_trace=False).ok  # the real boot holds
