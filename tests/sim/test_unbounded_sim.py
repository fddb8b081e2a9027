"""The simulator's unbounded streams: clean seeds hold every invariant, each unsafe switch
of the streams (and unknown-as-negative) is caught at the first seed found to break it.

CI budget: about 40 s (docs/simulation.md has the seeds/s).
"""

from __future__ import annotations

import pytest

from embedlog.testing.scenarios import UNSAFE
from embedlog.testing.sim import run_seed

SEEDS = {"unbounded": 25, "unbounded-nojournal": 20}

# Each switch with the first seed (from 0) of its scenario that violates an invariant
# with it; `embedlog chaos --unsafe NAME --seeds 500` therefore exits 1. Re-found after
# any change to the simulator or the protocol code (docs/simulation.md, the table).
FIRST = {
    "no-truncate-noop": 169,
    "unknown-as-negative": 5,
    "ack-during-replacement": 13,
    "recovery-ignores-term": 5,
}


@pytest.mark.parametrize("scenario", sorted(SEEDS))
def test_every_stream_seed_holds_every_invariant(scenario):
    totals: dict[str, int] = {}
    for seed in range(SEEDS[scenario]):
        result = run_seed(seed, scenario, keep_trace=False)
        assert result.ok, (
            f"seed {seed} of {scenario}: {[str(v) for v in result.violations]}; replay: "
            f"embedlog chaos --seeds 1 --start {seed} --scenario {scenario} --trace"
        )
        for k, v in result.counts.items():
            totals[k] = totals.get(k, 0) + v
    # The seeds did exercise what they are for: a workload that silently stopped taking
    # over, trimming or following would pass vacuously.
    for what in (
        "fault.crash",
        "fault.restart",
        "net.request_lost",
        "add.acked",
        "add.failed.InvalidTermError",  # writers displaced by takeovers
        "takeover.ok",
        "term_change",
        "path.truncate_noop",
        "path.recovery_write_back",
        "rollover",
        "trim",
        "follower.read",
    ):
        assert totals.get(what, 0) > 0, what


@pytest.mark.parametrize("switch", sorted(FIRST))
def test_each_stream_switch_is_caught_at_its_first_seed(switch):
    scenario, seed = UNSAFE[switch].scenario, FIRST[switch]
    caught = run_seed(seed, scenario, unsafe=switch)
    assert caught.violations, f"{switch} no longer breaks seed {seed} of {scenario}"
    # The same seed without the switch holds every invariant: the switch did it.
    assert run_seed(seed, scenario, keep_trace=False).ok
    # And the violation replays.
    again = run_seed(seed, scenario, unsafe=switch)
    assert again.trace_hash == caught.trace_hash
    assert [str(v) for v in again.violations] == [str(v) for v in caught.violations]


# Seeds that found a bug, each with the fix it needed: they stay clean.
FOUND = {
    # An aborted takeover's recovery writes had told bookies a LAFR over write sets that
    # lived only in its memory; a later takeover trusted it and skipped an id whose
    # metadata write set held an older term's entry and the aborted no-op
    # (unbounded/rules.py: lafr_to_send).
    # 133: a bookie whose journal failed under a term-raising read (disk full) kept the
    # new term in memory and answered the recovery's next read NoSuchEntry before a
    # crash forgot the term; the old writer then got that entry acknowledged
    # (BookieBase._state_durable). 85: a wiped bookie's repair trusted the metadata of a
    # ledger whose takeover was still in flight and had written entries back to it in a
    # last fragment it published later (integrity.takeover_needed).
    # 261: a rollover's TRIM ABOVE that was slow reached a bookie after the new
    # fragment's entries and dropped them (bookie/truncation.py: a term's truncation
    # keeps that term's entries). 247: a rollover switched fragments while a member of
    # the full one had never confirmed entries it held an older term's leftover for
    # (TermWriter._rollover waits for the LAFR).
    # 758: an ensemble change listed a replacement whose TRIM ABOVE got no answer; it
    # held an older term's entry at an acknowledged id and a follower read it there
    # (LedgerWriter._replace readies replacements before the compare-and-swap).
    "unbounded": (85, 133, 247, 261, 393, 758),
}


@pytest.mark.parametrize("scenario", sorted(FOUND))
def test_stream_seeds_that_found_a_bug_stay_clean(scenario):
    for seed in FOUND[scenario]:
        result = run_seed(seed, scenario, keep_trace=False)
        assert result.ok, (seed, [str(v) for v in result.violations])


# A seed of `unbounded` whose history, with `ack-from-replaced-bookie`, acknowledges
# stream entries with one copy in their metadata write set (the replaced bookie held
# the other). Every entry still reads back, so only invariant 4 sees it.
STREAM_UNDER_REPLICATED_SEED = 45


def test_invariant_4_catches_a_stream_entry_acknowledged_with_fewer_than_aq_copies():
    bad = run_seed(
        STREAM_UNDER_REPLICATED_SEED,
        "unbounded",
        unsafe="ack-from-replaced-bookie",
        keep_trace=False,
    )
    assert [v.invariant for v in bad.violations] == ["AllCommittedEntriesReachAckQuorum"]
    assert "fewer than AQ = 2" in bad.violations[0].detail
    good = run_seed(STREAM_UNDER_REPLICATED_SEED, "unbounded", keep_trace=False)
    assert good.ok and good.counts["check.ack_quorum_entries"] > 0
