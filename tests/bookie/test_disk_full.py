"""A full disk: clear errors, a read-only bookie, and no acknowledged entry or state lost."""

from __future__ import annotations

import asyncio
import errno

from embedlog.bookie.entrylog import EntryLogs
from embedlog.bookie.files import AppendFile
from embedlog.errors import BookieIOError
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


def _boot_fails_while_full(h) -> None:
    """A boot that must flush what it replayed cannot while the disk is full; it says so."""
    try:
        h.boot()
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    else:
        raise AssertionError("the boot should have met the full disk")


def test_stop_on_a_full_disk_releases_everything_and_the_next_boot_replays(harness, monkeypatch):
    """The journal and the entry logs are full when the bookie stops: stop still lets go
    of the index and every file (the bookie boots again once space is freed), reports that
    it did not stop cleanly, and the next boot replays the journal: every acknowledged
    entry and state is there."""
    h = harness(flush_interval=3600.0)
    h.boot()
    for eid in range(5):
        assert h.add(4, eid, b"acked%d" % eid).status == StatusCode.EOK
    assert h.request(OpCode.READ, 5, -1, flags=ReadFlags.FENCE).status == StatusCode.EOK
    monkeypatch.setattr(AppendFile, "append_parts", _no_space)
    assert h.add(4, 5, b"never").status == StatusCode.EIO  # unknown to its writer
    try:
        h.stop()
    except BookieIOError as exc:
        assert "not cleanly" in str(exc) and "replays the journal" in str(exc)
        assert isinstance(exc.__cause__, OSError) and exc.__cause__.errno == errno.ENOSPC
    else:
        raise AssertionError("a stop whose final flush failed must say so")
    assert h.bookie.state.value == "stopped"
    _boot_fails_while_full(h)  # the index lock was released: the boot got as far as flushing

    monkeypatch.undo()  # the operator freed space
    b = h.boot()
    assert b.unclean_shutdown_detected
    for eid in range(5):
        assert h.read(4, eid).body.endswith(b"acked%d" % eid)
    assert h.add(5, 0, b"old writer").status == StatusCode.EFENCED
    assert h.add(4, 5, b"again").status == StatusCode.EOK
    h.stop()  # clean this time
    assert not h.boot().unclean_shutdown_detected
    assert h.read(4, 5).body.endswith(b"again")


def test_stop_with_only_the_ledger_disk_full(harness, monkeypatch):
    """The journal is fine, the entry logs are full: the acknowledged entries exist only in
    the journal, and the stop must not move the checkpoint past them."""
    h = harness(flush_interval=3600.0)
    h.boot()
    for eid in range(3):
        assert h.add(6, eid, b"e%d" % eid).status == StatusCode.EOK
    monkeypatch.setattr(EntryLogs, "append_many", _no_space)
    try:
        h.stop()
    except BookieIOError as exc:
        assert exc.__cause__ is not None and exc.__cause__.errno == errno.ENOSPC
    else:
        raise AssertionError("the final flush should have met the full disk")
    monkeypatch.undo()
    assert h.boot().unclean_shutdown_detected
    for eid in range(3):
        assert h.read(6, eid).body.endswith(b"e%d" % eid)


def test_a_bookie_on_a_full_disk_does_not_keep_the_cluster_down(make_cluster, monkeypatch):
    """The cluster's story: bookie-2's disk fills up; stop_bookie still stops it; the whole
    cluster restarts without it (start() names it and why); once space is freed it boots,
    replays its journal and holds every acknowledged entry."""
    cluster = make_cluster(3, flush_interval=3600.0)
    full_dir = cluster.bookie_config("bookie-2").data_dir
    real_append = AppendFile.append_parts

    def append_unless_full(self, parts, **kw):
        if full_dir in self.path.parents:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_append(self, parts, **kw)

    client = cluster.client()
    wh = client.create_ledger(3, 3, 3)
    acked = [wh.add(b"entry %d" % i) for i in range(20)]
    wh.close()
    monkeypatch.setattr(AppendFile, "append_parts", append_unless_full)
    try:
        cluster.stop_bookie("bookie-2")
    except BookieIOError as exc:
        assert "bookie-2 stopped, but not cleanly" in str(exc)
    else:
        raise AssertionError("the final flush should have met the full disk")
    cluster.stop()

    cluster.start()  # bookie-2 still cannot boot: it would replay onto a full disk
    assert list(cluster.failed_bookies) == ["bookie-2"]
    why = cluster.failed_bookies["bookie-2"]
    assert isinstance(why, OSError) and why.errno == errno.ENOSPC
    assert cluster.running_bookies() == ["bookie-1", "bookie-3"]
    client = cluster.client()
    rh = client.open_ledger(wh.ledger_id)
    assert [e.data for e in rh.read(0, acked[-1])] == [b"entry %d" % i for i in acked]
    assert client.create_ledger(2, 2, 2).add(b"on the others") == 0

    monkeypatch.undo()  # space freed
    cluster.start_bookie("bookie-2")
    assert cluster.failed_bookies == {}
    assert cluster.bookie("bookie-2").unclean_shutdown_detected
    for eid in acked:
        assert cluster.read_from_bookie("bookie-2", wh.ledger_id, eid) == b"entry %d" % eid


