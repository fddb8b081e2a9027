"""tail(): followers see new entries promptly, across quiet spells, rollovers and takeovers."""

from __future__ import annotations

import threading

from embedlog.ledger.reader import read_lac

IDLE = 30.0  # tail's idle timeout: only reached if an entry never arrives


def test_tail_follows_a_quiet_writer(cluster):
    """The writer appends one entry and goes quiet: the LAC would only travel with the
    next entry; the writer's explicit LAC after its idle interval brings it to the follower."""
    writer = cluster.client("w").create_unbounded(3, 3, 2)
    follower = cluster.client("f").open_unbounded(writer.ledger_id, takeover=False)
    assert writer.append(b"only one") == 0
    got = next(follower.tail(0, timeout=IDLE), None)
    assert got is not None and (got.entry_id, got.data) == (0, b"only one")


def test_tail_without_explicit_lac_misses_the_quiet_writers_last_entry(cluster):
    """The protection removed (explicit_lac_interval=0): the follower waits for ever."""
    writer = cluster.client("w", explicit_lac_interval=0).create_unbounded(3, 3, 2)
    follower = cluster.client("f").open_unbounded(writer.ledger_id, takeover=False)
    writer.append(b"first")
    writer.append(b"second")  # carries LAC 0: "first" is confirmed
    first = next(follower.tail(0, timeout=IDLE), None)
    assert first is not None and first.data == b"first"
    # "second" waits for an entry that never comes: a second of silence shows it (a slow
    # machine can only make the silence longer).
    assert list(follower.tail(first.entry_id + 1, timeout=1.0)) == []


def test_tail_uses_long_poll_lac_reads(cluster):
    writer = cluster.client("w").create_unbounded(3, 3, 2)
    writer.append(b"a")
    f = cluster.client("f")
    md = f.ledger_metadata(writer.ledger_id)
    result = []

    def poll() -> None:
        result.append(f.runtime.run(read_lac(f.ctx, md, timeout_ms=30_000, previous=0)))

    t = threading.Thread(target=poll)
    t.start()
    writer.append(b"b")  # entry 1; its LAC reaches the bookies explicitly after idling
    t.join()
    assert result == [1]  # the bookie held the poll open and answered on progress


def test_tail_across_rollovers_and_takeovers(make_cluster):
    cluster = make_cluster(4)
    w1 = cluster.client("w1").create_unbounded(3, 3, 2, fragment_max_entries=7)
    follower = cluster.client("f").open_unbounded(w1.ledger_id, takeover=False)
    received: list[tuple[int, bytes]] = []
    want = 50

    def follow() -> None:
        for e in follower.tail(0, timeout=IDLE):
            received.append((e.entry_id, e.data))
            if len(received) == want:
                return

    t = threading.Thread(target=follow)
    t.start()
    acked = [(w1.append(b"one-%d" % i), b"one-%d" % i) for i in range(20)]
    w2 = cluster.client("w2").open_unbounded(w1.ledger_id)
    acked += [(w2.append(b"two-%d" % i), b"two-%d" % i) for i in range(20)]
    w3 = cluster.client("w3").open_unbounded(w1.ledger_id)
    acked += [(w3.append(b"three-%d" % i), b"three-%d" % i) for i in range(10)]
    t.join()
    assert received == acked  # every acked entry, in order, no no-ops, ids as acked


def test_a_step_cancelled_at_any_turn_leaves_the_position_where_it_was(cluster):
    """The step's caller gives up (its task is cancelled) at any loop turn of the step: the
    position moves past a batch only where the step returns it, so a cancelled step has
    moved it past nothing (no-ops aside) and the next step returns the batch."""
    import asyncio

    writer = cluster.client("w").create_unbounded(3, 3, 2)
    for i in range(3):
        writer.append(b"e%d" % i)
    writer.close()  # the bookies learn the final LAC
    follower = cluster.client("f").open_unbounded(writer.ledger_id, takeover=False)

    async def cancel_after(turns: int) -> tuple[bool, int, list[bytes]]:
        cursor = follower._tail_cursor(0, IDLE, None)
        step = asyncio.ensure_future(cursor.step())
        for _ in range(turns):
            await asyncio.sleep(0)
        step.cancel()
        try:
            got = [e.data for e in await step or []]
        except asyncio.CancelledError:
            got = []
        at = cursor.position
        while len(got) < 3:
            got += [e.data for e in await cursor.step() or []]
        return step.cancelled(), at, got

    cancelled = 0
    for turns in range(200):
        was_cancelled, at, got = cluster.runtime.run(cancel_after(turns))
        assert got == [b"e0", b"e1", b"e2"], turns
        if not was_cancelled:
            break  # the step returned before this many turns passed
        cancelled += 1
        assert at == 0, f"a step cancelled after {turns} turns moved the position to {at}"
    else:
        raise AssertionError("the step never returned")
    assert cancelled > 3  # the step waits several turns: the cancels hit inside it


