"""The request handler's answers, code by code."""

from __future__ import annotations

import asyncio

from harness import KEY

from embedlog.wire.availability import AvailabilityOfEntries
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import master_key
from embedlog.wire.messages import AddFlags, OpCode, ReadFlags, Request


def test_codes(harness):
    h = harness()
    h.boot()
    assert h.read(9, 0).status == StatusCode.ENOLEDGER
    assert h.add(9, 0).status == StatusCode.EOK
    assert h.read(9, 1).status == StatusCode.ENOENTRY
    assert h.add(9, 1, master_key=master_key(b"wrong")).status == StatusCode.EUA
    assert h.read(9, -1, flags=ReadFlags.FENCE, master_key=master_key(b"bad")).status == (
        StatusCode.EUA
    )


def test_add_with_mismatched_header_is_a_bad_request(harness):
    h = harness()
    h.boot()
    from harness import entry

    resp = h.request(OpCode.ADD, 1, 5, body=entry(1, 6))
    assert resp.status == StatusCode.EBADREQ


def test_fence_creates_unknown_ledger_and_blocks_writers(harness):
    h = harness()
    h.boot()
    resp = h.read(3, -1, flags=ReadFlags.FENCE)
    assert resp.status == StatusCode.EOK and resp.lac == -1 and resp.last_entry_id == -1
    assert h.add(3, 0).status == StatusCode.EFENCED


def test_recovery_read_fences(harness):
    h = harness()
    h.boot()
    h.add(3, 0)
    assert h.read(3, 1, flags=ReadFlags.FENCE | ReadFlags.RECOVERY).status == StatusCode.ENOENTRY
    assert h.add(3, 1).status == StatusCode.EFENCED


def test_fencing_lac_read_reports_lac_and_last_entry(harness):
    h = harness()
    h.boot()
    from harness import DIGEST, KEY

    for eid, lac in [(0, -1), (1, 0), (2, 1)]:
        h.request(OpCode.ADD, 4, eid, body=DIGEST.pack(4, eid, lac, b"d"), master_key=KEY)
    resp = h.read(4, -1, flags=ReadFlags.FENCE)
    assert (resp.lac, resp.last_entry_id) == (1, 2)


def test_terms(harness):
    h = harness()
    h.boot()
    assert h.add(5, 0, term=2).status == StatusCode.EOK
    assert h.add(5, 1, term=1).status == StatusCode.EINVALIDTERM
    assert h.read(5, -1, term=3).status == StatusCode.EOK  # raises the term
    assert h.add(5, 1, term=2).status == StatusCode.EINVALIDTERM
    assert h.add(5, 1, term=3).status == StatusCode.EOK
    assert h.read(5, 0).status == StatusCode.EOK  # plain reads carry no term


def test_truncate_flag_deletes_entries_above(harness):
    h = harness()
    h.boot()
    for i in range(5):
        h.add(6, i)
    h.run(h.bookie.flush())
    h.add(6, 5)
    assert h.add(6, 2, flags=AddFlags.TRUNCATE).status == StatusCode.EOK
    assert h.bookie.ledger_entries(6) == [0, 1, 2]
    h.crash()
    h.boot()
    assert h.bookie.ledger_entries(6) == [0, 1, 2]  # the journal does not bring them back


def test_a_duplicate_truncation_is_answered_only_once_the_first_ones_cut_is_durable(harness):
    """Without the journal (BP-46) a plain add is answered from the write cache; a no-op
    whose truncation a duplicate already started must still wait for that truncation to be
    durable: answered earlier, a crash could leave the writer counting on a cut never made."""
    import threading

    from harness import entry

    h = harness(journal_write_data=False, flush_interval=3600.0)
    bookie = h.boot()
    for eid in range(4):
        assert h.add(8, eid, term=1).status == StatusCode.EOK
    release = threading.Event()
    real_write = bookie.journal._write

    def held_write(*args):
        release.wait(10)
        return real_write(*args)

    bookie.journal._write = held_write
    noop = AddFlags.RECOVERY | AddFlags.TRUNCATE | AddFlags.NOOP

    def truncate():
        req = Request(OpCode.ADD, 0, 8, 2, noop, 2, 0, KEY, entry(8, 2, b""))
        return asyncio.ensure_future(h.serve(req))

    async def main():
        first = truncate()
        await asyncio.sleep(0.05)  # its truncation record waits for the journal
        second = truncate()
        await asyncio.sleep(0.05)
        assert not second.done()
        release.set()
        assert (await first).status == (await second).status == StatusCode.EOK

    h.run(main())
    assert bookie.ledger_entries(8) == [0, 1, 2]


