"""The bookie's storage: durability, the crash model, bad disks and cookies."""

from __future__ import annotations

import asyncio
import threading

import pytest
from harness import KEY, entry

from embedlog.errors import BookieIOError, CookieError
from embedlog.transport.server import BookieGoneError
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import AddFlags, OpCode, ReadFlags, Request

LONG = 3600.0  # a flush interval that never fires during a test


def test_acked_adds_survive_a_crash_via_journal_replay(harness):
    h = harness(flush_interval=LONG)
    h.boot()
    for i in range(50):
        assert h.add(1, i, b"p%d" % i).status == StatusCode.EOK
    assert h.bookie.storage.flushes == 1  # only the boot flush: everything is in the cache
    h.crash()
    h.boot()
    assert h.bookie.unclean_shutdown_detected
    for i in range(50):
        resp = h.read(1, i)
        assert resp.status == StatusCode.EOK and resp.body == entry(1, i, b"p%d" % i)


def test_unsynced_journal_records_are_lost_in_a_crash(harness):
    # A group wait long enough that the adds are still buffered when we crash.
    h = harness(flush_interval=LONG, journal_max_group_wait=5.0)
    h.boot()

    async def add_and_crash():
        tasks = [
            asyncio.ensure_future(
                h.serve(Request(OpCode.ADD, 100 + i, 7, i, master_key=KEY, body=entry(7, i)))
            )
            for i in range(5)
        ]
        await asyncio.sleep(0.05)
        assert not any(t.done() for t in tasks)  # nothing acknowledged: nothing fsync'd
        h.bookie.crash()
        return await asyncio.gather(*tasks, return_exceptions=True)

    results = h.run(add_and_crash())
    # No answers from a crashed bookie: "gone", which clients see as unavailable (unknown).
    assert all(isinstance(r, BookieGoneError) for r in results), results
    h.boot()
    assert h.read(7, 0).status == StatusCode.ENOLEDGER  # the ledger itself was never durable


def test_without_journal_data_unflushed_adds_are_lost_but_flushed_ones_kept(harness):
    h = harness(flush_interval=LONG, journal_write_data=False)
    h.boot()
    h.add(1, 0)
    h.run(h.bookie.flush())
    h.add(1, 1)
    assert h.read(1, 1).status == StatusCode.EOK  # readable from the write cache
    h.crash()
    h.boot()
    assert h.read(1, 0).status == StatusCode.EOK
    assert h.read(1, 1).status == StatusCode.ENOENTRY


def test_fence_is_durable_before_it_is_answered(harness):
    h = harness(flush_interval=LONG, journal_write_data=False)
    h.boot()
    h.add(1, 0)
    assert h.read(1, -1, flags=ReadFlags.FENCE).status == StatusCode.EOK
    h.crash()
    h.boot()
    assert h.add(1, 1).status == StatusCode.EFENCED
    assert h.add(1, 1, flags=AddFlags.RECOVERY).status == StatusCode.EOK


def test_torn_journal_tail_is_ignored(harness):
    h = harness(flush_interval=LONG)
    h.boot()
    for i in range(3):
        h.add(1, i)
    h.crash()
    journal = sorted((h.root / "b1" / "journal").glob("*.jnl"))[-1]
    with journal.open("ab") as f:
        f.write(b"\x00\x00\x01\x00garbage that is not a whole record")
    h.boot()
    assert [h.read(1, i).status for i in range(3)] == [StatusCode.EOK] * 3
    assert h.add(1, 3).status == StatusCode.EOK


def test_entries_read_from_cache_then_entry_log_after_flush_and_restart(harness):
    h = harness(flush_interval=LONG)
    h.boot()
    h.add(1, 0, b"hello")
    assert h.read(1, 0).body == entry(1, 0, b"hello")
    h.run(h.bookie.flush())
    assert not h.bookie.storage.cache
    assert h.read(1, 0).body == entry(1, 0, b"hello")
    h.stop()
    h.boot()
    assert not h.bookie.unclean_shutdown_detected
    assert h.read(1, 0).body == entry(1, 0, b"hello")


