"""Client limits (docs/security.md): ADD_BATCH capped by bytes, a maximum entry size on
every transport, and a bound on adds in flight that blocks or raises as the caller chose."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from embedlog.aio import AsyncClient
from embedlog.errors import (
    EntryTooLargeError,
    LedgerClosedError,
    NoSuchLedgerError,
    TooManyAddsInFlightError,
)
from embedlog.ledger.admission import (
    DEFAULT_MAX_ADDS_IN_FLIGHT,
    DEFAULT_MAX_BYTES_IN_FLIGHT,
)
from embedlog.ledger.writer import LedgerWriter
from embedlog.transport.base import next_txn
from embedlog.transport.tcp import MAX_FRAME
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import Digester, DigestType, master_key
from embedlog.wire.limits import (
    DEFAULT_MAX_ENTRY_SIZE,
    MAX_BATCH_BYTES,
    MAX_ENTRY_SIZE,
    MAX_PACKED_ENTRY,
    split_batches,
)
from embedlog.wire.messages import OpCode, Request, frame_entry

KIB, MIB = 1024, 1024 * 1024


def wait_until(predicate: Any) -> None:
    """Poll until ``predicate()`` holds (no deadline: pytest's own timeout applies)."""
    while not predicate():
        time.sleep(0.005)


# -- batches capped by bytes -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sizes", "max_entries", "max_bytes", "runs"),
    [
        ([], 64, 100, []),
        ([10] * 5, 64, 100, [(0, 5)]),
        ([10] * 5, 2, 100, [(0, 2), (2, 4), (4, 5)]),  # the entry count caps
        ([40, 40, 40], 64, 100, [(0, 2), (2, 3)]),  # the bytes cap
        ([40, 60, 1], 64, 100, [(0, 2), (2, 3)]),  # exactly the cap fits
        ([150], 64, 100, [(0, 1)]),  # larger than the cap: alone
        ([10, 150, 10], 64, 100, [(0, 1), (1, 2), (2, 3)]),
        ([150, 150], 64, 100, [(0, 1), (1, 2)]),
    ],
)
def test_split_batches(sizes, max_entries, max_bytes, runs):
    assert split_batches(sizes, max_entries, max_bytes) == runs


def test_every_request_a_writer_builds_fits_far_inside_a_frame():
    # A request is its header, a master key and the body: a batch, or one entry alone.
    headroom = 64 * KIB
    assert MAX_BATCH_BYTES + headroom <= MAX_FRAME // 8
    assert MAX_PACKED_ENTRY + headroom <= MAX_FRAME
    assert DEFAULT_MAX_ENTRY_SIZE <= MAX_ENTRY_SIZE < MAX_PACKED_ENTRY
    assert DEFAULT_MAX_BYTES_IN_FLIGHT >= DEFAULT_MAX_ENTRY_SIZE


def spy_request_bodies(cluster, monkeypatch) -> list[tuple[OpCode, int]]:
    seen: list[tuple[OpCode, int]] = []
    transport = cluster.transport
    real = transport.send_nowait

    def send_nowait(src, bookie_id, req, timeout, then=None):
        seen.append((req.op, len(req.body)))
        return real(src, bookie_id, req, timeout, then)

    monkeypatch.setattr(transport, "send_nowait", send_nowait)
    return seen


def test_pipelined_large_entries_over_tcp_are_all_acknowledged(make_cluster, monkeypatch):
    # 64 entries of 1.1 MiB once made a 72 MB ADD_BATCH, above the frame limit: the bookie
    # dropped the connection, nothing was acknowledged, and another ledger sharing the
    # connections failed too.
    cluster = make_cluster(3, transport="tcp")
    bodies = spy_request_bodies(cluster, monkeypatch)
    client = cluster.client("c1", request_timeout=30.0)
    big = client.create_ledger(3, 3, 2)
    other = client.create_ledger(3, 3, 2)
    payloads = [bytes([i % 251]) * (1100 * KIB + i) for i in range(128)]
    futures: list[Any] = []

    def pipeline() -> None:
        futures.extend(big.add_async(p) for p in payloads)

    adding = threading.Thread(target=pipeline)
    adding.start()
    # Meanwhile the other ledger of the same client goes on, on the same connections.
    assert [other.add(b"o%d" % i) for i in range(20)] == list(range(20))
    adding.join()
    assert [f.result(300) for f in futures] == list(range(128))
    big.close()
    other.close()
    batches = [size for op, size in bodies if op == OpCode.ADD_BATCH]
    assert batches and max(batches) <= MAX_BATCH_BYTES  # several per batch, capped
    assert max(size for _, size in bodies) < MAX_FRAME // 8
    reader = cluster.client("reader")
    rh = reader.open_ledger(big.ledger_id)
    assert rh.last_add_confirmed == 127
    for first in range(0, 128, 16):
        got = [e.data for e in rh.read(first, first + 15)]
        assert got == payloads[first : first + 16]
    assert [e.data for e in reader.open_ledger(other.ledger_id).read(0, 19)] == [
        b"o%d" % i for i in range(20)
    ]


