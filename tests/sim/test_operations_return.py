"""The simulator's liveness rule, ``OperationsReturn``: every operation of the workload
returns (done, or failed with an error) within the workload's 120 virtual seconds. It
catches a deliberately broken build (liveness_mutants.py) at the seed pinned here, and
the same seed of today's code returns in time."""

from __future__ import annotations

import asyncio

from liveness_mutants import refusal_of_acked_ignored

from embedlog.testing.liveness import HEALED_LIMIT, judge_at_limit, retrying_finish
from embedlog.testing.sim import WORKLOAD_LIMIT, run_seed
from embedlog.testing.simloop import VirtualClockLoop

SCENARIO = "unbounded-streams"
PINNED = 12  # the first seed (from 0) where the mutant is caught
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


class _Violations:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def violate(self, invariant: str, detail: str) -> None:
        self.seen.append((invariant, detail))


def _on_virtual_loop(main):
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def test_at_the_limit_a_task_not_retrying_is_hung_and_a_retrying_one_goes_on():
    oracle = _Violations()

    async def main():
        async def waits_for_ever():
            await asyncio.Event().wait()

        stuck = asyncio.ensure_future(waits_for_ever())
        reader = asyncio.ensure_future(waits_for_ever())
        await asyncio.sleep(0)
        judged = judge_at_limit(oracle, {stuck, reader}, lambda t: t is reader, 120.0)
        assert judged.hung == [stuck] and judged.retrying == [reader]
        for t in (stuck, reader):
            t.cancel()

    _on_virtual_loop(main)
    ((rule, detail),) = oracle.seen
    assert rule == "OperationsReturn" and "waits_for_ever" in detail and "1 workload task" in detail


def test_a_task_retrying_at_the_limit_must_finish_once_healed():
    oracle = _Violations()

    async def main():
        async def finishes_soon():
            await asyncio.sleep(5.0)

        async def retries_for_ever():
            while True:
                await asyncio.sleep(1.0)

        done, never = (asyncio.ensure_future(c) for c in (finishes_soon(), retries_for_ever()))
        await retrying_finish(oracle, [done, never])
        assert done.done() and not done.cancelled()
        assert never.cancelled() or never.cancelling()
        return asyncio.get_running_loop().time()

    ended = _on_virtual_loop(main)
    assert ended == HEALED_LIMIT  # virtual seconds: it waited the whole bound, no more
    ((rule, detail),) = oracle.seen
    assert rule == "OperationsReturn" and "retries_for_ever" in detail and "healed" in detail
