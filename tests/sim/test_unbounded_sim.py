"""The simulator's unbounded streams: each unsafe switch of the streams (and
unknown-as-negative) is caught at the first seed found to break it, and invariant 4 sees
an entry acknowledged with fewer than AQ copies (test_every_scenario.py runs the clean
seeds of every scenario)."""

from __future__ import annotations

import pytest

from embedlog.testing.scenarios import UNSAFE
from embedlog.testing.sim import run_seed

# Each switch with the first seed (from 0) of its scenario that violates an invariant
# with it; `embedlog chaos --unsafe NAME --seeds 500` therefore exits 1. Re-found after
# any change to the simulator or the protocol code (docs/simulation.md, the table).
FIRST = {
    "no-truncate-noop": 13,
    "unknown-as-negative": 19,
    "ack-during-replacement": 26,
    "recovery-ignores-term": 17,
}


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


# A seed of `unbounded` whose history, with `ack-from-replaced-bookie`, acknowledges
# stream entries with one copy in their metadata write set (the replaced bookie held
# the other). Every entry still reads back: AckedByAckQuorum sees it at the ack,
# LafrIsFullyReplicated when the writer's LAFR passes such an entry (the replaced
# bookie's confirmation counted), and invariant 4 at the end.
STREAM_UNDER_REPLICATED_SEED = 58


def test_a_stream_entry_acknowledged_with_fewer_than_aq_copies_is_caught():
    bad = run_seed(
        STREAM_UNDER_REPLICATED_SEED,
        "unbounded",
        unsafe="ack-from-replaced-bookie",
        keep_trace=False,
    )
    assert {v.invariant for v in bad.violations} == {
        "AckedByAckQuorum",
        "LafrIsFullyReplicated",
        "AllCommittedEntriesReachAckQuorum",
    }
    # Seen where it was decided (the LAFR that passed it went out before the ack's
    # callback ran), long before the end.
    assert bad.violations[0].invariant in {"AckedByAckQuorum", "LafrIsFullyReplicated"}
    assert "fewer than AQ = 2" in bad.violations[-1].detail
    good = run_seed(STREAM_UNDER_REPLICATED_SEED, "unbounded", keep_trace=False)
    assert good.ok and good.counts["check.ack_quorum_entries"] > 0
    assert good.counts["check.acked_by_ack_quorum"] > 0
