"""A follower's wait brings the new entries along (follow.wait_and_read): they are read by
the metadata it had while that metadata is re-read, and kept only when the re-read finds
the same version, so they are still placed by metadata read after their LAC."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import attrs

from embedlog.unbounded import follow, tailing

IDLE = 30.0


def _wait_and_read(follower: Any, md: Any, previous: int) -> tuple[int, Any, Any]:
    return follower.runtime.run(
        follow.wait_and_read(follower.ctx, md, follower.digester, previous, 5.0, 256)
    )


def test_the_wait_brings_the_entries_read_while_the_metadata_is_re_read(cluster, monkeypatch):
    writer = cluster.client("w").create_unbounded(3, 3, 2)
    for i in range(3):
        writer.append(b"entry %d" % i)
    follower = cluster.client("f").open_unbounded(writer.ledger_id, takeover=False)
    md = follower.metadata
    events: list[str] = []
    real_read, real_meta = follow.read_range, follow.current_metadata

    async def read_range(*args: Any) -> Any:
        events.append("read")
        return await real_read(*args)

    async def current_metadata(*args: Any) -> Any:
        events.append("metadata asked")
        for _ in range(5):  # a store's round trip, in loop turns
            await asyncio.sleep(0)
        events.append("metadata answered")
        return await real_meta(*args)

    monkeypatch.setattr(follow, "read_range", read_range)
    monkeypatch.setattr(follow, "current_metadata", current_metadata)
    lac, fresh, rows = _wait_and_read(follower, md, -1)
    assert lac >= 1  # entry 2's LAC may still be on its way (the prompt LAC)
    assert fresh.version == md.version
    assert rows is not None
    assert [eid for eid, _hdr, _payload in rows] == list(range(lac + 1))
    assert [e.data for e in follow.visible(fresh, rows)] == [
        b"entry %d" % i for i in range(lac + 1)
    ]
    # Side by side: the entries were asked for before the metadata's answer came.
    assert events.index("read") < events.index("metadata answered")


def test_entries_read_by_metadata_that_changed_meanwhile_are_dropped(cluster):
    writer = cluster.client("w").create_unbounded(3, 3, 2)
    writer.append(b"entry 0")
    follower = cluster.client("f").open_unbounded(writer.ledger_id, takeover=False)
    older = attrs.evolve(follower.metadata, version=follower.metadata.version - 1)
    lac, fresh, rows = _wait_and_read(follower, older, -1)
    assert lac == 0 and fresh.version == follower.metadata.version
    assert rows is None  # the caller reads them again, placed by the fresh metadata


def test_a_tail_yields_the_entries_its_wait_brought_without_reading_them_again(
    cluster, monkeypatch
):
    writer = cluster.client("w").create_unbounded(3, 3, 2)
    follower = cluster.client("f").open_unbounded(writer.ledger_id, takeover=False)
    tail = follower.tail(0, timeout=IDLE)
    reads: list[tuple[int, int]] = []
    real = follow.read_visible

    async def read_visible(ctx: Any, md: Any, digester: Any, first: int, last: int) -> Any:
        reads.append((first, last))
        return await real(ctx, md, digester, first, last)

    monkeypatch.setattr(follow, "read_visible", read_visible)
    got = []
    for i in range(5):
        writer.append(b"entry %d" % i)
        got.append(next(tail))
    assert [(e.entry_id, e.data) for e in got] == [(i, b"entry %d" % i) for i in range(5)]
    # The tail waits before each entry (the writer appends only after the tail yielded
    # the one before), and every wait brought its entry: none was read on its own.
    assert reads == []
    tail.close()


def test_a_tail_step_costs_its_read_and_no_task_of_its_own(cluster, monkeypatch):
    """A step does its work in the task that runs it, and the tail's stop and the handle's
    close cancel that task: no task for the work, none watching the close."""
    writer = cluster.client("w").create_unbounded(3, 3, 2)
    for i in range(4):
        writer.append(b"entry %d" % i)
    follower = cluster.client("f").open_unbounded(writer.ledger_id, takeover=False)
    assert follower.last_add_confirmed >= 2  # known at the open: no step below waits
    monkeypatch.setattr(tailing, "TAIL_BATCH", 1)  # a step reads one entry
    loop = follower.runtime.loop
    made: list[str] = []
    real_create_task = type(loop).create_task

    def create_task(self: Any, coro: Any, **kwargs: Any) -> Any:
        made.append(getattr(coro, "__qualname__", "?"))
        return real_create_task(self, coro, **kwargs)

    tail = follower.tail(0, timeout=IDLE)
    cursor = tail._cursor
    first = follower.runtime.run(cursor.step())
    assert first is not None and [e.entry_id for e in first] == [0]
    monkeypatch.setattr(type(loop), "create_task", create_task)
    md = follower.metadata
    follower.runtime.run(follow.read_visible(follower.ctx, md, follower.digester, 1, 1))
    one_read = len(made)  # the read's own tasks and the runtime's task for the call
    made.clear()
    second = follower.runtime.run(cursor.step())
    assert second is not None and [e.entry_id for e in second] == [1]
    assert len(made) == one_read, made  # the read and the call
    tail.close()


def test_a_slow_wait_never_puts_back_metadata_older_than_another_users_view(cluster, monkeypatch):
    """Two users of one follower handle: a tail's wait (A) re-reads the metadata and then
    waits on its entries' read; meanwhile the writer changes ensemble and a read (B)
    keeps the newer metadata with a higher LAC. When A returns, the handle keeps B's
    version: entries up to that LAC are placed by metadata read after it."""
    cluster.add_bookie()
    writer = cluster.client("w").create_unbounded(3, 3, 2)
    for i in range(3):
        writer.append(b"entry %d" % i)
    follower = cluster.client("f").open_unbounded(writer.ledger_id, takeover=False)
    runtime = follower.runtime
    gate = runtime.run(_event())
    real = follow._read_or_none

    reading = threading.Event()

    async def held_read(*args: Any) -> Any:
        reading.set()  # A saw the LAC move and re-read the metadata
        await gate.wait()  # the entries' round trip, held open
        return await real(*args)

    monkeypatch.setattr(follow, "_read_or_none", held_read)
    waiting = runtime.submit(follower.wait_past(follower.last_add_confirmed, 5.0, 256))
    writer.append(b"entry 3")
    _wait(reading.is_set)
    cluster.crash_bookie(writer.metadata.last_fragment[1][0])
    for i in range(4, 8):
        writer.append(b"entry %d" % i)
    changed = writer.metadata.version
    monkeypatch.setattr(follow, "_read_or_none", real)
    assert follower.read_last_add_confirmed() >= 7  # B: the newer view
    assert follower.metadata.version == changed
    runtime.run(_set(gate))
    waiting.result(IDLE)  # A returns with the version it read before the change
    assert follower.metadata.version == changed
    tail = follower.tail(4, timeout=IDLE)
    assert [next(tail).data for _ in range(4)] == [b"entry %d" % i for i in range(4, 8)]
    tail.close()


async def _event() -> asyncio.Event:
    return asyncio.Event()


async def _set(event: asyncio.Event) -> None:
    event.set()


def _wait(condition: Any) -> None:
    deadline = time.monotonic() + IDLE
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)
