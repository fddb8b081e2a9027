"""LightFuture: the add future must behave as a concurrent.futures.Future in every way a
caller or the standard library can observe, while costing a few tracked objects."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import gc
import inspect
import re
import threading
import time

import pytest

from embedlog.ledger.future import FutureCondition, LightFuture, compatible, new_future


def test_this_cpython_gets_the_light_future():
    assert compatible()
    f = new_future()
    assert type(f) is LightFuture
    assert isinstance(f, cf.Future)


def test_stdlib_uses_only_the_condition_methods_we_provide():
    # LightFuture's condition offers the lock's methods plus wait and notify_all. If a
    # CPython release starts calling anything else on a future's _condition, this fails
    # before any caller does.
    src = inspect.getsource(cf._base)
    used = set(re.findall(r"_condition\.(\w+)", src))
    assert used <= {"acquire", "release", "wait", "notify_all"}, used
    for name in used:
        assert callable(getattr(FutureCondition(), name))


def _tracked_objects(obj: object) -> int:
    """Objects the collector tracks that belong to ``obj`` alone (not shared ones)."""
    seen = {id(obj)}
    todo = [obj]
    count = 1
    while todo:
        for ref in gc.get_referents(todo.pop()):
            if id(ref) in seen or not gc.is_tracked(ref) or isinstance(ref, type):
                continue
            seen.add(id(ref))
            count += 1
            todo.append(ref)
    return count


def test_a_future_is_a_few_tracked_objects_not_a_dozen():
    assert _tracked_objects(cf.Future()) >= 10  # what the stock one costs
    assert _tracked_objects(new_future()) <= 3


def test_result_waits_for_another_thread():
    f = new_future()
    assert f.set_running_or_notify_cancel()
    threading.Timer(0.05, f.set_result, (7,)).start()
    assert f.result(timeout=10) == 7
    assert f.done() and not f.cancelled() and not f.running()


def test_result_and_exception_time_out_when_nothing_completes_it():
    f = new_future()
    with pytest.raises(cf.TimeoutError):
        f.result(timeout=0.01)
    with pytest.raises(cf.TimeoutError):
        f.exception(timeout=0)
    f.set_result(1)  # a timed-out wait leaves the future usable
    assert f.result(timeout=0) == 1


def test_exceptions_travel_to_every_waiter():
    f = new_future()
    got: list[BaseException | None] = []
    threads = [threading.Thread(target=lambda: got.append(f.exception())) for _ in range(8)]
    for t in threads:
        t.start()
    time.sleep(0.05)  # let them all sleep on the condition
    f.set_exception(ValueError("boom"))
    for t in threads:
        t.join(10)
    assert len(got) == 8 and all(isinstance(e, ValueError) for e in got)
    with pytest.raises(ValueError, match="boom"):
        f.result()


def test_cancel_before_running_and_not_after():
    f = new_future()
    assert f.cancel() and f.cancelled()
    assert not f.set_running_or_notify_cancel()
    with pytest.raises(cf.CancelledError):
        f.result()
    g = new_future()
    assert g.set_running_or_notify_cancel()
    assert not g.cancel()
    g.set_result(1)
    with pytest.raises(cf.InvalidStateError):
        g.set_result(2)


def test_done_callbacks_run_once_in_order_and_at_once_when_done():
    f = new_future()
    calls: list[str] = []
    f.add_done_callback(lambda _: calls.append("a"))
    f.add_done_callback(lambda _: calls.append("b"))
    f.set_result(None)
    f.add_done_callback(lambda _: calls.append("c"))
    assert calls == ["a", "b", "c"]


def test_stdlib_wait_and_as_completed_work_across_threads():
    fs = [new_future() for _ in range(5)]
    for i, f in enumerate(fs):
        threading.Timer(0.01 * (5 - i), f.set_result, (i,)).start()
    done, _ = cf.wait(fs, timeout=10, return_when=cf.FIRST_COMPLETED)
    assert done
    order = [f.result() for f in cf.as_completed(fs, timeout=10)]
    assert sorted(order) == [0, 1, 2, 3, 4]
    done, not_done = cf.wait(fs, timeout=10)
    assert len(done) == 5 and not not_done


def test_asyncio_can_await_it():
    f = new_future()

    async def main() -> int:
        threading.Timer(0.02, f.set_result, (42,)).start()
        return await asyncio.wrap_future(f)

    assert asyncio.run(main()) == 42


def test_the_condition_refuses_use_without_its_lock():
    cond = FutureCondition()
    with pytest.raises(RuntimeError):
        cond.wait(0)
    with pytest.raises(RuntimeError):
        cond.notify_all()
    with cond, cond:  # reentrant, as threading.Condition's default RLock
        assert not cond.wait(0)
        cond.notify_all()


def test_write_handles_hand_out_light_futures(cluster):
    wh = cluster.client("w").create_ledger(3, 3, 2)
    f = wh.add_async(b"x")
    assert type(f) is LightFuture
    assert f.result(timeout=30) == 0
    wh.close()