# -- the maximum entry size --------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["inprocess", "tcp"])
def test_an_entry_above_the_maximum_is_refused_at_add_time(make_cluster, transport):
    cluster = make_cluster(3, transport=transport)
    client = cluster.client("c1", max_entry_size=64 * KIB)
    wh = client.create_ledger(3, 3, 2)
    ul = client.create_unbounded(3, 3, 2)
    too_big = b"x" * (64 * KIB + 1)
    for add in (wh.add_async, wh.add, ul.append_async, ul.append):
        with pytest.raises(EntryTooLargeError, match=r"65537 bytes exceeds .*max_entry_size"):
            add(too_big)
    with pytest.raises(EntryTooLargeError):
        wh.add_async(memoryview(b"x" * (64 * KIB + 4)).cast("I"))  # its bytes, not items
    with pytest.raises(EntryTooLargeError):
        cluster.runtime.run(wh.add_aio(too_big))
    with pytest.raises(EntryTooLargeError):
        cluster.runtime.run(ul.append_aio(too_big))
    # Nothing was queued: ids stay contiguous, and the limit itself is allowed.
    assert wh.add(b"x" * (64 * KIB)) == 0
    assert ul.append(b"y" * (64 * KIB)) == 0
    wh.close()
    ul.close()
    assert [len(e.data) for e in wh.read(0, 0)] == [64 * KIB]


def test_the_default_maximum_applies_in_process(cluster):
    # A 1 GiB entry once stalled the shared loop for 70 s; anything above the default
    # is refused before the writer sees it.
    wh = cluster.client("c1").create_ledger(3, 3, 2)
    with pytest.raises(EntryTooLargeError, match=str(DEFAULT_MAX_ENTRY_SIZE)):
        wh.add_async(bytearray(DEFAULT_MAX_ENTRY_SIZE + 1))
    assert wh.add(b"after") == 0
    assert wh._writer.budget.entries == 0  # the refused add took no room


def test_aio_flavours_refuse_too_large_entries(cluster):
    async def main() -> None:
        async with AsyncClient(cluster.client("app", max_entry_size=KIB)) as client:
            wh = await client.create_ledger(3, 3, 2)
            ul = await client.create_unbounded(3, 3, 2)
            for call in (wh.add_nowait, ul.append_nowait):
                with pytest.raises(EntryTooLargeError):
                    call(b"x" * (KIB + 1))
            for coro in (wh.enqueue, wh.add, ul.enqueue, ul.append):
                with pytest.raises(EntryTooLargeError):
                    await coro(b"x" * (KIB + 1))
            assert await wh.add(b"ok") == 0
            await wh.close()
            await ul.close()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("options", "error", "names"),
    [
        ({"max_entry_size": 0}, ValueError, "max_entry_size"),
        ({"max_entry_size": MAX_ENTRY_SIZE + 1}, ValueError, "max_entry_size"),
        ({"max_entry_size": 1.5}, TypeError, "max_entry_size"),
        ({"max_adds_in_flight": 0}, ValueError, "max_adds_in_flight"),
        ({"max_adds_in_flight": True}, TypeError, "max_adds_in_flight"),
        ({"max_bytes_in_flight": KIB}, ValueError, "max_bytes_in_flight"),
        ({"max_block_seconds": -1}, ValueError, "max_block_seconds"),
        ({"max_block_seconds": "1"}, TypeError, "max_block_seconds"),
    ],
)
def test_client_limits_are_checked(cluster, options, error, names):
    with pytest.raises(error, match=names):
        cluster.client("c1", **options)


