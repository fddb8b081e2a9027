"""A ledger's state change (a fence, a raised term) is durable before any answer relies on it.

A recovery counts a bookie's NoSuchEntry as a negative only because the bookie is fenced
(or holds the recovery's term): the old writer can never again reach it. If the fence or
term is not yet durable when the bookie answers, a crash forgets it and the old writer
gets its entry acknowledged after the recovery decided that entry was never written.
The first request that changes the state waits for its journal record; these tests are
about every other request that finds the change already made in memory.
"""

from __future__ import annotations

import asyncio
import errno

from harness import KEY, entry

from embedlog.bookie.files import AppendFile
from embedlog.transport.server import BookieGoneError
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import AddFlags, OpCode, ReadFlags, Request

LONG = 3600.0


def _no_space(*_args, **_kw):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_fence_that_failed_to_journal_is_never_relied_on(harness, monkeypatch):
    h = harness(flush_interval=LONG)
    h.boot()
    assert h.add(1, 0).status == StatusCode.EOK
    monkeypatch.setattr(AppendFile, "append_parts", _no_space)
    assert h.read(1, -1, flags=ReadFlags.FENCE).status == StatusCode.EIO
    # The fence is in memory only: a recovery read must not get a negative it relies on.
    late = h.read(1, 1, flags=ReadFlags.FENCE | ReadFlags.RECOVERY)
    assert late.status == StatusCode.EIO, late
    monkeypatch.undo()
    h.crash()
    h.boot()
    # What the damage would have been: the old writer's entry 1 is acknowledged now.
    assert h.add(1, 1).status == StatusCode.EOK


def test_a_raised_term_that_failed_to_journal_is_never_relied_on(harness, monkeypatch):
    h = harness(flush_interval=LONG)
    h.boot()
    assert h.add(1, 0, term=1).status == StatusCode.EOK
    monkeypatch.setattr(AppendFile, "append_parts", _no_space)
    assert h.read(1, -1, term=2).status == StatusCode.EIO
    late = h.read(1, 1, term=2, flags=ReadFlags.RECOVERY)
    assert late.status == StatusCode.EIO, late
    monkeypatch.undo()
    h.crash()
    h.boot()
    assert h.add(1, 1, term=1).status == StatusCode.EOK  # term 2 was never durable


def _fence_race(h, second: Request):
    """A fencing read whose record is still in the journal's group wait, then ``second``;
    the bookie crashes before the group is written. Returns the second's outcome."""

    async def race():
        first = asyncio.ensure_future(
            h.serve(Request(OpCode.READ, 1, 1, -1, flags=ReadFlags.FENCE, master_key=KEY))
        )
        await asyncio.sleep(0.05)
        assert not first.done()  # the fence's record waits for its group
        answer = asyncio.ensure_future(h.serve(second))
        await asyncio.sleep(0.05)
        h.bookie.crash()
        return await asyncio.gather(first, answer, return_exceptions=True)

    return h.run(race())


def test_a_fence_still_in_the_journal_is_waited_for(harness):
    h = harness(flush_interval=LONG)
    h.boot()
    assert h.add(1, 0).status == StatusCode.EOK
    h.bookie.journal.max_group_wait = 5.0  # what comes next waits in the journal's group
    fence_read = Request(
        OpCode.READ, 2, 1, 1, flags=ReadFlags.FENCE | ReadFlags.RECOVERY, master_key=KEY
    )
    first, second = _fence_race(h, fence_read)
    # Neither answered: the fence was not durable when the bookie crashed.
    assert isinstance(first, BookieGoneError), first
    assert isinstance(second, BookieGoneError), second
    h.boot()
    assert h.add(1, 1).status == StatusCode.EOK  # the fence was indeed lost


def test_an_add_of_a_new_term_is_durable_before_a_read_relies_on_its_term(harness):
    h = harness(flush_interval=LONG)
    h.boot()
    h.bookie.journal.max_group_wait = 5.0  # what comes next waits in the journal's group

    async def race():
        add = asyncio.ensure_future(
            h.serve(Request(OpCode.ADD, 1, 1, 0, term=2, master_key=KEY, body=entry(1, 0)))
        )
        await asyncio.sleep(0.05)
        read = asyncio.ensure_future(
            h.serve(Request(OpCode.READ, 2, 1, 1, term=2, flags=ReadFlags.RECOVERY, master_key=KEY))
        )
        await asyncio.sleep(0.05)
        h.bookie.crash()
        return await asyncio.gather(add, read, return_exceptions=True)

    add, read = h.run(race())
    assert isinstance(add, BookieGoneError), add
    assert isinstance(read, BookieGoneError), read
    h.boot()
    assert h.add(1, 1, term=1).status == StatusCode.EOK  # term 2 was indeed lost


def test_answers_after_the_fence_is_durable_do_not_wait(harness):
    h = harness(flush_interval=LONG)
    h.boot()
    assert h.add(1, 0).status == StatusCode.EOK
    assert h.read(1, -1, flags=ReadFlags.FENCE).status == StatusCode.EOK
    assert h.read(1, 1, flags=ReadFlags.FENCE).status == StatusCode.ENOENTRY
    assert h.read(1, 0, flags=ReadFlags.FENCE).status == StatusCode.EOK
    assert h.add(1, 1).status == StatusCode.EFENCED
    assert h.add(1, 1, flags=AddFlags.RECOVERY).status == StatusCode.EOK
