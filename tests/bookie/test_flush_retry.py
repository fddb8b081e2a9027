"""A failed flush: read-only at once, retried with backoff, writable again when a flush
succeeds, unless the disk is broken; never an acknowledged entry lost on the way."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import embedlog
from embedlog import leveldb as plyvel  # whichever binding is installed
from embedlog.bookie import disk, entrylog, files, journal
from embedlog.bookie.files import AppendFile
from embedlog.bookie.flushing import after_failure, disk_is_broken, stays_readonly
from embedlog.bookie.storage import LedgerStorage
from embedlog.errors import BookieIOError
from embedlog.wire.codes import StatusCode


def emfile() -> OSError:
    return OSError(errno.EMFILE, "Too many open files")


# -- the decision, as a table ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "failures", "delay", "resumable"),
    [
        (emfile(), 1, 1.0, True),  # the first retry after flush_interval
        (emfile(), 2, 2.0, True),  # then twice as long each time ...
        (OSError(errno.ENFILE, "table full"), 4, 8.0, True),
        (OSError(errno.ENOMEM, "no memory"), 5, 16.0, True),
        (OSError(errno.ENOSPC, "disk full"), 6, 30.0, True),  # ... up to the maximum
        (OSError(errno.EDQUOT, "quota"), 500, 30.0, True),
        (OSError(errno.EACCES, "permission"), 1, 1.0, True),  # a retry may get past it
        (plyvel.IOError("IO error: Too many open files"), 1, 1.0, True),
        (OSError(errno.EIO, "I/O error"), 1, 1.0, False),  # the disk itself: retried, but
        (OSError(errno.EROFS, "read-only fs"), 3, 4.0, False),  # never writable again
        (plyvel.CorruptionError("bad block"), 1, 1.0, False),
        (BookieIOError("record is corrupt"), 1, 1.0, False),
        (KeyError(3), 2, 2.0, False),  # a bug, not the disk: do not take writes on it
    ],
)
def test_after_failure(error: BaseException, failures: int, delay: float, resumable: bool) -> None:
    retry = after_failure(error, failures, interval=1.0, max_interval=30.0)
    assert (retry.delay, retry.resumable) == (delay, resumable)
    assert disk_is_broken(error) is not resumable


def test_the_retry_never_waits_less_than_the_flush_interval() -> None:
    assert after_failure(emfile(), 1, interval=5.0, max_interval=1.0).delay == 5.0


@pytest.mark.parametrize(
    ("configured", "broken", "journal_error", "expected"),
    [
        (False, None, None, None),  # writable again
        (True, None, None, "bookie setting readonly"),
        (False, "OSError: [Errno 5] I/O error", None, "disk failed"),
        (False, None, OSError(errno.ENOSPC, "full"), "journal failed"),
    ],
)
def test_stays_readonly(
    configured: bool, broken: str | None, journal_error: OSError | None, expected: str | None
) -> None:
    why = stays_readonly(configured, broken, journal_error)
    assert why == expected if expected is None else why is not None and expected in why


# -- a bookie whose flushes fail ----------------------------------------------------------------


def wait(h: Any, cond: Callable[[], bool]) -> None:
    """Run the bookie's loop until ``cond`` (no deadline: pytest's own timeout applies)."""
    while not cond():
        h.run(asyncio.sleep(0.01))


def failing(times: int, error: Callable[[], BaseException], real: Callable[..., Any]) -> Any:
    """``real``, failing with ``error()`` its first ``times`` calls; ``.calls`` counts them."""

    def fn(*args: Any, **kw: Any) -> Any:
        fn.calls += 1  # type: ignore[attr-defined]
        if fn.calls <= times:  # type: ignore[attr-defined]
            raise error()
        return real(*args, **kw)

    fn.calls = 0  # type: ignore[attr-defined]
    return fn


def flushed(h: Any, lid: int, eids: range) -> bool:
    """In the index, and no longer only in the write cache."""
    storage = h.bookie.storage
    return all(storage.index.location(lid, e) is not None for e in eids) and not storage.cache


def test_a_transient_flush_failure_is_retried_and_writes_resume(harness: Any, monkeypatch) -> None:
    """File descriptors ran out (EMFILE): read-only while flushes fail, acknowledged entries
    still served from the write cache; writable again, in metadata too, once one succeeds."""
    h = harness(flush_interval=0.02, flush_retry_max_interval=0.1)
    h.boot()
    for eid in range(5):
        assert h.add(1, eid, b"acked%d" % eid).status == StatusCode.EOK
    real = LedgerStorage._flush_sync
    descriptors = {"out": True, "calls": 0}

    def flaky(*args: Any) -> None:  # fails until the descriptors come back (below)
        descriptors["calls"] += 1
        if descriptors["out"]:
            raise emfile()
        real(*args)

    monkeypatch.setattr(LedgerStorage, "_flush_sync", flaky)
    # Work for the next flush, whether or not the five went out before the patch (an idle
    # bookie skips its flushes): refused if a flush already failed, else cached.
    assert h.add(9, 0, b"nudge").status in (StatusCode.EOK, StatusCode.EREADONLY)
    wait(h, lambda: descriptors["calls"] >= 3)  # retried, with backoff
    assert h.bookie.readonly
    assert h.meta.readonly_bookies() == ["b1"] and h.meta.writable_bookies() == []
    assert h.add(1, 5, b"refused").status == StatusCode.EREADONLY
    for eid in range(5):
        assert h.read(1, eid).body.endswith(b"acked%d" % eid)  # kept in the write cache
    descriptors["out"] = False
    wait(h, lambda: not h.bookie.readonly)
    assert h.meta.writable_bookies() == ["b1"] and h.meta.readonly_bookies() == []
    assert flushed(h, 1, range(5))
    assert h.add(1, 5, b"acked5").status == StatusCode.EOK
    h.crash()
    h.boot()
    for eid in range(6):
        assert h.read(1, eid).body.endswith(b"acked%d" % eid)


@pytest.mark.parametrize("err", [errno.EIO, errno.EROFS])
def test_a_broken_disk_keeps_the_bookie_read_only(harness: Any, monkeypatch, err: int) -> None:
    """A flush that failed with a disk error and then succeeds flushes the cache, but the
    bookie stays read-only: a disk that fails on and off must not flip-flop."""
    h = harness(flush_interval=0.02, flush_retry_max_interval=0.05)
    h.boot()
    real = LedgerStorage._flush_sync
    broken = failing(1, lambda: OSError(err, os.strerror(err)), real)

    def flaky(self: LedgerStorage, snapshot: dict[int, dict[int, bytes]], *args: Any) -> None:
        # The disk breaks under the flush that holds the last add: one before it would
        # make the bookie refuse that add, one after would find nothing left to write
        # (an idle bookie skips its flushes).
        if 2 in snapshot.get(2, {}) or broken.calls:
            broken(self, snapshot, *args)
        else:
            real(self, snapshot, *args)

    monkeypatch.setattr(LedgerStorage, "_flush_sync", flaky)
    for eid in range(3):
        assert h.add(2, eid, b"acked%d" % eid).status == StatusCode.EOK
    wait(h, lambda: flushed(h, 2, range(3)))
    assert broken.calls >= 2  # the failure, then the flush that got through
    flushes = h.bookie.storage.flushes
    wait(h, lambda: h.bookie.storage.flushes >= flushes + 5)
    assert h.bookie.readonly and h.meta.readonly_bookies() == ["b1"]
    assert h.add(2, 3, b"refused").status == StatusCode.EREADONLY
    for eid in range(3):
        assert h.read(2, eid).body.endswith(b"acked%d" % eid)


def test_a_failed_journal_keeps_the_bookie_read_only(harness: Any, monkeypatch) -> None:
    """The journal stops at its first failed write: flushes that succeed afterwards do not
    make the bookie writable (its adds could not be made durable)."""
    h = harness(flush_interval=0.02)
    h.boot()
    assert h.add(3, 0, b"acked").status == StatusCode.EOK
    real = AppendFile.append_parts
    journal_fails = failing(1, emfile, real)

    def append_parts(self: AppendFile, parts: list[bytes], **kw: Any) -> int:
        if self.path.suffix == journal.SUFFIX:
            return int(journal_fails(self, parts, **kw))
        return real(self, parts, **kw)

    monkeypatch.setattr(AppendFile, "append_parts", append_parts)
    assert h.add(3, 1, b"unknown").status == StatusCode.EIO
    assert h.bookie.readonly
    flushes = h.bookie.storage.flushes
    wait(h, lambda: h.bookie.storage.flushes >= flushes + 5)
    assert h.bookie.readonly and h.meta.readonly_bookies() == ["b1"]
    assert h.read(3, 0).body.endswith(b"acked")


def test_no_new_entry_log_file_then_a_retry(harness: Any, monkeypatch) -> None:
    """The flush fills its entry log and cannot open the next one (EMFILE): the retry
    writes every entry, into logs it can read them back from."""
    h = harness(flush_interval=3600.0, entry_log_max_size=300)
    h.boot()
    for eid in range(6):
        assert h.add(4, eid, b"e%d" % eid * 30).status == StatusCode.EOK
    monkeypatch.setattr(disk, "AppendFile", failing(1, emfile, AppendFile))
    with pytest.raises(OSError, match="Too many open files"):
        h.run(h.bookie.flush())
    h.run(h.bookie.flush())
    assert flushed(h, 4, range(6))
    for eid in range(6):  # from the entry logs now
        assert h.read(4, eid).body.endswith(b"e%d" % eid * 30)
    h.crash()
    h.boot()
    for eid in range(6):
        assert h.read(4, eid).body.endswith(b"e%d" % eid * 30)


def test_a_disk_that_fills_up_mid_write_then_a_retry(harness: Any, monkeypatch) -> None:
    """Half of the flush's records reached the entry log before ENOSPC: the retry appends
    after them, at the offsets the index then records."""
    h = harness(flush_interval=3600.0)
    h.boot()
    for eid in range(4):
        assert h.add(5, eid, b"p%d" % eid * 100).status == StatusCode.EOK
    real_writev, real_write = os.writev, os.write
    state = {"armed": True, "failing": False}

    def is_entry_log(fd: int) -> bool:
        return os.readlink(f"/proc/self/fd/{fd}").endswith(entrylog.SUFFIX)

    def half_writev(fd: int, buffers: list[bytes]) -> int:
        if state["armed"] and is_entry_log(fd):
            state["armed"], state["failing"] = False, True
            data = b"".join(buffers)
            return real_write(fd, data[: len(data) // 2])
        return real_writev(fd, buffers)

    def no_space(fd: int, data: Any) -> int:
        if state["failing"] and is_entry_log(fd):
            state["failing"] = False
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(files.os, "writev", half_writev)
    monkeypatch.setattr(files.os, "write", no_space)
    with pytest.raises(OSError, match="No space left"):
        h.run(h.bookie.flush())
    monkeypatch.undo()
    h.run(h.bookie.flush())  # space again
    assert flushed(h, 5, range(4))
    for eid in range(4):  # from the entry log, at the offsets the retry recorded
        resp = h.read(5, eid)
        assert resp.status == StatusCode.EOK and resp.body.endswith(b"p%d" % eid * 100)


def test_a_cluster_bookie_out_of_file_descriptors_comes_back(make_cluster: Any) -> None:
    """Over TCP, as in the review: a bookie's flushes fail with EMFILE, it registers as
    read-only, and once they succeed it registers as writable and new ledgers use it
    again; every acknowledged entry stays readable from every bookie."""
    cluster = make_cluster(3, transport="tcp", flush_interval=0.05, flush_retry_max_interval=0.2)
    client = cluster.client("w")
    wh = client.create_ledger(3, 3, 3)
    payloads = [b"acked %d" % i for i in range(20)]
    storage = cluster.bookie("bookie-1").storage
    real = storage._flush_sync
    broken = failing(3, emfile, real)

    def flaky(snapshot: dict[int, dict[int, bytes]], *args: Any) -> None:
        # Descriptors run out under the flush that holds the last add: one before it would
        # make the bookie refuse that add, one after would find nothing left to write
        # (an idle bookie skips its flushes).
        if len(payloads) - 1 in snapshot.get(wh.ledger_id, {}) or broken.calls:
            broken(snapshot, *args)
        else:
            real(snapshot, *args)

    cluster.runtime.call(setattr, storage, "_flush_sync", flaky)
    for p in payloads:
        wh.add(p)
    wh.close()

    def until(cond: Callable[[], bool]) -> None:  # no deadline: pytest's timeout applies
        while not cond():
            time.sleep(0.01)

    until(lambda: "bookie-1" in cluster.metadata.readonly_bookies())
    until(lambda: "bookie-1" in cluster.metadata.writable_bookies())
    assert broken.calls >= 4 and "bookie-1" not in cluster.metadata.readonly_bookies()
    for bid in cluster.bookie_ids:
        for eid, p in enumerate(payloads):
            assert cluster.read_from_bookie(bid, wh.ledger_id, eid) == p
    again = client.create_ledger(3, 3, 3)  # needs all three writable
    again.add(b"after")
    assert "bookie-1" in again.metadata.ensembles[0]
    assert [e.data for e in again.read(0, 0)] == [b"after"]


def test_idle_connections_exhaust_descriptors_then_every_bookie_comes_back(tmp_path) -> None:
    """The review's attack for real, in a process of its own: idle TCP connections take
    every file descriptor, every bookie's flush fails and it goes read-only; once the
    connections are gone each is writable again, holding every acknowledged entry. Its
    accept loops say once that descriptors ran out, not once per pending connection."""
    root = Path(embedlog.__file__).resolve().parents[1]
    settings = json.dumps({"flush_retry_max_interval": 0.2})
    script = Path(__file__).with_name("fd_exhaustion.py")
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "cluster"), settings],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["idle_connections"] > 0
    assert seen["every_bookie_holds_every_entry"] and seen["written_after"] == ["after"]
    assert done.stderr.count("Too many open files; trying again") <= 3 * 2, done.stderr[-3000:]
    assert "out of system resource" not in done.stderr  # asyncio's own accept loop's storm
