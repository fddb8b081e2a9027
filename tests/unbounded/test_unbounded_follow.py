"""Followers under ordinary use: trims behind a slow follower, stopping a tail (threads and
asyncio), and a writer that goes quiet right after an entry."""

from __future__ import annotations

import asyncio
import threading

import pytest

from embedlog.aio import AsyncClient
from embedlog.errors import ClientClosedError, NoSuchEntryError
from embedlog.unbounded.tailing import skip_to
from embedlog.wire.entry import master_key
from embedlog.wire.messages import OpCode

IDLE = 30.0  # a tail's idle timeout: only reached if an entry never arrives


def test_skip_to():
    assert [skip_to(p, t) for p, t in [(0, 0), (5, 3), (3, 5), (256, 500)]] == [0, 0, 2, 244]


def _filled(cluster, n: int = 1000, per_fragment: int = 100):
    writer = cluster.client("w").create_unbounded(3, 3, 2, fragment_max_entries=per_fragment)
    futures = [writer.append_async(b"e%d" % i) for i in range(n)]
    assert [f.result() for f in futures] == list(range(n))
    follower = cluster.client("f").open_unbounded(writer.ledger_id, takeover=False)
    return writer, follower


def test_a_follower_behind_a_trim_skips_what_was_trimmed_and_counts_it(cluster):
    """The follower read entry 0 (its first batch holds 0..255); the writer then trims below
    500 and the follower asks the bookies for 256, which they deleted: it skips to the trim
    point instead of failing, and says how many ids it passed over."""
    writer, follower = _filled(cluster)
    tail = follower.tail(0, timeout=IDLE)
    ids = [next(tail).entry_id]
    writer.trim(500)
    for e in tail:
        ids.append(e.entry_id)
        assert e.data == b"e%d" % e.entry_id
        if e.entry_id == 999:
            break
    assert ids == list(range(256)) + list(range(500, 1000))
    assert (tail.skipped, tail.last_skip, tail.position) == (244, (256, 499), 1000)


def test_a_tail_that_starts_below_the_trim_point_counts_the_skip(cluster):
    writer, follower = _filled(cluster)
    writer.trim(300)
    tail = follower.tail(0, timeout=IDLE)
    assert next(tail).entry_id == 300
    assert tail.skipped == 300


def test_an_untrimmed_entry_no_bookie_has_is_an_error_not_a_skip(cluster):
    """Entries 256..499 vanish from every bookie while the metadata still lists them (lost
    acknowledged entries, not a trim): the follower must not pass over them."""
    writer, follower = _filled(cluster)
    tail = follower.tail(0, timeout=IDLE)
    next(tail)
    ctx = writer.writer.ctx
    for bookie in cluster.bookie_ids:  # a TRIM behind the metadata's back
        cluster.runtime.run(
            ctx.bookies.call(bookie, OpCode.TRIM, writer.ledger_id, 500, master_key=master_key(b""))
        )
    with pytest.raises(NoSuchEntryError):
        for _ in tail:
            pass
    assert tail.skipped == 0


def test_a_slow_follower_of_a_writer_that_trims_as_it_goes(cluster):
    """The issue's scenario: the writer trims to its last ~300 entries every 100 while a
    follower reads slowly; every entry the follower gets is in order and intact, and what
    it got plus what it skipped covers every id."""
    writer = cluster.client("w").create_unbounded(3, 3, 2, fragment_max_entries=50)
    follower = cluster.client("f").open_unbounded(writer.ledger_id, takeover=False)
    tail = follower.tail(0, timeout=IDLE)
    got: list[int] = []
    total = 1500

    def follow() -> None:
        for e in tail:
            assert e.data == b"e%d" % e.entry_id
            got.append(e.entry_id)
            if e.entry_id == total - 1:
                return
            if e.entry_id % 64 == 0:
                writer_progress.wait()  # slower than the writer: let it run ahead
                writer_progress.clear()

    writer_progress = threading.Event()
    t = threading.Thread(target=follow)
    t.start()
    for i in range(total):
        writer.append(b"e%d" % i)
        if i % 100 == 99:
            writer_progress.set()
            if i >= 300:
                writer.trim(i - 300)
    writer_progress.set()
    while t.is_alive():
        writer_progress.set()
        t.join(0.05)
    assert got == sorted(set(got))
    assert got[-1] == total - 1
    assert len(got) + tail.skipped == total


