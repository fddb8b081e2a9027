"""Seeking and polling as stream users know them: first_entry_id, tail from "earliest" or
"latest", poll in batches, and the asyncio handles offering what the blocking ones do."""

from __future__ import annotations

import asyncio
import inspect
import threading

import pytest

from embedlog import Retention
from embedlog.aio import AsyncClient, AsyncReadHandle, AsyncUnboundedLedger, AsyncWriteHandle
from embedlog.client import Client
from embedlog.ledger.handles import ReadHandle, WriteHandle
from embedlog.unbounded.ledger import UnboundedLedger
from embedlog.unbounded.tailing import AsyncTail, Tail


def test_first_entry_id_follows_trims_and_is_lac_plus_one_when_nothing_is_kept(make_cluster):
    cluster = make_cluster(4)
    ul = cluster.client("w").create_unbounded(3, 3, 2, fragment_max_entries=10)
    f = cluster.client("f").open_unbounded(ul.ledger_id, takeover=False)
    assert ul.first_entry_id() == 0 == f.first_entry_id()
    for i in range(35):
        ul.append(b"%d" % i)
    ul.trim(25)
    assert ul.first_entry_id() == 20 == f.first_entry_id()
    empty = cluster.client("w").create_unbounded(3, 3, 2)
    assert empty.first_entry_id() == 0  # LAC -1: nothing kept, LAC + 1


def test_tail_from_earliest_and_latest(make_cluster):
    cluster = make_cluster(4)
    ul = cluster.client("w").create_unbounded(
        3, 3, 2, retention=Retention(max_entries=20), fragment_max_entries=10
    )
    for i in range(50):
        ul.append(b"%d" % i)
    ul.writer and cluster.runtime.run(ul.writer.apply_retention())
    f = cluster.client("f").open_unbounded(ul.ledger_id, takeover=False)
    earliest = f.tail("earliest", timeout=0)
    assert earliest.position == f.first_entry_id() > 0
    assert [e.entry_id for e in earliest] == list(range(f.first_entry_id(), 50))
    assert earliest.skipped == 0  # started at the first kept entry: nothing to skip

    latest = f.tail("latest", timeout=30)
    assert latest.position == 50
    ul.append(b"new")
    assert next(latest).data == b"new"
    latest.close()
    with pytest.raises(TypeError, match="'earliest' or 'latest'"):
        f.tail("oldest")


def test_poll_returns_batches_and_waits_only_for_the_first_entry(make_cluster):
    cluster = make_cluster(3)
    ul = cluster.client("w").create_unbounded(3, 3, 2)
    for i in range(120):
        ul.append(b"%d" % i)
    tail = cluster.client("f").open_unbounded(ul.ledger_id, takeover=False).tail(0)
    got = []
    while len(got) < 120:
        batch = tail.poll(max_entries=50, timeout=30)
        assert 0 < len(batch) <= 50
        got += batch
    assert [e.entry_id for e in got] == list(range(120))
    assert tail.position == 120
    assert tail.poll(timeout=0.05) == []  # nothing new: waits, then an empty batch

    late = threading.Timer(0.2, ul.append, args=(b"late",))
    late.start()
    batch = tail.poll(max_entries=10, timeout=30)  # waits for the first entry only
    late.join()
    assert [e.data for e in batch] == [b"late"]
    tail.close()
    assert tail.poll(timeout=0) == []
    with pytest.raises(ValueError):
        tail.poll(max_entries=0)


def test_the_async_tail_polls_too(make_cluster):
    cluster = make_cluster(3)
    ul = cluster.client("w").create_unbounded(3, 3, 2)
    for i in range(30):
        ul.append(b"%d" % i)

    async def main() -> list[int]:
        async with AsyncClient(cluster.client("f")) as client:
            f = await client.open_unbounded(ul.ledger_id, takeover=False)
            async with f:
                assert not f.is_writer
                assert f.metadata.ledger_id == ul.ledger_id
                assert await f.first_entry_id() == 0
                read = [e.entry_id async for e in f.entries(5, 9)]
                assert read == [5, 6, 7, 8, 9]
                assert len([e async for e in f.entries()]) == 30
                tail = f.tail("earliest")
                ids = []
                while len(ids) < 30:
                    ids += [e.entry_id for e in await tail.poll(max_entries=7, timeout=30)]
                assert await tail.poll(timeout=0.05) == []
                await tail.close()
                return ids

    assert asyncio.run(main()) == list(range(30))


def _public(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_")}


# Names only the blocking classes have, and why: the ``*_aio`` methods are for the
# runtime's own loop; ``add_async``/``append_async``/``queue_aio`` are ``add_nowait``/
# ``append_nowait``/``enqueue`` for other loops; the rest is what tails and the async
# wrappers use to reach the runtime (not an API of its own).
SYNC_ONLY = {
    "add_async": "add_nowait",
    "append_async": "append_nowait",
    "append_record": "append_nowait",
    "runtime": None,
    "ctx": None,
    "digester": None,
    "check_open": None,
    "on_close": None,
    "view": None,
    "reread_metadata": None,
    "wait_past": None,
    "cursor_start": None,
    "start_position": None,
    "tail_async_iterator": "tail",
    "writer": None,
    "new_ledger_metadata": None,
}


@pytest.mark.parametrize(
    ("sync", "async_"),
    [
        (Client, AsyncClient),
        (WriteHandle, AsyncWriteHandle),
        (ReadHandle, AsyncReadHandle),
        (UnboundedLedger, AsyncUnboundedLedger),
        (Tail, AsyncTail),
    ],
)
def test_every_async_class_offers_what_its_blocking_twin_does(sync, async_):
    missing = {
        name
        for name in _public(sync) - _public(async_)
        if not name.endswith("_aio") and name not in SYNC_ONLY
    }
    assert missing == set(), f"{async_.__name__} lacks {sorted(missing)}"
    for name, twin in SYNC_ONLY.items():
        if twin is not None and name in _public(sync):
            assert twin in _public(async_), (name, twin)
    if hasattr(sync, "__enter__"):
        assert hasattr(async_, "__aenter__") and hasattr(async_, "__aexit__")
    # And with the same parameters: AsyncClient.create_unbounded once lacked dedup_window.
    differ = {}
    for name in _public(sync) & _public(async_):
        ours, theirs = getattr(sync, name), getattr(async_, name)
        if not (callable(ours) and callable(theirs)) or isinstance(ours, type):
            continue
        params = [list(inspect.signature(f).parameters) for f in (ours, theirs)]
        if params[0] != params[1]:
            differ[name] = params
    assert differ == {}, f"{async_.__name__}: parameters differ {differ}"


def test_the_async_client_creates_streams_with_every_option(make_cluster):
    """``AsyncClient.create_unbounded`` passes ``digest`` and ``dedup_window`` on."""
    from embedlog.unbounded import layout
    from embedlog.wire.entry import DigestType

    cluster = make_cluster(3)

    async def main() -> tuple[float, DigestType]:
        async with AsyncClient(cluster.client("w")) as client:
            ul = await client.create_unbounded(
                3, 3, 2, digest=DigestType.MAC, dedup_window=5.0, name="s"
            )
            first = await ul.append(b"x", msg_id="m")
            assert await ul.append(b"x again", msg_id="m") == first  # deduplicated
            md = ul.metadata
            await ul.close()
            return layout.dedup_window(md), md.digest_type

    assert asyncio.run(main()) == (5.0, DigestType.MAC)