def test_limbo_answers_unknown_instead_of_negatives(harness):
    h = harness()
    h.boot()
    h.add(7, 0)
    h.run(h.bookie.set_ledger_state(7, limbo=True))
    assert h.read(7, 1).status == StatusCode.EUNKNOWN
    assert h.read(7, 0).status == StatusCode.EOK
    h.run(h.bookie.set_ledger_state(7, limbo=False))
    assert h.read(7, 1).status == StatusCode.ENOENTRY


def test_long_poll_lac_returns_when_the_lac_advances(harness):
    h = harness()
    h.boot()
    from harness import DIGEST, KEY

    h.request(OpCode.ADD, 8, 0, body=DIGEST.pack(8, 0, -1, b"a"))

    async def poll_then_write():
        poll = asyncio.ensure_future(
            h.bookie.handle(Request(OpCode.READ_LAC, 1, 8, -1, timeout_ms=60_000))
        )
        await asyncio.sleep(0.05)
        assert not poll.done()  # nothing new yet: it waits
        await h.bookie.handle(Request(OpCode.WRITE_LAC, 2, 8, 0, master_key=KEY))
        return await poll

    resp = h.run(poll_then_write())
    assert resp.status == StatusCode.EOK and resp.lac == 0


def test_a_long_poll_waits_without_a_task_of_its_own(harness, monkeypatch):
    """A waiting READ_LAC awaits a plain future the LAC's move completes: it makes the
    tasks a READ_LAC answered at once makes, and the WRITE_LAC that ends it its own."""
    h = harness()
    h.boot()
    from harness import DIGEST, KEY

    for lid in (8, 9):
        h.request(OpCode.ADD, lid, 0, body=DIGEST.pack(lid, 0, -1, b"a"))
    made: list[str] = []
    real = type(h.loop).create_task

    def create_task(self, coro, **kwargs):
        made.append(getattr(coro, "__qualname__", "?"))
        return real(self, coro, **kwargs)

    monkeypatch.setattr(type(h.loop), "create_task", create_task)

    def tasks(coro) -> int:
        made.clear()
        h.run(coro)
        return len(made)

    async def write_lac(lid: int) -> None:
        resp = await h.serve(Request(OpCode.WRITE_LAC, 2, lid, 0, master_key=KEY))
        assert resp.status == StatusCode.EOK

    async def answered_at_once() -> None:
        resp = await h.serve(Request(OpCode.READ_LAC, 1, 8, -2, timeout_ms=60_000))
        assert resp.lac == -1

    async def waiting_until_the_lac_moves() -> None:
        poll = asyncio.ensure_future(h.serve(Request(OpCode.READ_LAC, 1, 9, -1, timeout_ms=60_000)))
        await asyncio.sleep(0.05)
        assert not poll.done()  # nothing new yet: it waits
        await write_lac(9)
        assert (await poll).lac == 0

    once, write = tasks(answered_at_once()), tasks(write_lac(8))
    # Each count has the task ``run`` makes; the poll's ensure_future here is the second.
    assert tasks(waiting_until_the_lac_moves()) == once + write, made


def test_a_long_poll_whose_time_is_up_answers_and_leaves_no_waiter(harness):
    h = harness()
    h.boot()
    from harness import DIGEST

    h.request(OpCode.ADD, 8, 0, body=DIGEST.pack(8, 0, -1, b"a"))
    resp = h.request(OpCode.READ_LAC, 8, -1, timeout_ms=50)
    assert resp.status == StatusCode.EOK and resp.lac == -1
    assert h.bookie.ledgers._lac_waiters == {}


