"""The simulator's liveness rule, ``OperationsReturn``: every operation of the workload
returns (done, or failed with an error) within the workload's 120 virtual seconds. It
catches a deliberately broken build (liveness_mutants.py) at the seed pinned here, and
the same seed of today's code returns in time."""

from __future__ import annotations

from liveness_mutants import refusal_of_acked_ignored

from embedlog.testing.sim import WORKLOAD_LIMIT, run_seed

SCENARIO = "unbounded-streams"
PINNED = 6  # the first seed (from 0) where the mutant is caught
SEARCH = 100


def test_a_writer_that_ignores_a_refusal_of_an_acknowledged_entry_hangs_and_is_caught():
    with refusal_of_acked_ignored():
        caught = None
        for seed in [PINNED, *range(SEARCH)]:
            result = run_seed(seed, SCENARIO, keep_trace=True)
            if "OperationsReturn" in [v.invariant for v in result.violations]:
                caught = result
                break
    assert caught is not None, f"the mutant is not caught in {SEARCH} seeds"
    if caught.seed != PINNED:
        print(f"caught at seed {caught.seed} now (pinned: {PINNED}): re-pin it")
    # The stream's writer is what waited: its appends never returned.
    detail = next(str(v) for v in caught.violations if v.invariant == "OperationsReturn")
    assert "UnboundedWorkload.stream" in detail and "write_term" in detail, detail
    assert caught.virtual_seconds >= WORKLOAD_LIMIT
    assert any(" workload-limit " in line for line in caught.trace)
    # Today's code: the same seed's operations all return, long before the limit.
    clean = run_seed(caught.seed, SCENARIO, keep_trace=False)
    assert clean.ok, [str(v) for v in clean.violations]
    assert clean.virtual_seconds < WORKLOAD_LIMIT


def test_a_follower_still_retrying_reads_at_the_limit_is_not_hung():
    """A follower tails until it has read what it saw confirmed; a cluster whose faults
    keep failing its reads (seed 7076 of ``unbounded-races``: the bookies it asks crash
    and are wiped all along, and no takeover can repair the stream) keeps it retrying
    until the limit. Each read returned, failed: it waits for the cluster, as a tail
    does, and is counted, not judged a hung operation."""
    result = run_seed(7076, "unbounded-races", keep_trace=True)
    assert result.ok, [str(v) for v in result.violations]
    assert result.counts["workload.retrying_at_limit"] == 1
    assert any(line.endswith(" workload-limit 1 hung 0") for line in result.trace)
    assert sum(" read-failed f0 " in line for line in result.trace) > 20