def test_corrupt_entry_log_is_an_io_error_never_no_such_entry(harness):
    h = harness(flush_interval=LONG)
    h.boot()
    h.add(1, 0, b"precious")
    h.stop()
    for log in (h.root / "b1" / "ledgers").glob("*.log"):
        data = bytearray(log.read_bytes())
        if data:
            data[-3] ^= 0xFF
            log.write_bytes(bytes(data))
    h.boot()
    resp = h.read(1, 0)
    assert resp.status == StatusCode.EIO  # the index says we have it: never ENOENTRY


def test_truncated_entry_log_is_an_io_error(harness):
    h = harness(flush_interval=LONG)
    h.boot()
    h.add(1, 0, b"precious" * 10)
    h.stop()
    for log in (h.root / "b1" / "ledgers").glob("*.log"):
        if log.stat().st_size:
            log.write_bytes(log.read_bytes()[:10])
    h.boot()
    assert h.read(1, 0).status == StatusCode.EIO


def test_corrupt_index_gives_a_clear_error(harness):
    h = harness()
    h.boot()
    h.add(1, 0)
    h.stop()
    index = h.root / "b1" / "index"
    for f in index.iterdir():
        if f.name.startswith("MANIFEST") or f.name == "CURRENT":
            f.write_bytes(b"this is not leveldb")
    with pytest.raises(BookieIOError, match="index"):
        h.boot()


