"""A full disk: clear errors, a read-only bookie, and no acknowledged entry or state lost."""

from __future__ import annotations

import asyncio
import errno

from embedlog.bookie.entrylog import EntryLogs
from embedlog.bookie.files import AppendFile
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import OpCode, ReadFlags


def _no_space(*_args, **_kw):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_full_journal_disk_makes_the_bookie_read_only_and_keeps_acked_entries(
    harness, monkeypatch, caplog
):
    h = harness()
    h.boot()
    for eid in range(5):
        assert h.add(1, eid, b"kept%d" % eid).status == StatusCode.EOK
    monkeypatch.setattr(AppendFile, "append_parts", _no_space)
    # The add that meets the full disk is unknown to its writer (EIO), never acknowledged.
    assert h.add(1, 5, b"never").status == StatusCode.EIO
    assert "No space left on device" in caplog.text
    assert h.add(1, 6, b"later").status == StatusCode.EREADONLY
    assert h.bookie.readonly and h.bookie.status()["readonly"]
    for eid in range(5):  # reads go on
        resp = h.request(OpCode.READ, 1, eid)
        assert resp.status == StatusCode.EOK and resp.body.endswith(b"kept%d" % eid)

    monkeypatch.undo()  # the operator freed space; restart
    h.crash()
    h.boot()
    for eid in range(5):
        assert h.request(OpCode.READ, 1, eid).body.endswith(b"kept%d" % eid)
    assert h.add(1, 7, b"again").status == StatusCode.EOK


def test_full_ledger_disk_fails_the_flush_without_losing_a_fence(harness, monkeypatch):
    h = harness(flush_interval=3600.0)
    h.boot()
    assert h.add(2, 0, b"a").status == StatusCode.EOK
    monkeypatch.setattr(EntryLogs, "append_many", _no_space)
    fence = h.request(OpCode.READ, 2, -1, flags=ReadFlags.FENCE)
    assert fence.status == StatusCode.EOK  # journaled: durable though the flush fails
    try:
        h.run(h.bookie.flush())
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    else:
        raise AssertionError("the flush should have met the full disk")
    assert h.request(OpCode.READ, 2, 0).status == StatusCode.EOK  # still in the write cache
    monkeypatch.undo()
    h.run(h.bookie.flush())  # space again: this flush moves the checkpoint past the fence
    h.crash()
    h.boot()
    assert h.add(2, 1, b"old writer").status == StatusCode.EFENCED
    assert h.request(OpCode.READ, 2, 0).body.endswith(b"a")


def test_a_full_disk_under_an_early_flush_makes_the_bookie_read_only(harness, monkeypatch):
    """A write cache past its limit flushes at once, in the background: when that flush
    meets the full disk the bookie goes read-only, as for its periodic flush (and the
    error is handled there, not left in a task nobody awaits)."""
    h = harness(flush_interval=3600.0, write_cache_max_bytes=1000)
    h.boot()
    monkeypatch.setattr(EntryLogs, "append_many", _no_space)
    eid = 0
    while not h.bookie.readonly:
        assert eid < 100, "the early flushes never failed"
        assert h.add(3, eid, b"x" * 300).status == StatusCode.EOK  # journaled: durable
        h.run(asyncio.sleep(0.01))  # the early flush runs
        eid += 1
    assert h.add(3, eid, b"later").status == StatusCode.EREADONLY
    for e in range(eid):
        assert h.request(OpCode.READ, 3, e).status == StatusCode.EOK  # still cached