def test_an_async_tail_cancelled_as_its_batch_arrives_hands_it_out_next(cluster):
    """``async for`` over a tail under a timeout: the waiting ``__anext__`` is cancelled
    when the batch has come back from the runtime but before the caller's loop took it.
    The next call hands out that batch instead of skipping it."""
    import asyncio
    import time

    from embedlog.aio import AsyncClient

    writer = cluster.client("w").create_unbounded(3, 3, 2)

    async def main() -> list[bytes]:
        async with AsyncClient(cluster.client("f")) as client:
            follower = await client.open_unbounded(writer.ledger_id, takeover=False)
            tail = follower.tail(0, timeout=IDLE)
            waiting = asyncio.ensure_future(tail.__anext__())
            await asyncio.sleep(0.05)  # the step waits on the runtime for an entry
            for i in range(3):
                writer.append(b"e%d" % i)  # blocking: this loop cannot take the answer
            while tail._cursor.position == 0:  # the runtime's step read the batch
                time.sleep(0.001)
            time.sleep(0.2)  # and returned it, still blocking this loop
            waiting.cancel()
            try:
                await waiting
            except asyncio.CancelledError:
                pass
            assert waiting.cancelled(), "the entry arrived before the cancel: nothing tested"
            got = [(await tail.__anext__()).data for _ in range(3)]
            await tail.aclose()
            return got

    assert asyncio.run(main()) == [b"e0", b"e1", b"e2"]


def test_an_async_tail_under_tight_timeouts_hands_out_every_entry_once(cluster):
    """``asyncio.timeout`` around each ``__anext__`` and ``poll``, short enough that most
    waits are cancelled while the runtime's step is reading or returning its batch: every
    entry still comes out, once and in order. (When a cancelled wait cancelled the step,
    a step that had just moved past its batch lost it: 256 entries of 300 were missing
    in most runs.)"""
    import asyncio

    from embedlog.aio import AsyncClient

    writer = cluster.client("w").create_unbounded(3, 3, 2)
    total = 600
    for i in range(total):
        writer.append(b"%d" % i)

    async def main(mode: str, limit: float) -> list[int]:
        async with AsyncClient(cluster.client("f")) as client:
            follower = await client.open_unbounded(writer.ledger_id, takeover=False)
            tail = follower.tail(0, timeout=IDLE)
            got: list[int] = []
            for _ in range(5000):
                if len(got) == total:
                    break
                try:
                    async with asyncio.timeout(limit):
                        if mode == "poll":
                            got += [e.entry_id for e in await tail.poll(10, timeout=5)]
                        else:
                            got.append((await tail.__anext__()).entry_id)
                except TimeoutError:
                    pass
            got += [e.entry_id for e in await tail.poll(total, timeout=0.5)]
            assert tail.skipped == 0
            await tail.aclose()
            return got

    # Which waits the race hits depends on the machine's speed: several limits.
    for limit in (0.001, 0.002, 0.003, 0.004):
        for mode in ("anext", "poll"):
            assert asyncio.run(main(mode, limit)) == list(range(total)), (mode, limit)


def test_an_async_poll_without_a_wait_returns_what_is_ready(cluster):
    """``poll(timeout=0)`` on a follower that already knows the LAC hands out the entries
    there, at its first call, as the blocking tail's does."""
    import asyncio

    from embedlog.aio import AsyncClient

    writer = cluster.client("w").create_unbounded(3, 3, 2)
    for i in range(10):
        writer.append(b"%d" % i)

    async def main() -> tuple[list[int], list[int]]:
        async with AsyncClient(cluster.client("f")) as client:
            follower = await client.open_unbounded(writer.ledger_id, takeover=False)
            tail = follower.tail(0, timeout=IDLE)
            got = [e.entry_id for e in await tail.poll(10, timeout=0)]
            await tail.aclose()
        blocking = cluster.client("g").open_unbounded(writer.ledger_id, takeover=False)
        return got, [e.entry_id for e in blocking.tail(0, timeout=IDLE).poll(10, timeout=0)]

    assert asyncio.run(main()) == (list(range(10)), list(range(10)))
