"""The journal's disk thread (embedlog/bookie/diskthread.py): work runs in order on one
thread, ``run_then`` reports back on the loop with one callback, and a journal group
costs exactly that: no executor future, no task, one wake-up of the loop."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from embedlog.bookie import journal
from embedlog.bookie.config import BookieConfig
from embedlog.bookie.diskthread import DiskThread

RECORD = b"S" + bytes(8) + b'{"a": 1}'  # a state record: a kind replay accepts


class CountingLoop(asyncio.SelectorEventLoop):
    """Counts the wake-ups other threads ask of it."""

    threadsafe = 0

    def call_soon_threadsafe(self, *args: Any, **kwargs: Any) -> asyncio.Handle:
        self.threadsafe += 1
        return super().call_soon_threadsafe(*args, **kwargs)


class CountingThread(DiskThread):
    submitted = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


def run(coro_fn: Any) -> tuple[Any, CountingLoop]:
    loop = CountingLoop()
    try:
        return loop.run_until_complete(coro_fn()), loop
    finally:
        loop.close()


def test_work_runs_in_order_and_reports_on_the_loop():
    disk = DiskThread("test-disk")
    ran: list[str] = []

    def fail() -> None:
        ran.append("fail")
        raise OSError("no space left")

    async def scenario() -> list[tuple[str, BaseException | None, bool]]:
        loop = asyncio.get_running_loop()
        loop_thread = threading.current_thread()
        reports: list[tuple[str, BaseException | None, bool]] = []
        both = loop.create_future()

        def done(name: str) -> Any:
            def report(outcome: BaseException | None) -> None:
                reports.append((name, outcome, threading.current_thread() is loop_thread))
                if len(reports) == 2:
                    both.set_result(None)

            return report

        disk.run_then(loop, ran.append, ("first",), done("first"))
        disk.run_then(loop, fail, (), done("fail"))
        assert await asyncio.wrap_future(disk.submit(lambda: ran.append("submitted") or 7)) == 7
        await both
        return reports

    reports, _loop = run(scenario)
    disk.shutdown()
    assert ran == ["first", "fail", "submitted"]
    assert [(name, on_loop) for name, _outcome, on_loop in reports] == [
        ("first", True),
        ("fail", True),
    ]
    assert reports[0][1] is None
    assert isinstance(reports[1][1], OSError) and "no space left" in str(reports[1][1])
    with pytest.raises(RuntimeError, match="shut down"):
        disk.submit(print)


def test_work_cancelled_before_the_thread_reaches_it_never_runs():
    disk = DiskThread("test-disk")
    gate = threading.Event()
    ran: list[str] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        blocked = disk.submit(gate.wait)
        work = disk.run_then(loop, ran.append, ("cancelled",), lambda _outcome: ran.append("told"))
        work.cancel()
        gate.set()
        await asyncio.wrap_future(blocked)
        await asyncio.wrap_future(disk.submit(ran.append, "after"))

    run(scenario)
    disk.shutdown()
    assert ran == ["after"]


def test_a_journal_group_costs_one_wake_up_of_the_loop_and_no_task(tmp_path):
    config = BookieConfig("b1", tmp_path)
    config.journal_dir.mkdir()
    disk = CountingThread("test-journal")

    async def scenario() -> tuple[int, int, int, set[asyncio.Task[Any]]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, CountingLoop)
        j = journal.Journal(config, disk, 0)
        j.start()
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        before = loop.threadsafe
        durable = j.append(RECORD)
        assert durable is not None
        await durable
        wakeups = loop.threadsafe - before
        submitted = disk.submitted
        j.crash()  # the file's crash runs on the disk thread through submit
        return wakeups, submitted, j.batches, tasks

    (wakeups, submitted, batches, tasks), _loop = run(scenario)
    disk.shutdown()
    assert batches == 1
    assert tasks == set(), "the journal runs a task of its own"
    assert submitted == 0, "the group went through an executor future"
    assert wakeups == 1
    assert [p for _lsn, p in journal.Replay(config.journal_dir, 0)] == [RECORD]


def test_a_group_the_crash_overtakes_is_never_written(tmp_path):
    config = BookieConfig("b1", tmp_path)
    config.journal_dir.mkdir()
    disk = DiskThread("test-journal")
    gate = threading.Event()

    async def scenario() -> BaseException | None:
        j = journal.Journal(config, disk, 0)
        j.start()
        j.append(RECORD)
        await j.sync()  # the file exists, durably, with one record
        disk.submit(gate.wait)  # the thread is busy: the next group waits behind this
        outcome: list[BaseException | None] = []
        j.append_then(RECORD + b"2", outcome.append)
        while not j._writing:  # handed to the thread (queued), loop turns only
            await asyncio.sleep(0)
        stop = j._stop

        def stop_then_release() -> None:
            stop()  # the queued group is cancelled first, then the thread moves on
            gate.set()

        j._stop = stop_then_release  # type: ignore[method-assign]
        j.crash()
        return outcome[0]

    outcome, _loop = run(scenario)
    disk.shutdown()
    assert isinstance(outcome, OSError) and "crashed" in str(outcome)
    assert [p for _lsn, p in journal.Replay(config.journal_dir, 0)] == [RECORD]