def raw_add(op: OpCode, ledger_id: int, entries: list[tuple[int, bytes]]) -> Request:
    digester = Digester(DigestType.DUMMY)  # cluster.read_from_bookie finds no metadata
    packed = [(eid, digester.pack(ledger_id, eid, -1, payload)) for eid, payload in entries]
    body = packed[0][1] if op == OpCode.ADD else b"".join(frame_entry(*e) for e in packed)
    return Request(op, next_txn(), ledger_id, 0, master_key=master_key(b""), body=body)


@pytest.mark.parametrize("transport", ["inprocess", "tcp"])
def test_a_bookie_refuses_an_entry_above_the_maximum_and_keeps_the_connection(
    make_cluster, transport
):
    # A client that ignores the limit gets an answer, not a dropped connection: the
    # other requests on it are unharmed.
    cluster = make_cluster(1, transport=transport)
    bookie = cluster.bookie_ids[0]
    huge = b"h" * MAX_PACKED_ENTRY
    for req in (
        raw_add(OpCode.ADD, 900, [(0, huge)]),
        raw_add(OpCode.ADD_BATCH, 901, [(0, b"small"), (1, huge)]),
    ):
        resp = cluster.runtime.run(cluster.transport.request("c1", bookie, req, 60))
        assert resp.status == StatusCode.EBADREQ
    ok = cluster.runtime.run(
        cluster.transport.request("c1", bookie, raw_add(OpCode.ADD, 902, [(0, b"fine")]), 60)
    )
    assert ok.status == StatusCode.EOK
    assert cluster.read_from_bookie(bookie, 902, 0) == b"fine"
    for ledger_id in (900, 901):  # nothing of the refused requests was stored
        with pytest.raises(NoSuchLedgerError):
            cluster.read_from_bookie(bookie, ledger_id, 0)


# -- the bound on adds in flight ---------------------------------------------------------------


def writing_handle(client, kind: str) -> tuple[Any, Any, LedgerWriter]:
    """(handle, its add_async or append_async, its writer)."""
    if kind == "ledger":
        wh = client.create_ledger(3, 3, 2)
        return wh, wh.add_async, wh._writer
    ul = client.create_unbounded(3, 3, 2)
    return ul, ul.append_async, ul.writer


def stalled_client(cluster, **options):
    """Client "c1", which keeps retrying adds that get no answer instead of failing them:
    after ``stall``, nothing it adds is acknowledged until ``cluster.network.heal()``."""
    return cluster.client("c1", request_timeout=1.0, add_entry_quorum_timeout=600, **options)


def stall(cluster) -> None:
    for bookie in cluster.bookie_ids:
        cluster.network.block("c1", bookie)


@pytest.mark.parametrize("kind", ["ledger", "unbounded"])
def test_an_add_past_the_bound_waits_for_room(cluster, kind):
    client = stalled_client(cluster, max_adds_in_flight=8)
    handle, add_async, writer = writing_handle(client, kind)
    stall(cluster)
    futures = [add_async(b"e%d" % i) for i in range(8)]
    returned = threading.Event()
    late: list[Any] = []

    def ninth() -> None:
        late.append(add_async(b"e8"))
        returned.set()

    adder = threading.Thread(target=ninth)
    adder.start()
    wait_until(lambda: writer.budget.waiting == 1)
    assert not returned.is_set()  # blocked at the bound...
    wait_until(lambda: len(writer.pending) == 8)  # (once the loop took them from the inbox)
    assert writer.budget.entries == 8
    assert not any(f.done() for f in futures)
    cluster.network.heal()  # ...until acknowledgements make room
    assert returned.wait(60)
    adder.join()
    assert [f.result(60) for f in [*futures, *late]] == list(range(9))
    handle.close()
    assert writer.budget.entries == 0 and writer.budget.bytes == 0