def test_list_entries_uses_the_bp34_encoding(harness):
    h = harness()
    h.boot()
    for i in (0, 1, 3, 4, 6):
        h.add(2, i)
    body = h.request(OpCode.LIST_ENTRIES, 2).body
    assert AvailabilityOfEntries.decode(body).entry_ids() == [0, 1, 3, 4, 6]


def test_list_entries_of_a_limbo_ledger_is_unknown(harness):
    # Its holes may be acknowledged entries lost in a crash: never an explicit list.
    h = harness()
    h.boot()
    for i in (0, 1, 3):
        h.add(2, i)
    h.run(h.bookie.set_ledger_state(2, limbo=True))
    resp = h.request(OpCode.LIST_ENTRIES, 2)
    assert (resp.status, resp.body) == (StatusCode.EUNKNOWN, b"")
    assert h.request(OpCode.LIST_ENTRIES, 99).status == StatusCode.ENOLEDGER  # never held
    h.run(h.bookie.clear_limbo([2]))
    body = h.request(OpCode.LIST_ENTRIES, 2).body
    assert AvailabilityOfEntries.decode(body).entry_ids() == [0, 1, 3]

    # unsafe_skip_limbo answers as if there were no limbo, here as for reads.
    unsafe = harness(unsafe_skip_limbo=True)
    unsafe.boot("b2")
    unsafe.add(2, 0)
    unsafe.run(unsafe.bookie.set_ledger_state(2, limbo=True))
    resp = unsafe.request(OpCode.LIST_ENTRIES, 2)
    assert resp.status == StatusCode.EOK
    assert AvailabilityOfEntries.decode(resp.body).entry_ids() == [0]


def test_delete_and_trim(harness):
    h = harness()
    h.boot()
    for i in range(6):
        h.add(3, i)
    assert h.request(OpCode.TRIM, 3, 4).status == StatusCode.EOK
    assert h.bookie.ledger_entries(3) == [4, 5]
    assert h.request(OpCode.DELETE_LEDGER, 3).status == StatusCode.EOK
    assert h.read(3, 4).status == StatusCode.ENOLEDGER
    h.crash()
    h.boot()
    assert h.read(3, 4).status == StatusCode.ENOLEDGER


def test_readonly_bookie_refuses_adds(harness):
    h = harness(readonly=True)
    h.boot()
    assert h.add(1, 0).status == StatusCode.EREADONLY


def test_unknown_settings_are_named():
    import pytest

    from embedlog.bookie.config import BookieConfig

    with pytest.raises(ValueError, match=r"unknown bookie setting.*flush_intervall"):
        BookieConfig.from_settings("b", ".", flush_intervall=1)
    with pytest.raises(ValueError, match="flush_interval must be > 0"):
        BookieConfig.from_settings("b", ".", flush_interval=0)


def test_a_request_still_running_when_the_bookie_crashes_ends_as_gone(harness, caplog):
    """The bookie's executors and files are gone under a request that was waiting; what it
    meets next is the crash, not a failure to answer EIO and log a traceback for."""
    import pytest

    from embedlog.transport.server import BookieGoneError

    h = harness()
    bookie = h.boot()
    assert h.add(4, 0).status == StatusCode.EOK
    gate = asyncio.Event()
    real_drop = bookie.storage.drop_ledgers

    async def drop_after_gate(*args):
        await gate.wait()
        return await real_drop(*args)

    bookie.storage.drop_ledgers = drop_after_gate

    async def main():
        delete = asyncio.ensure_future(h.serve(Request(OpCode.DELETE_LEDGER, 1, 4, master_key=KEY)))
        await asyncio.sleep(0.01)  # the request waits at the gate
        bookie.crash()
        gate.set()
        with pytest.raises(BookieGoneError):
            await delete

    h.run(main())
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []
