"""An ack short of the ack quorum in a whole history (caught at the ack and by invariant
4), shrinking a violating seed, and seeds run in parallel."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from embedlog.testing.limits import Limits
from embedlog.testing.shrink import shrink
from embedlog.testing.sim import run_seed

SWITCH = "ack-from-replaced-bookie"
# A seed of `bounded` whose history, with the switch, acknowledges entries with one copy
# in their write set (the replaced bookie held the other) and passes without it.
UNDER_REPLICATED_SEED = 26


def test_an_entry_acknowledged_with_fewer_than_aq_copies_is_caught_at_the_ack():
    bad = run_seed(UNDER_REPLICATED_SEED, "bounded", unsafe=SWITCH, keep_trace=False)
    invariants = [v.invariant for v in bad.violations]
    assert set(invariants) == {"AckedByAckQuorum", "AllCommittedEntriesReachAckQuorum"}
    assert invariants[0] == "AckedByAckQuorum"  # where the writer counted the ack
    assert invariants[-1] == "AllCommittedEntriesReachAckQuorum"  # and at the end
    assert "fewer than AQ = 2" in bad.violations[-1].detail
    # No other invariant sees it: every acknowledged entry still reads back (one copy does).
    good = run_seed(UNDER_REPLICATED_SEED, "bounded", keep_trace=False)
    assert good.ok and good.counts["check.ack_quorum_entries"] > 0


def test_shrinking_keeps_the_violation_and_shortens_the_history():
    shrunk = shrink(UNDER_REPLICATED_SEED, "bounded", SWITCH)
    assert shrunk.invariant == "AckedByAckQuorum"
    assert shrunk.limits and shrunk.events < shrunk.original_events
    again = run_seed(
        UNDER_REPLICATED_SEED, "bounded", unsafe=SWITCH, keep_trace=False, limits=shrunk.limits
    )
    assert "AckedByAckQuorum" in [v.invariant for v in again.violations]
    assert again.events == shrunk.events
    assert f"--limit {shrunk.limits} " in shrunk.command()
    assert Limits.parse(str(shrunk.limits)) == shrunk.limits


def test_parallel_seeds_have_the_same_histories_as_serial_ones():
    # As the chaos command runs them: under PYTHONHASHSEED=0, workers spawned.
    hashes = []
    for jobs in ("1", "2"):
        argv = ["chaos", "--seeds", "3", "--start", "30", "--jobs", jobs, "--trace"]
        out = subprocess.run(
            [sys.executable, "-m", "embedlog", *argv],
            env=dict(os.environ, PYTHONHASHSEED="0"),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        hashes.append([x for x in out.splitlines() if re.match(r"seed \d+: trace hash", x)])
    assert len(hashes[0]) == 3
    assert hashes[0] == hashes[1]