def test_unwritable_data_dir_gives_a_clear_error(harness, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    h = harness()
    h.root = blocker
    with pytest.raises(BookieIOError, match="cannot create"):
        h.boot()


def test_cookie_catches_a_wiped_disk(harness):
    h = harness()
    h.boot()
    h.add(1, 0)
    h.stop()
    ledgers = h.root / "b1" / "ledgers"
    for f in ledgers.iterdir():
        f.unlink()
    with pytest.raises(CookieError, match=r"ledgers has no cookie.*fixcookie"):
        h.boot()


def test_cookie_catches_a_missing_directory(harness):
    import shutil

    h = harness()
    h.boot()
    h.stop()
    shutil.rmtree(h.root / "b1" / "journal")
    with pytest.raises(CookieError, match="journal is missing"):
        h.boot()


def test_cookie_catches_a_swapped_disk(harness):
    h = harness()
    h.boot("b1")
    h.stop()
    h.boot("b2")
    h.stop()
    a, b = h.root / "b1" / "index" / "COOKIE", h.root / "b2" / "index" / "COOKIE"
    a_bytes = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(a_bytes)
    with pytest.raises(CookieError, match="belongs to bookie b2"):
        h.boot("b1")


def test_journal_sync_waits_for_the_batch_being_written(harness, monkeypatch):
    # sync() is what a clean stop and the checkpoint rely on: a batch already handed to
    # the journal thread is not durable until its fsync returns.
    h = harness(flush_interval=LONG)
    h.boot()
    journal = h.bookie.journal
    writing, release = _held(journal, "_write", monkeypatch)

    async def scenario() -> list[str]:
        events: list[str] = []
        journal.append(b"record", wait=False)
        while not writing.is_set():
            await asyncio.sleep(0.001)
        synced = asyncio.ensure_future(journal.sync())
        synced.add_done_callback(lambda _: events.append("synced"))
        await asyncio.sleep(0.05)
        events.append("released")
        release.set()
        await synced
        return events

    assert h.run(scenario()) == ["released", "synced"]


def _held(obj: object, method: str, monkeypatch) -> tuple[threading.Event, threading.Event]:
    """Make ``obj.method`` (run on a bookie's disk thread) wait for the second event before
    doing its work; the first is set once it has been called. A test acts in between."""
    entered, release = threading.Event(), threading.Event()
    real = getattr(obj, method)

    def held(*args: object) -> None:
        entered.set()
        release.wait(30)
        real(*args)

    monkeypatch.setattr(obj, method, held)
    return entered, release


def _blocking_flush(h, monkeypatch) -> tuple[threading.Event, threading.Event]:
    """The bookie's flushes wait (on the flush thread) after taking the write cache."""
    return _held(h.bookie.storage, "_flush_sync", monkeypatch)


def test_entries_being_flushed_stay_readable_and_adds_go_on(harness, monkeypatch):
    # The flush takes the whole write cache; until the index has its entries they must
    # still be read from memory: a NoSuchEntry for one of them would be an acked loss.
    h = harness(flush_interval=LONG)
    h.boot()
    for i in range(5):
        assert h.add(1, i, b"old%d" % i).status == StatusCode.EOK
    writing, release = _blocking_flush(h, monkeypatch)

    async def scenario() -> tuple[list[int], int, int, int]:
        flush = asyncio.ensure_future(h.bookie.flush())
        while not writing.is_set():
            await asyncio.sleep(0.001)
        old = [(await h.serve(read(1, i))).status for i in range(5)]
        added = (await h.serve(add(1, 5, b"new"))).status
        new = (await h.serve(read(1, 5))).status
        last = (await h.serve(read(1, -1))).last_entry_id
        release.set()
        await flush
        return old, added, new, last

    old, added, new, last = h.run(scenario())
    assert old == [StatusCode.EOK] * 5
    assert added == new == StatusCode.EOK
    assert last == 5  # the last entry counts the ones being flushed too
    assert 1 not in h.bookie.storage._flushing  # the flush is done with them
    for i in range(5):
        assert h.read(1, i).body == entry(1, i, b"old%d" % i)
    assert h.read(1, 5).body == entry(1, 5, b"new")


def test_a_failed_flush_keeps_its_entries_under_the_newer_ones(harness, monkeypatch):
    h = harness(flush_interval=LONG)
    h.boot()
    assert h.add(1, 0, b"first").status == StatusCode.EOK
    writing, release = _blocking_flush(h, monkeypatch)
    monkeypatch.setattr(h.bookie.storage.logs, "append_many", _disk_full)

    async def scenario() -> BaseException | None:
        flush = asyncio.ensure_future(h.bookie.flush())
        while not writing.is_set():
            await asyncio.sleep(0.001)
        # A rewrite of entry 0 (as recovery may do) and a new entry, both during the flush.
        await h.serve(add(1, 0, b"rewritten"))
        await h.serve(add(1, 1, b"second"))
        release.set()
        try:
            await flush
        except OSError as exc:
            return exc
        return None

    assert isinstance(h.run(scenario()), OSError)
    monkeypatch.undo()
    assert h.read(1, 0).body == entry(1, 0, b"rewritten")  # the newer one wins
    assert h.read(1, 1).body == entry(1, 1, b"second")
    expected = len(entry(1, 0, b"rewritten")) + len(entry(1, 1, b"second"))
    assert h.bookie.storage.cache_bytes == expected
    h.run(h.bookie.flush())  # space again: both reach the entry log
    h.stop()
    h.boot()
    assert h.read(1, 0).body == entry(1, 0, b"rewritten")
    assert h.read(1, 1).body == entry(1, 1, b"second")


def _disk_full(*_args: object) -> object:
    raise OSError(28, "No space left on device")


def read(lid: int, eid: int) -> Request:
    return Request(OpCode.READ, 0, lid, eid, master_key=KEY)


def add(lid: int, eid: int, payload: bytes) -> Request:
    return Request(OpCode.ADD, 0, lid, eid, master_key=KEY, body=entry(lid, eid, payload))


def test_an_idle_flush_waits_for_a_cut_holding_the_flush_lock(harness):
    # An idle flush skips the lock only when nobody holds or waits for it: while a cut
    # holds it (exclusive()), the flush must wait, or it would run in the middle of
    # the cut.
    h = harness(flush_interval=LONG)
    h.boot()
    storage = h.bookie.storage
    h.run(h.bookie.flush())  # nothing cached, the checkpoint where the index has it

    async def scenario() -> tuple[bool, bool, int, int]:
        before = storage.flushes
        idle = asyncio.ensure_future(h.bookie.flush())
        await asyncio.sleep(0)
        skipped = idle.done() and storage.flushes == before + 1
        async with storage.exclusive():
            held = asyncio.ensure_future(h.bookie.flush())
            await asyncio.sleep(0.05)
            waited = not held.done()
            during = storage.flushes
        await held
        return skipped, waited, during - before, storage.flushes - before

    skipped, waited, during, after = h.run(scenario())
    assert skipped  # free lock, nothing to write: done at once, counted
    assert waited and during == 1  # the second waited for the lock
    assert after == 2