def test_closing_the_follower_ends_its_active_tail(cluster):
    writer = cluster.client("w").create_unbounded(3, 3, 2)
    writer.append(b"only")
    follower = cluster.client("f").open_unbounded(writer.ledger_id, takeover=False)
    got: list[bytes] = []
    first = threading.Event()

    def follow() -> None:
        for e in follower.tail(0):  # no timeout: only a close ends it
            got.append(e.data)
            first.set()

    t = threading.Thread(target=follow)
    t.start()
    first.wait()
    follower.close()
    t.join()  # without the close reaching the tail, it would wait for ever
    assert got == [b"only"]


def test_closing_a_tail_ends_it_and_the_writers_own_tail_ends_with_its_close(cluster):
    writer = cluster.client("w").create_unbounded(3, 3, 2)
    writer.append(b"only")
    follower = cluster.client("f").open_unbounded(writer.ledger_id, takeover=False)
    tails = [follower.tail(0), writer.tail(0)]
    threads = []
    for tail in tails:
        assert next(tail).data == b"only"
        threads.append(threading.Thread(target=lambda tail=tail: list(tail)))
        threads[-1].start()
    tails[0].close()
    threads[0].join()
    writer.close()
    threads[1].join()
    with pytest.raises(StopIteration):
        next(tails[0])


def test_a_stopped_cluster_ends_a_tail_with_client_closed_error(make_cluster):
    cluster = make_cluster(3)
    writer = cluster.client("w").create_unbounded(3, 3, 2)
    writer.append(b"only")
    follower = cluster.client("f").open_unbounded(writer.ledger_id, takeover=False)
    errors: list[BaseException] = []
    first = threading.Event()

    def follow() -> None:
        try:
            for _ in follower.tail(0):
                first.set()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=follow)
    t.start()
    first.wait()
    cluster.stop()
    t.join()
    assert len(errors) == 1 and isinstance(errors[0], ClientClosedError), errors


def test_cancelling_the_task_iterating_an_async_tail_ends_it(cluster):
    writer = cluster.client("w").create_unbounded(3, 3, 2)
    writer.append(b"only")

    async def main() -> list[bytes]:
        follower = await AsyncClient(cluster.client("f")).open_unbounded(
            writer.ledger_id, takeover=False
        )
        got: list[bytes] = []
        first = asyncio.Event()

        async def follow() -> None:
            async for e in follower.tail(0):
                got.append(e.data)
                first.set()

        task = asyncio.create_task(follow())
        await first.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return got

    # Without cancellation reaching the tail, asyncio.run would wait for ever for a
    # worker thread blocked in it.
    assert asyncio.run(main()) == [b"only"]


def test_closing_the_ledger_ends_an_async_tail_and_a_stopped_cluster_raises(make_cluster):
    cluster = make_cluster(3)
    writer = cluster.client("w").create_unbounded(3, 3, 2)
    writer.append(b"only")

    async def main() -> tuple[list[bytes], BaseException | None]:
        client = AsyncClient(cluster.client("f"))
        a = await client.open_unbounded(writer.ledger_id, takeover=False)
        got = [e.data async for e in _until_closed(a)]
        b = await client.open_unbounded(writer.ledger_id, takeover=False)
        tail = b.tail(0)
        await tail.__anext__()
        await asyncio.to_thread(cluster.stop)
        try:
            await tail.__anext__()
        except BaseException as exc:
            return got, exc
        return got, None

    got, error = asyncio.run(main())
    assert got == [b"only"]
    assert isinstance(error, ClientClosedError), error


async def _until_closed(ul):
    async for e in ul.tail(0):
        yield e
        await ul.close()  # the next step of the tail finds the handle closed


def test_a_quiet_writers_last_entry_reaches_the_follower_without_the_idle_timer(make_cluster):
    """The writer's idle timer is an hour: the entry's LAC reaches the bookies anyway, as a
    prompt explicit LAC right after the acknowledgement (no later entry carries it)."""
    cluster = make_cluster(3)
    writer = cluster.client("w", explicit_lac_interval=3600.0).create_unbounded(3, 3, 2)
    follower = cluster.client("f").open_unbounded(writer.ledger_id, takeover=False)
    for i in range(3):
        assert writer.append(b"quiet %d" % i) == i
        got = next(follower.tail(i, timeout=IDLE), None)
        assert got is not None and (got.entry_id, got.data) == (i, b"quiet %d" % i)
