"""embedlog.aio: the public API awaited from an application's own event loop."""

from __future__ import annotations

import asyncio

import pytest

from embedlog import DigestType, InvalidTermError, LedgerState, UnauthorizedAccessError
from embedlog.aio import AsyncClient


def test_bounded_ledger_round_trip_from_another_loop(cluster):
    async def main() -> None:
        async with AsyncClient(cluster.client("app")) as client:
            wh = await client.create_ledger(3, 3, 2, digest=DigestType.MAC, password=b"pw")
            futures = [wh.add_nowait(b"e%d" % i) for i in range(500)]
            ids = await asyncio.gather(*futures)
            assert ids == list(range(500))
            assert await wh.add(b"last") == 500
            assert wh.last_add_confirmed == 500
            assert [e.data for e in await wh.read(0, 1)] == [b"e0", b"e1"]
            await wh.close()
            md = await client.ledger_metadata(wh.ledger_id)
            assert md.state is LedgerState.CLOSED and md.last_entry_id == 500
            assert wh.ledger_id in await client.list_ledgers()
            with pytest.raises(UnauthorizedAccessError):
                await client.open_ledger(wh.ledger_id, password=b"wrong")
            rh = await client.open_ledger(wh.ledger_id, password=b"pw")
            assert rh.is_closed and rh.last_add_confirmed == 500
            assert [e.data for e in await rh.read(499, 500)] == [b"e499", b"last"]
            await rh.close()
            await client.delete_ledger(wh.ledger_id)
            assert wh.ledger_id not in await client.list_ledgers()

    asyncio.run(main())


def test_the_applications_loop_keeps_running_while_it_waits(cluster):
    # A follower waiting for entries that do not come: the caller's loop still runs its
    # other tasks meanwhile (the waiting happens in a worker thread, not on the loop).
    ul = cluster.client("writer").create_unbounded(3, 3, 2)
    ul.append(b"x")
    ul.close()  # tells the bookies the final LAC: the follower sees x without waiting

    async def main() -> tuple[list[bytes], int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        t = asyncio.create_task(ticker())
        async with AsyncClient(cluster.client("app")) as client:
            follower = await client.open_unbounded(ul.ledger_id, takeover=False)
            seen = [e.data async for e in follower.tail(0, timeout=0.3)]
        t.cancel()
        return seen, ticks

    seen, ticks = asyncio.run(main())
    assert seen == [b"x"]
    assert ticks > 0


def test_unbounded_append_takeover_and_tail(cluster):
    async def main() -> None:
        a = AsyncClient(cluster.client("a"))
        b = AsyncClient(cluster.client("b"))
        ul = await a.create_unbounded(3, 3, 2, fragment_max_entries=50)
        ids = await asyncio.gather(*(ul.append_nowait(b"a%d" % i) for i in range(120)))
        assert ids == list(range(120))
        taken = await b.open_unbounded(ul.ledger_id)
        assert taken.term == ul.term + 1
        with pytest.raises(InvalidTermError):
            await ul.append(b"late")
        new_id = await taken.append(b"b0")
        await taken.trim(100)  # the whole fragments below entry 100 go
        await taken.close()  # tells the bookies the final LAC
        follower = await a.open_unbounded(ul.ledger_id, takeover=False)
        seen = [e async for e in follower.tail(0, timeout=0.5)]
        assert [e.data for e in seen] == [b"a%d" % i for i in range(100, 120)] + [b"b0"]
        assert seen[-1].entry_id == new_id
        assert [e.data for e in await follower.read(new_id, new_id)] == [b"b0"]
        for handle in (ul, follower):
            await handle.close()
        await a.close()
        await b.close()

    asyncio.run(main())