@pytest.mark.parametrize("kind", ["ledger", "unbounded"])
def test_the_bytes_in_flight_are_bounded_too(cluster, kind):
    client = stalled_client(cluster, max_bytes_in_flight=10 * KIB, max_entry_size=4 * KIB)
    handle, add_async, writer = writing_handle(client, kind)
    stall(cluster)
    futures = [add_async(b"x" * (4 * KIB)) for _ in range(2)]  # 8 KiB: 2 KiB left
    returned = threading.Event()
    adder = threading.Thread(
        target=lambda: (futures.append(add_async(b"y" * 3000)), returned.set())
    )
    adder.start()
    wait_until(lambda: writer.budget.waiting == 1)
    assert not returned.is_set() and writer.budget.bytes == 8 * KIB
    cluster.network.heal()
    assert returned.wait(60)
    adder.join()
    assert [f.result(60) for f in futures] == [0, 1, 2]
    handle.close()


@pytest.mark.parametrize("kind", ["ledger", "unbounded"])
def test_raise_mode_refuses_an_add_past_the_bound(cluster, kind):
    client = stalled_client(cluster, max_adds_in_flight=4, max_block_seconds=0)
    handle, add_async, writer = writing_handle(client, kind)
    stall(cluster)
    futures = [add_async(b"e%d" % i) for i in range(4)]
    with pytest.raises(TooManyAddsInFlightError, match="max_adds_in_flight=4"):
        add_async(b"refused")
    assert writer.budget.entries == 4  # the refused add took no room, and got no id:
    cluster.network.heal()
    assert [f.result(60) for f in futures] == [0, 1, 2, 3]
    assert add_async(b"after").result(60) == 4  # room again
    handle.close()


def test_wait_false_raises_in_block_mode_and_a_timeout_ends_a_wait(cluster):
    client = stalled_client(cluster, max_adds_in_flight=2, max_block_seconds=0.2)
    wh = client.create_ledger(3, 3, 2)
    stall(cluster)
    futures = [wh.add_async(b"a"), wh.add_async(b"b")]
    with pytest.raises(TooManyAddsInFlightError, match="does not wait"):
        wh.add_async(b"c", wait=False)
    with pytest.raises(TooManyAddsInFlightError, match=r"for 0\.2s"):
        wh.add_async(b"c")
    assert wh._writer.budget.waiting == 0 and wh._writer.budget.entries == 2
    cluster.network.heal()
    assert [f.result(60) for f in futures] == [0, 1]
    wh.close()


def test_an_add_on_the_runtimes_loop_thread_raises_instead_of_deadlocking(cluster):
    # A done callback of an add's future runs on the loop thread, which is the thread
    # that acknowledges adds: waiting there for room would never end.
    client = stalled_client(cluster, max_adds_in_flight=1)
    wh = client.create_ledger(3, 3, 2)
    stall(cluster)
    first = wh.add_async(b"first")
    with pytest.raises(TooManyAddsInFlightError, match="loop thread"):
        cluster.runtime.call(wh.add_async, b"second")
    outcome: list[BaseException] = []
    chained = threading.Event()

    def add_from_callback(_f: Any) -> None:
        try:
            wh.add_async(b"third")  # room again by now: the acknowledgement came first
        except BaseException as exc:
            outcome.append(exc)
        chained.set()

    first.add_done_callback(add_from_callback)
    cluster.network.heal()
    assert first.result(60) == 0
    assert chained.wait(60) and outcome == []
    wh.close()
    assert wh.last_add_confirmed == 1


def test_a_thread_waiting_for_room_is_released_when_the_client_closes(cluster):
    client = stalled_client(cluster, max_adds_in_flight=1)
    wh = client.create_ledger(3, 3, 2)
    stall(cluster)
    wh.add_async(b"held")
    errors: list[BaseException] = []

    def second() -> None:
        try:
            wh.add_async(b"waits")
        except BaseException as exc:
            errors.append(exc)

    adder = threading.Thread(target=second)
    adder.start()
    wait_until(lambda: wh._writer.budget.waiting == 1)
    client.close()
    adder.join(60)
    assert not adder.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], LedgerClosedError)
    assert "client was closed" in str(errors[0])
    cluster.network.heal()


