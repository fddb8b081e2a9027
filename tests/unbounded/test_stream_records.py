"""Stream records: timestamp, key and headers on every read path; idempotent appends by
msg_id, within one writer and across takeovers; entry_id_at (docs/unbounded.md, "Records")."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from attrs import define

from embedlog.aio import AsyncUnboundedLedger
from embedlog.errors import BKError, EntryTooLargeError
from embedlog.wire.entry import FLAG_RECORD


@define
class FakeClock:
    """The client's clock (ClientContext.clock), moved by the test: no sleeps."""

    now: float = 1_800_000_000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


def _fields(e):
    return (e.entry_id, e.data, e.timestamp, e.key, dict(e.headers))


def test_records_carry_time_key_and_headers_on_every_read_path(cluster):
    c = cluster.client("c1")
    ul = c.create_unbounded(3, 3, 2, name="orders")
    before = time.time()
    ul.append(b"plain")
    after = time.time()
    ul.append(b"keyed", key=b"user-7", headers={"trace": b"t-1", "n": b"\x00"}, timestamp=1.25)
    ul.append(b"empty key", key=b"")
    expected = [
        (1, b"keyed", 1.25, b"user-7", {"trace": b"t-1", "n": b"\x00"}),
        (2, b"empty key", None, b"", {}),
    ]
    got = ul.read(0, 2)
    assert before <= got[0].timestamp <= after + 1e-6  # the writer's clock by default
    assert (got[0].key, dict(got[0].headers)) == (None, {})
    assert _fields(got[1]) == expected[0]
    assert got[2].key == b"" and got[2].timestamp is not None
    follower = cluster.client("c2").open_unbounded("orders", takeover=False)
    for entries in (
        list(ul.entries()),
        follower.read(0, 2),
        list(follower.entries()),
        follower.tail(0, timeout=1.0).poll(max_entries=3, timeout=5.0),
    ):
        assert [_fields(e) for e in entries][1] == expected[0]
        assert entries[2].key == b""


def test_entries_written_before_records_read_with_no_time_key_or_headers(cluster):
    ul = cluster.client("c1").create_unbounded(3, 3, 2)

    # What a writer without records wrote: the term, then the bare payload.
    async def add_bare():
        return await ul.writer.add(b"old entry")

    assert cluster.runtime.run(add_bare()) == 0
    ul.append(b"new entry", key=b"k")
    old_entry, new_entry = ul.read(0, 1)
    assert (old_entry.data, old_entry.timestamp, old_entry.key, dict(old_entry.headers)) == (
        b"old entry",
        None,
        None,
        {},
    )
    assert (new_entry.data, new_entry.key) == (b"new entry", b"k")


def test_bad_record_fields_are_refused_before_anything_is_written(cluster):
    c = cluster.client("c1", max_entry_size=2000)
    ul = c.create_unbounded(3, 3, 2)
    with pytest.raises(TypeError, match="key must be bytes"):
        ul.append(b"x", key="text")
    with pytest.raises(TypeError, match="encode text with"):
        ul.append(b"x", headers={"a": "text"})
    with pytest.raises(ValueError, match="finite number of seconds"):
        ul.append(b"x", timestamp=float("nan"))
    with pytest.raises(TypeError, match="timestamp must be seconds"):
        ul.append(b"x", timestamp="now")
    # The data alone fits; with its headers the entry does not.
    with pytest.raises(EntryTooLargeError, match="key, headers and msg_id of 106 bytes"):
        ul.append(b"x" * 1990, headers={"h": b"v" * 100})
    assert ul.last_add_confirmed == -1
    # The limit is the caller's bytes: data of exactly max_entry_size fits, with its time.
    assert ul.append(b"x" * 2000) == 0
    assert ul.append(b"x" * 1990, key=b"k" * 8) == 1  # 1990 + 8 + the key's 2 length bytes


