"""The bookie's per-ledger memory (embedlog/bookie/ledgers.py): state records awaiting
their fsync, and the LAC long polls."""

from __future__ import annotations

import asyncio

import pytest

from embedlog.bookie.ledgers import LedgerTable


def test_a_record_is_waited_for_until_durable_then_forgotten():
    async def main() -> None:
        table = LedgerTable()
        record = asyncio.get_running_loop().create_future()
        table.journaled(1, record)
        waiter = asyncio.ensure_future(table.durable(1))
        await asyncio.sleep(0)
        assert not waiter.done() and table.unsynced(1) is record
        record.set_result(None)
        await waiter
        assert table.unsynced(1) is None
        await table.durable(1)  # nothing to wait for
        await table.durable(2)  # a ledger that never changed

    asyncio.run(main())


def test_a_record_that_failed_stays_and_fails_every_request_relying_on_it():
    async def main() -> None:
        table = LedgerTable()
        record = asyncio.get_running_loop().create_future()
        table.journaled(1, record)
        record.set_exception(OSError(28, "No space left on device"))
        await asyncio.sleep(0)
        assert table.unsynced(1) is record
        for _ in range(2):
            with pytest.raises(OSError):
                await table.durable(1)

    asyncio.run(main())


def test_an_older_record_made_durable_leaves_the_newer_one_waited_for():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        table = LedgerTable()
        older, newer = loop.create_future(), loop.create_future()
        table.journaled(1, older)
        table.journaled(1, newer)
        older.set_result(None)
        await asyncio.sleep(0)
        assert table.unsynced(1) is newer

    asyncio.run(main())


def test_a_waiter_cancelled_does_not_cancel_the_record():
    async def main() -> None:
        table = LedgerTable()
        record = asyncio.get_running_loop().create_future()
        table.journaled(1, record)
        waiter = asyncio.ensure_future(table.durable(1))
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.sleep(0)
        assert not record.cancelled() and table.unsynced(1) is record

    asyncio.run(main())


def test_lac_long_polls_wake_when_the_lac_moves_and_when_the_bookie_goes():
    async def main() -> None:
        table = LedgerTable()
        first, second, other = table.lac_waiter(1), table.lac_waiter(1), table.lac_waiter(2)
        woke: list[str] = []
        first.add_done_callback(lambda _: woke.append("first"))
        second.add_done_callback(lambda _: woke.append("second"))
        table.lac_moved(1)
        await asyncio.sleep(0)
        assert woke == ["first", "second"]  # in the order the polls came
        assert first.result() and second.result() and not other.done()
        table.lac_moved(3)  # nobody waiting: nothing to do
        gone = table.lac_waiter(2)
        gone.cancel()  # a poll cancelled while it waited
        later = table.lac_waiter(1)
        table.forget_waiter(1, later)  # its time was up
        table.wake_all()
        assert other.result() and not later.done()
        assert table.lac_waiter(1) is not later  # the next poll waits for the next move

    asyncio.run(main())
