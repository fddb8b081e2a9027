"""The simulator's virtual time and simulated disk."""

from __future__ import annotations

import asyncio

import pytest

from embedlog.testing.simloop import (
    SimDisk,
    SimulationStuckError,
    VirtualClockLoop,
)


def run(coro_fn):
    loop = VirtualClockLoop()
    try:
        return loop, loop.run_until_complete(coro_fn(loop))
    finally:
        loop.close()


def test_a_sleep_moves_virtual_time_by_exactly_its_length():
    async def main(loop):
        await asyncio.sleep(3600)
        return loop.time()

    _loop, now = run(main)
    assert now == pytest.approx(3600)


def test_timeouts_fire_at_their_virtual_deadline():
    async def main(loop):
        never = loop.create_future()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(never, 5.0)
        return loop.time()

    _loop, now = run(main)
    assert now == pytest.approx(5.0)


def test_a_timer_rearmed_for_the_rest_of_an_interval_terminates():
    # interval - elapsed can round to ~0: the loop must still move on (TICK).
    async def main(loop):
        start = loop.time()
        while loop.time() - start < 0.2:
            await asyncio.sleep(0.2 - (loop.time() - start))
        return loop.time()

    _loop, now = run(main)
    assert now >= 0.2


def test_waiting_for_what_never_comes_is_reported_not_hung():
    loop = VirtualClockLoop()
    try:
        with pytest.raises(SimulationStuckError):
            loop.run_until_complete(loop.create_future())
    finally:
        loop.close()


def test_disk_work_runs_in_order_after_its_latency_and_a_blocking_wait_runs_the_queue():
    done: list[str] = []

    async def main(loop):
        disk = SimDisk(loop, "d", lambda: 0.5, lambda _what: None)
        a = loop.run_in_executor(disk, done.append, "a")
        b = loop.run_in_executor(disk, done.append, "b")
        await a
        first = (loop.time(), list(done))
        await b
        second = loop.time()
        c = disk.submit(done.append, "c")
        c.result()  # a crash's or a close's wait: runs now, in order
        return first, second, list(done)

    _loop, (first, second, order) = run(main)
    assert first == (pytest.approx(0.5), ["a"])
    assert second == pytest.approx(1.0)
    assert order == ["a", "b", "c"]


def test_a_power_cut_loses_disk_work_not_yet_started():
    done: list[str] = []

    async def main(loop):
        disk = SimDisk(loop, "d", lambda: 0.5, lambda _what: None)
        f = disk.submit(done.append, "never")
        lost = disk.lose_pending()
        await asyncio.sleep(1)
        return lost, f.cancelled()

    _loop, (lost, cancelled) = run(main)
    assert (lost, cancelled, done) == (1, True, [])


def _callback_order(loop: asyncio.AbstractEventLoop) -> list[str]:
    """A program whose callbacks interleave (tasks, futures, call_soon chains, a stop in
    the middle of a batch, timers in order of their delays); the order they ran in."""
    log: list[str] = []

    def chain(name: str, n: int) -> None:
        log.append(f"{name}{n}")
        if n:
            loop.call_soon(chain, name, n - 1)

    async def worker(name: str, fut: asyncio.Future[str]) -> None:
        log.append(f"{name} starts")
        await asyncio.sleep(0)
        log.append(f"{name} got {await fut}")

    async def first() -> None:
        fut = loop.create_future()
        tasks = [loop.create_task(worker(n, fut)) for n in ("w1", "w2")]
        loop.call_soon(chain, "a", 3)
        loop.call_soon(chain, "b", 2)
        await asyncio.sleep(0)
        fut.set_result("x")
        loop.call_later(0.02, log.append, "late")
        loop.call_later(0.01, log.append, "early")
        handle = loop.call_later(0.015, log.append, "cancelled")
        handle.cancel()
        await asyncio.gather(*tasks)
        await asyncio.sleep(0.03)
        # Stop with callbacks still ready: they run at the next run, before its task.
        loop.call_soon(chain, "c", 2)
        loop.call_soon(loop.stop)
        loop.call_soon(chain, "d", 2)

    async def second() -> None:
        log.append("second")
        await asyncio.sleep(0)
        log.append("second again")

    loop.create_task(first())
    loop.run_forever()
    log.append("stopped")
    loop.run_until_complete(second())
    return log


def test_callbacks_run_in_asyncio_order():
    # The virtual loop runs its batches without returning to run_forever between them,
    # and fills handles itself: the order must stay asyncio's, or histories would change.
    expected = asyncio.SelectorEventLoop()
    try:
        want = _callback_order(expected)
    finally:
        expected.close()
    loop = VirtualClockLoop()
    try:
        got = _callback_order(loop)
    finally:
        loop.close()
    assert "stopped" in want and "late" in want and "cancelled" not in want
    assert got == want


def test_a_callback_that_raises_goes_to_the_exception_handler_as_in_asyncio():
    seen: list[dict[str, object]] = []

    def boom() -> None:
        raise ValueError("boom")

    async def main(loop):
        loop.set_exception_handler(lambda _loop, context: seen.append(context))
        handle = loop.call_soon(boom)
        await asyncio.sleep(0.1)
        return handle

    _loop, handle = run(main)
    assert len(seen) == 1
    assert isinstance(seen[0]["exception"], ValueError)
    assert seen[0]["handle"] is handle
    assert str(seen[0]["message"]).startswith("Exception in callback ")
    assert "boom" in str(seen[0]["message"])


def _cancellations(loop: asyncio.AbstractEventLoop) -> list[object]:
    """What cancelling timers does to the loop's count of cancelled timers (which decides
    when the heap is swept) and to the handles, pending, cancelled twice and already run;
    and the arguments callbacks of every arity run with."""
    seen: list[object] = []

    def count() -> int:
        return loop._timer_cancelled_count  # type: ignore[attr-defined,no-any-return]

    async def main() -> None:
        ran = loop.call_later(0.001, seen.append, "ran")
        await asyncio.sleep(0.01)
        pending = loop.call_later(5.0, seen.append, "never")
        before = count()
        pending.cancel()
        after_one = count()
        pending.cancel()
        ran.cancel()
        seen.append((after_one - before, count() - after_one, pending.cancelled()))
        seen.append((ran.cancelled(), pending._callback, pending._args))  # type: ignore[attr-defined]
        for args in ((), ("a",), ("a", "b"), ("a", "b", "c")):
            loop.call_soon(lambda *got: seen.append(got), *args)
            loop.call_later(0.001, lambda *got: seen.append(("later", *got)), *args)
        await asyncio.sleep(0.01)

    loop.run_until_complete(main())
    return seen


def test_timer_cancellation_and_callback_arguments_as_in_asyncio():
    # The virtual loop cancels its timers in one call and runs callbacks of up to one
    # argument without a starred call: the same effects as asyncio's, or the heap's
    # sweeps and the callbacks' arguments would differ.
    expected = asyncio.SelectorEventLoop()
    try:
        want = _cancellations(expected)
    finally:
        expected.close()
    loop = VirtualClockLoop()
    try:
        got = _cancellations(loop)
    finally:
        loop.close()
    assert want[:3] == ["ran", (1, 0, True), (True, None, None)]
    assert ("a", "b", "c") in want and ("later",) in want
    assert got == want