def test_a_repeated_msg_id_returns_the_first_entry_and_appends_nothing(cluster):
    ul = cluster.client("c1").create_unbounded(3, 3, 2)
    first = ul.append(b"order 1", msg_id="o-1")
    assert ul.append(b"order 1 again", msg_id="o-1") == first
    assert ul.append(b"order 1", msg_id=b"o-1") == first  # str and its UTF-8 bytes: one id
    # The same id twice in flight at once: one entry, both futures give its id.
    f1 = ul.append_async(b"order 2", msg_id="o-2")
    f2 = ul.append_async(b"order 2", msg_id="o-2")
    assert f1.result(30) == f2.result(30)
    assert ul.append(b"other") == f1.result() + 1
    assert [e.data for e in ul.read(0, ul.last_add_confirmed)] == [b"order 1", b"order 2", b"other"]
    assert [e.msg_id for e in ul.read(0, 1)] == [b"o-1", b"o-2"]


def test_msg_ids_hold_across_a_takeover_and_keep_the_order_of_appends(cluster):
    ul1 = cluster.client("c1").create_unbounded(3, 3, 2, name="payments")
    ids = {f"p-{i}": ul1.append(b"pay %d" % i, msg_id=f"p-{i}") for i in range(20)}
    ul2 = cluster.client("c2").open_unbounded("payments")
    # A producer retries through the new writer: plain appends around a repeat keep
    # their order, and the repeat gives the old id.
    a = ul2.append_async(b"plain a")
    dup = ul2.append_async(b"pay 7", msg_id="p-7")
    b = ul2.append_async(b"plain b")
    new = ul2.append_async(b"pay 20", msg_id="p-20")
    assert dup.result(30) == ids["p-7"]
    assert a.result(30) < b.result(30) < new.result(30)
    assert b.result() == a.result() + 1
    datas = [e.data for e in ul2.read(0, ul2.last_add_confirmed)]
    assert datas.count(b"pay 7") == 1 and datas[-3:] == [b"plain a", b"plain b", b"pay 20"]
    assert len(ul2._appends.window) == 21  # the ids read back


def test_back_dated_records_do_not_hide_the_windows_ids_from_a_new_writer(cluster):
    """Replayed history (plain records with old timestamps of the caller's) after an id:
    the new writer finds where the window starts by the writer's clock, which every
    record with a caller's timestamp keeps, so the retry still finds the id."""
    ul1 = cluster.client("c1").create_unbounded(3, 3, 2, name="replayed")
    first = ul1.append(b"order 1", msg_id="o-1")
    for i in range(10):
        ul1.append(b"replayed %d" % i, timestamp=1000.0 + i)
    assert [e.timestamp for e in ul1.read(1, 2)] == [1000.0, 1001.0]  # the caller's time
    ul2 = cluster.client("c2").open_unbounded("replayed")
    assert ul2.append(b"order 1", msg_id="o-1") == first
    datas = [e.data for e in ul2.read(0, ul2.last_add_confirmed)]
    assert datas.count(b"order 1") == 1


def test_an_append_with_an_unknown_outcome_is_not_duplicated_by_a_retry_via_a_takeover(
    cluster,
):
    c1 = cluster.client("c1", request_timeout=30.0)  # no resend while the test runs
    ul1 = c1.create_unbounded(3, 3, 2, name="retries")
    ul1.append(b"first", msg_id="m-0")
    first, second, third = ul1.metadata.last_fragment[1]
    # The append is stored by two bookies of three (an ack quorum) but the writer hears
    # from none: the third never gets it, the other two get it late and their answers
    # are lost (a reply that arrives while its pair is blocked never reaches the writer).
    cluster.network.drop_next("c1", third, "add")
    cluster.network.delay("c1", first, 2.0)
    cluster.network.delay("c1", second, 2.0)
    lost = ul1.append_async(b"maybe", msg_id="m-1")
    with pytest.raises(TimeoutError):
        lost.result(0.2)  # the producer gives up: it does not know whether it landed
    cluster.network.block("c1", first)
    cluster.network.block("c1", second)
    for bookie in (first, second):
        _wait_until(lambda b=bookie: _stores(cluster, b, ul1.ledger_id, 1))
    assert not lost.done()
    # A new writer takes over: its recovery finds the entry on two bookies and keeps it;
    # the producer's retry through it gets that entry's id and appends nothing.
    ul2 = cluster.client("c2").open_unbounded("retries")
    retried = ul2.append(b"maybe", msg_id="m-1")
    assert retried == 1
    datas = [e.data for e in ul2.read(0, ul2.last_add_confirmed)]
    assert datas == [b"first", b"maybe"]
    assert ul2.read(retried, retried)[0].msg_id == b"m-1"