def test_start_raises_when_no_bookie_can_boot(make_cluster, monkeypatch):
    cluster = make_cluster(2, flush_interval=3600.0)
    wh = cluster.client().create_ledger(2, 2, 2)
    wh.add(b"x")
    monkeypatch.setattr(AppendFile, "append_parts", _no_space)
    for bid in cluster.bookie_ids:
        try:
            cluster.stop_bookie(bid)
        except BookieIOError:
            pass
    cluster.stop()
    try:
        cluster.start()
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
        notes = "\n".join(exc.__notes__)
        assert "bookie bookie-1 could not boot" in notes
        assert "bookie bookie-2 could not boot" in notes
    else:
        raise AssertionError("a cluster none of whose bookies boots must not start")
    assert cluster.running_bookies() == []
    monkeypatch.undo()
    cluster.start()
    assert cluster.failed_bookies == {}
    assert cluster.client().open_ledger(wh.ledger_id).read(0, 0)[0].data == b"x"


def test_nothing_is_journaled_after_a_group_that_filled_the_disk_part_way(tmp_path):
    """A group that fills the disk mid-write leaves part of itself in the journal file.
    Records queued while it was being written must not follow it there: the next boot
    would find an intact record behind a broken one and take it for lost acknowledged
    records (suspicious boot: every ledger fenced and in limbo, and ledgers that could
    not be recovered after healing; found by the simulator, seed 573 of ``bounded``).
    Left at the end, the broken group is a torn tail, cut at replay."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from embedlog.bookie import journal, journal_replay
    from embedlog.bookie.config import BookieConfig

    config = BookieConfig("b1", tmp_path)
    config.journal_dir.mkdir()
    first, second, third = (b"S" + bytes(8) + b'{"%s": 1}' % n for n in (b"a", b"b", b"c"))
    writing, queued = threading.Event(), threading.Event()
    real_append = AppendFile.append_parts

    def fills_up(self, parts, **kw):
        if b"".join(parts).find(second) < 0:
            return real_append(self, parts, **kw)
        writing.set()
        queued.wait()  # the third record is queued while this group is being written
        data = b"".join(parts)
        real_append(self, [data[: len(data) // 2]])
        raise OSError(errno.ENOSPC, "No space left on device")

    async def scenario() -> list[str]:
        with ThreadPoolExecutor(1) as executor:
            j = journal.Journal(config, executor, 0)
            j.start()
            await j.append(first)
            failed = j.append(second)
            await asyncio.get_running_loop().run_in_executor(None, writing.wait)
            queued_meanwhile = j.append(third)
            queued.set()
            outcomes = []
            for fut in (failed, queued_meanwhile):
                try:
                    await fut
                    outcomes.append("durable")
                except OSError as exc:
                    outcomes.append(f"failed: {exc.strerror}")
            await asyncio.sleep(0.05)  # the writer would have written the third by now
            j.crash()
            return outcomes

    AppendFile.append_parts = fills_up  # type: ignore[method-assign]
    try:
        outcomes = asyncio.run(scenario())
    finally:
        AppendFile.append_parts = real_append  # type: ignore[method-assign]
    assert outcomes == ["failed: No space left on device"] * 2
    replay = journal_replay.Replay(config.journal_dir, 0)
    assert [payload for _lsn, payload in replay] == [first]
    assert replay.damage == []  # a torn tail, not records lost behind a broken one