def test_the_writer_never_holds_more_than_the_bound(cluster):
    # The memory figure: 1,000,000 adds once grew the process by 1.6 GB, every one held
    # at once. Bounded, the writer holds at most the bound whatever the caller does.
    bound = 500
    wh = cluster.client("c1", max_adds_in_flight=bound).create_ledger(3, 3, 2)
    writer = wh._writer
    held = {"entries": 0, "bytes": 0}
    real_queue = writer._queue

    def queue(p: Any) -> None:
        real_queue(p)
        held["entries"] = max(held["entries"], len(writer.pending))
        held["bytes"] = max(held["bytes"], writer.budget.bytes)

    writer._queue = queue  # type: ignore[method-assign]
    total = 20_000
    payload = b"p" * 100
    futures = [wh.add_async(payload) for _ in range(total)]
    assert futures[-1].result(120) == total - 1
    assert held["entries"] == bound  # reached, never passed
    assert held["bytes"] <= bound * len(payload)
    wh.close()
    assert writer.budget.entries == 0 and writer.budget.bytes == 0


def test_by_default_a_writer_holds_at_most_the_default_bound(cluster):
    wh = cluster.client("c1").create_ledger(3, 3, 2)
    writer = wh._writer
    held = 0
    real_queue = writer._queue

    def queue(p: Any) -> None:
        nonlocal held
        real_queue(p)
        held = max(held, len(writer.pending))

    writer._queue = queue  # type: ignore[method-assign]
    futures = [wh.add_async(b"d") for _ in range(DEFAULT_MAX_ADDS_IN_FLIGHT + 5_000)]
    assert futures[-1].result(120) == DEFAULT_MAX_ADDS_IN_FLIGHT + 4_999
    assert held <= DEFAULT_MAX_ADDS_IN_FLIGHT
    wh.close()


def test_the_aio_flavour_awaits_room_without_blocking_its_loop(cluster):
    blocking = stalled_client(cluster, max_adds_in_flight=3)

    async def main() -> None:
        client = AsyncClient(blocking)
        wh = await client.create_ledger(3, 3, 2)
        stall(cluster)
        first = [await wh.enqueue(b"e%d" % i) for i in range(3)]
        with pytest.raises(TooManyAddsInFlightError, match=r"await enqueue\(data\)"):
            wh.add_nowait(b"refused")
        waiting = asyncio.ensure_future(wh.enqueue(b"e3"))
        other_work = asyncio.Event()
        asyncio.get_running_loop().call_soon(other_work.set)
        await other_work.wait()  # the loop runs on while enqueue waits
        await asyncio.to_thread(wait_until, lambda: wh.handle._writer.budget.waiting == 1)
        assert not waiting.done()
        cluster.network.heal()
        fourth = await waiting
        assert await asyncio.gather(*first, fourth) == [0, 1, 2, 3]
        await wh.close()
        await client.close()

    asyncio.run(main())


def test_a_cancelled_aio_wait_gives_its_place_back(cluster):
    blocking = stalled_client(cluster, max_adds_in_flight=1)

    async def main() -> None:
        client = AsyncClient(blocking)
        ul = await client.create_unbounded(3, 3, 2)
        stall(cluster)
        first = await ul.enqueue(b"a")
        budget = ul.ledger.writer.budget
        waiting = asyncio.ensure_future(ul.enqueue(b"never"))
        await asyncio.to_thread(wait_until, lambda: budget.waiting == 1)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert budget.waiting == 0
        cluster.network.heal()
        assert await first == 0
        assert await ul.append(b"b") == 1  # the cancelled add was never queued
        assert budget.entries == 0
        await ul.close()
        await client.close()

    asyncio.run(main())


def test_add_aio_on_the_runtime_loop_awaits_room(cluster):
    client = stalled_client(cluster, max_adds_in_flight=2)
    wh = client.create_ledger(3, 3, 2)
    stall(cluster)

    async def three() -> list[int]:
        return list(await asyncio.gather(*(wh.add_aio(b"e%d" % i) for i in range(3))))

    result = cluster.runtime.submit(three())
    wait_until(lambda: wh._writer.budget.waiting == 1)
    assert len(wh._writer.pending) == 2  # the third waits, the loop does not
    cluster.network.heal()
    assert result.result(60) == [0, 1, 2]
    wh.close()