def _stores(cluster, bookie_id, ledger_id, entry_id):
    try:
        return cluster.read_from_bookie(bookie_id, ledger_id, entry_id) == b"maybe"
    except Exception:
        return False


def _wait_until(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the delayed adds never reached their bookies"
        time.sleep(0.02)


def test_an_id_older_than_the_window_appends_again(cluster):
    c1 = cluster.client("c1")
    clock = FakeClock()
    c1.ctx.clock = clock
    ul1 = c1.create_unbounded(3, 3, 2, name="window", dedup_window=60.0)
    first = ul1.append(b"a", msg_id="m")
    clock.now += 59.0
    assert ul1.append(b"a", msg_id="m") == first
    clock.now += 2.0  # 61 s after the first append
    again = ul1.append(b"a", msg_id="m")
    assert again == first + 1
    # A new writer reads back only what lies within the window of its own clock.
    c2 = cluster.client("c2")
    c2.ctx.clock = clock
    clock.now += 30.0
    ul2 = c2.open_unbounded("window")
    assert ul2.append(b"a", msg_id="m") == again
    clock.now += 31.0
    assert ul2.append(b"a", msg_id="m") > again


def test_a_stream_made_without_a_window_refuses_msg_ids(cluster):
    ul = cluster.client("c1").create_unbounded(3, 3, 2, dedup_window=0)
    with pytest.raises(ValueError, match="dedup_window=0"):
        ul.append(b"x", msg_id="m")
    assert ul.append(b"x") == 0
    with pytest.raises(ValueError, match="dedup_window must be >= 0"):
        cluster.client("c2").create_unbounded(3, 3, 2, dedup_window=-1)


def test_entry_id_at_finds_the_first_entry_at_or_after_a_time(cluster):
    ul1 = cluster.client("c1").create_unbounded(3, 3, 2, name="clock", fragment_max_entries=7)
    for i in range(40):
        ul1.append(b"%d" % i, timestamp=1000.0 + i)
    ul2 = cluster.client("c2").open_unbounded("clock")  # a no-op at 40
    for i in range(40, 60):
        ul2.append(b"%d" % i, timestamp=1000.0 + i)
    at = {e.timestamp: e.entry_id for e in ul2.entries()}
    assert ul2.entry_id_at(0) == 0
    assert ul2.entry_id_at(1012.0) == at[1012.0]
    assert ul2.entry_id_at(1012.5) == at[1013.0]
    assert ul2.entry_id_at(1040.0) == at[1040.0] == 41  # past the takeover's no-op
    assert ul2.entry_id_at(5000.0) == ul2.last_add_confirmed + 1
    ul2.trim(14)
    first = ul2.first_entry_id()
    assert ul2.entry_id_at(0) == first
    follower = cluster.client("c3").open_unbounded("clock", takeover=False)
    assert follower.entry_id_at(1030.0) == at[1030.0]


def test_the_async_stream_handle_takes_records_and_seeks_by_time(cluster):
    ul = cluster.client("c1").create_unbounded(3, 3, 2)
    aul = AsyncUnboundedLedger(ul)

    async def main():
        first = await aul.append(b"a", key=b"k", headers={"h": b"v"}, timestamp=50.0, msg_id="m")
        again = await aul.append(b"a", msg_id="m")
        second = await (await aul.enqueue(b"b", timestamp=60.0))
        third = await aul.append_nowait(b"c", timestamp=70.0)
        return first, again, second, third, await aul.entry_id_at(55.0)

    first, again, second, third, at = asyncio.run(main())
    assert (first, again, second, third, at) == (0, 0, 1, 2, 1)
    entry = ul.read(0, 0)[0]
    assert (entry.key, dict(entry.headers), entry.timestamp) == (b"k", {"h": b"v"}, 50.0)


def test_records_are_flagged_on_the_wire(cluster):
    ul = cluster.client("c1").create_unbounded(3, 3, 2)
    ul.append(b"x", key=b"k")
    from embedlog.wire.entry import HEADER, header_fields

    bookie = ul.metadata.last_fragment[1][0]
    body = cluster.runtime.run(_raw_read(cluster, bookie, ul.ledger_id, 0))
    assert header_fields(body)[3] & FLAG_RECORD
    assert len(body) > HEADER.size


async def _raw_read(cluster, bookie, ledger_id, entry_id):
    from embedlog.transport.base import next_txn
    from embedlog.wire.messages import OpCode, Request

    req = Request(OpCode.READ, next_txn(), ledger_id, entry_id)
    resp = await cluster.transport.request("admin", bookie, req, 10.0)
    return resp.body


def test_the_plain_appends_fast_path_packs_what_the_general_path_does():
    from embedlog.ledger.context import ClientContext
    from embedlog.unbounded.appending import prepare
    from embedlog.wire.record import decode

    ctx = ClientContext(bookies=None, metadata=None, placement=None, clock=FakeClock())
    fast = prepare(ctx, b"data", None, None, None, None, 7)  # bytes, nothing else: fast
    general = prepare(ctx, bytearray(b"data"), None, None, None, None, 7)
    assert fast == general
    assert decode(fast.payload) == decode(general.payload)
    assert decode(fast.payload)[1] == b"data" and decode(fast.payload)[0].timestamp == 1.8e9


def test_concurrent_producers_retrying_through_takeovers_leave_each_msg_id_once(cluster):
    """Two producers send the same ids (a duplicated producer) through whichever writer
    is current, while writers take the stream over from each other: whatever failed with
    an unknown outcome is retried through the next writer. Each id ends up in the stream
    once, and every producer got that entry's id for it."""
    ids = [f"m-{i}" for i in range(150)]
    writers = [cluster.client("w0").create_unbounded(3, 3, 2, name="race")]
    writer_changed = threading.Condition()
    got: dict[str, set[int]] = {i: set() for i in ids}
    failures: list[BaseException] = []

    def produce(order: list[str]) -> None:
        try:
            for msg_id in order:
                while True:
                    with writer_changed:
                        ul, generation = writers[-1], len(writers)
                    try:
                        got[msg_id].add(ul.append(msg_id.encode(), msg_id=msg_id))
                        break
                    except BKError:
                        # Unknown outcome (fenced by a takeover): retry through the next
                        # writer once there is one.
                        with writer_changed:
                            writer_changed.wait_for(lambda g=generation: len(writers) > g, 30)
        except BaseException as exc:
            failures.append(exc)

    producers = [
        threading.Thread(target=produce, args=(ids,)),
        threading.Thread(target=produce, args=(list(reversed(ids)),)),
    ]
    for p in producers:
        p.start()
    for n in range(1, 4):  # three takeovers while the producers run
        _wait_until(lambda n=n: sum(1 for v in got.values() if v) >= 30 * n)
        taken = cluster.client(f"w{n}").open_unbounded("race")
        with writer_changed:
            writers.append(taken)
            writer_changed.notify_all()
    for p in producers:
        p.join(120)
    assert not failures, failures
    last = writers[-1]
    stored = [e for e in last.read(0, last.last_add_confirmed)]
    by_id: dict[bytes, list[int]] = {}
    for e in stored:
        by_id.setdefault(e.msg_id, []).append(e.entry_id)
    assert sorted(by_id) == sorted(i.encode() for i in ids)
    duplicated = {k: v for k, v in by_id.items() if len(v) > 1}
    assert not duplicated
    for msg_id, entry_ids in got.items():
        assert entry_ids == set(by_id[msg_id.encode()]), msg_id
