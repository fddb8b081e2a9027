"""The journal's disk thread (embedlog/bookie/diskthread.py): work runs in order on one
thread, ``run_then`` reports back on the loop with one callback, and a journal group
costs exactly that: no executor future, no task, one wake-up of the loop."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import attrs
import pytest

from embedlog.bookie import journal, journal_replay
from embedlog.bookie.config import BookieConfig
from embedlog.bookie.disk import REAL_DISK
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


def test_shutdown_with_cancel_futures_cancels_what_the_thread_has_not_started():
    disk = DiskThread("test-disk")
    gate = threading.Event()
    running = threading.Event()
    ran: list[str] = []

    def block() -> bool:
        running.set()
        return gate.wait()

    started = disk.submit(block)
    queued = disk.submit(ran.append, "queued")
    running.wait()
    disk.shutdown(wait=False, cancel_futures=True)
    gate.set()
    assert started.result() is True  # the one running finishes
    assert queued.cancelled()
    disk.shutdown()  # a second call is a no-op
    assert ran == []
    with pytest.raises(RuntimeError, match="shut down"):
        disk.submit(print)


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
    assert [p for _lsn, p in journal_replay.Replay(config.journal_dir, 0)] == [RECORD]


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

        def stop_then_release(why: str) -> None:
            stop(why)  # the queued group is cancelled first, then the thread moves on
            gate.set()

        j._stop = stop_then_release  # type: ignore[method-assign]
        j.crash()
        return outcome[0]

    outcome, _loop = run(scenario)
    disk.shutdown()
    assert isinstance(outcome, OSError) and "crashed" in str(outcome)
    assert [p for _lsn, p in journal_replay.Replay(config.journal_dir, 0)] == [RECORD]


class SyncLog:
    """The real disk, whose journal files record what each fsync made durable (slowly,
    so that appends arrive while a group is being written)."""

    def __init__(self) -> None:
        self.durable: set[bytes] = set()
        self.unsynced: list[bytes] = []

    def open_append(self, path: Any) -> Any:
        inner = REAL_DISK.open_append(path)
        log = self

        class File:
            def __getattr__(self, name: str) -> Any:
                return getattr(inner, name)

            def append_parts(self, parts: list[bytes], *, durable: bool = False) -> int:
                log.unsynced.extend(parts)
                offset = int(inner.append_parts(parts))
                if durable:
                    self.sync()
                return offset

            def sync(self) -> None:
                time.sleep(0.03)
                inner.sync()
                log.durable.update(log.unsynced)
                log.unsynced.clear()

        return File()

    def __getattr__(self, name: str) -> Any:
        return getattr(REAL_DISK, name)


def test_an_append_from_a_durable_callback_is_acknowledged_after_its_own_fsync(tmp_path):
    """With a group wait, an append made by a durable callback (of the group just written)
    while another append also asks for a group: one hand-off at a time, and each record is
    acknowledged once, after an fsync that covered it."""
    (tmp_path / "journal").mkdir()
    config = attrs.evolve(BookieConfig("b1", tmp_path), journal_max_group_wait=0.01)
    disk, thread = SyncLog(), DiskThread("test-journal")
    acked: list[tuple[bytes, bool]] = []

    def record(tag: bytes) -> bytes:
        return b"S" + bytes(8) + b'{"r": "%s"}' % tag

    async def main() -> None:
        j = journal.Journal(config, thread, 0, disk=disk)
        j.start()

        def acknowledge(tag: bytes) -> Any:
            def done(exc: BaseException | None) -> None:
                assert exc is None
                acked.append((tag, any(tag in part for part in disk.durable)))

            return done

        def first(exc: BaseException | None) -> None:
            acknowledge(b"A")(exc)
            j.append_then(record(b"B"), acknowledge(b"B"))  # from the callback itself

        j.append_then(record(b"A"), first)
        await asyncio.sleep(0.075)  # B's group waits for company, then is written
        j.append_then(record(b"C"), acknowledge(b"C"))
        for _ in range(200):
            if len(acked) == 3:
                break
            await asyncio.sleep(0.01)
        await j.close()

    try:
        asyncio.run(main())
    finally:
        thread.shutdown()
    assert sorted(acked) == [(b"A", True), (b"B", True), (b"C", True)]
