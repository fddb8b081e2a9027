"""The simulated disk's crash semantics and faults, and journal replay of what a power cut
leaves on it (no simulation loop needed: the disk is driven directly)."""

from __future__ import annotations

import errno
import random
from pathlib import Path

import crc32c
import pytest

from embedlog.bookie.journal_replay import FRAME, Replay, judge_bad_record
from embedlog.errors import BookieIOError
from embedlog.testing.simdisk import MemoryDisk, kept_tail
from embedlog.testing.simkv import MemoryKV

J = Path("/b/journal")


def disk(seed: int = 0, now: float = 0.0) -> tuple[MemoryDisk, list[tuple[str, str]]]:
    faults: list[tuple[str, str]] = []
    d = MemoryDisk(
        random.Random(seed), lambda: now, lambda what, detail: faults.append((what, detail))
    )
    d.mkdir(J)
    return d, faults


@pytest.mark.parametrize(
    ("draw", "tail", "kept"),
    [
        (0.0, 10, 0),  # none of the unsynced tail reached the platter
        (0.32, 10, 0),
        (0.34, 10, 10),  # all of it did (written, never acknowledged)
        (0.65, 10, 10),
        (0.7, 10, 4),  # a cut inside it: ``cut`` picks where (4 here)
        (0.99, 1, 1),  # one byte cannot be cut inside
        (0.5, 0, 0),  # nothing unsynced: nothing to keep
    ],
)
def test_a_power_cut_keeps_a_drawn_prefix_of_the_unsynced_tail(draw, tail, kept):
    assert kept_tail(draw, lambda lo, hi: max(lo, min(hi, 4)), tail) == kept


def test_a_power_cut_keeps_durable_bytes_and_a_prefix_of_the_rest():
    torn = 0
    for seed in range(200):
        d, faults = disk(seed)
        f = d.open_append(J / "f")
        f.append(b"durable!")
        f.sync()
        tail = bytes(random.Random(seed).getrandbits(8) for _ in range(40))
        f.append(tail)
        d.power_cut()
        left = d.read(J / "f")
        assert left.startswith(b"durable!")
        assert tail.startswith(left[8:])  # a prefix of what was written, never other bytes
        torn += bool(faults)
        assert bool(faults) == (0 < len(left) - 8 < len(tail))
    assert 30 < torn < 170  # a third of the cuts tear (kept_tail)


def test_a_file_never_fsynced_is_gone_after_a_power_cut_and_a_closed_one_is_not():
    d, _ = disk()
    new = d.open_append(J / "new")
    new.append(b"x" * 10)
    kept = d.open_append(J / "kept")
    kept.append(b"y")
    kept.sync()
    kept.close()
    d.power_cut()
    assert d.listdir(J) == ["kept"]
    with pytest.raises(FileNotFoundError):
        d.read(J / "new")


def test_a_crashed_handle_refuses_writes_and_the_next_incarnation_appends_after_the_cut():
    d, _ = disk(seed=3)
    f = d.open_append(J / "f")
    f.append(b"a" * 5)
    f.sync()
    f.crash()
    with pytest.raises(OSError, match="crashed"):
        f.append(b"b")
    d.power_cut()
    again = d.open_append(J / "f")
    assert again.size == 5 and again.durable == 5
    assert again.append(b"c") == 5


def test_a_full_disk_writes_a_prefix_then_fails_and_has_room_again_later():
    now = [0.0]
    faults: list[tuple[str, str]] = []
    d = MemoryDisk(random.Random(1), lambda: now[0], lambda w, detail: faults.append((w, detail)))
    d.mkdir(J)
    f = d.open_append(J / "f")
    f.append(b"before")
    f.sync()
    d.fill(until=1.0)
    with pytest.raises(OSError) as err:
        f.append(b"0123456789")
    assert err.value.errno == errno.ENOSPC
    assert b"0123456789".startswith(d.read(J / "f")[6:])  # part may be in (never all)
    assert f.size < 16
    with pytest.raises(OSError) as err:
        f.sync()
    assert err.value.errno == errno.ENOSPC
    assert f.durable == 6
    assert [w for w, _ in faults] == ["disk_full"]  # one episode, heard once
    now[0] = 1.0
    at = f.append(b"after")
    f.sync()
    assert f.durable == at + 5


def test_a_failing_fsync_makes_nothing_more_durable_once():
    d, faults = disk()
    f = d.open_append(J / "f")
    f.append(b"abc")
    d.fail_syncs(1)
    with pytest.raises(OSError) as err:
        f.sync()
    assert err.value.errno == errno.EIO
    assert f.durable == -1 and faults == [("fsync_error", "f")]
    f.sync()
    assert f.durable == 3


def test_a_wipe_erases_files_and_index_and_keeps_empty_directories():
    d, _ = disk()
    d.write_atomic(J / "COOKIE", b"me")
    kv = d.open_index(Path("/b/index"), create=True)
    kv.put(b"k", b"v")
    kv.close()
    d.wipe()
    assert d.listdir(J) == [] and d.listdir(Path("/b/index")) == []
    assert not d.has_index(Path("/b/index"))
    with pytest.raises(BookieIOError, match="damaged"):
        d.open_index(Path("/b/index"), create=False)


def test_the_index_keeps_every_accepted_write_through_a_power_cut():
    d, _ = disk()
    kv = d.open_index(Path("/b/index"), create=True)
    kv.put(b"a", b"1")
    with kv.batch() as b:
        b.put(b"b", b"2")
        b.delete(b"a")
    with pytest.raises(RuntimeError), kv.batch() as b:  # a batch that fails applies nothing
        b.put(b"c", b"3")
        raise RuntimeError
    kv.close()
    d.power_cut()
    again = d.open_index(Path("/b/index"), create=False)
    assert list(again.scan(b"")) == [(b"b", b"2")]


def test_the_memory_index_scans_prefixes_in_order_and_from_a_snapshot():
    kv = MemoryKV()
    for k in (b"E2", b"E1", b"F1", b"E3", b"D9"):
        kv.put(k, k.lower())
    assert list(kv.scan(b"E", include_value=False)) == [b"E1", b"E2", b"E3"]
    assert list(kv.scan(b"E", reverse=True, include_value=False)) == [b"E3", b"E2", b"E1"]
    it = kv.scan(b"E")
    kv.delete(b"E2")
    kv.put(b"E4", b"e4")
    assert list(it) == [(b"E1", b"e1"), (b"E2", b"e2"), (b"E3", b"e3")]
    assert kv.get(b"E2") is None and kv.get(b"E4") == b"e4"


def record(payload: bytes) -> bytes:
    return FRAME.pack(len(payload), crc32c.crc32c(payload)) + payload


def test_journal_replay_of_a_torn_tail_cuts_it_and_keeps_every_whole_record():
    seen_mid_header = seen_mid_payload = 0
    for seed in range(300):
        d, faults = disk(seed)
        f = d.open_append(J / f"{0:020d}.jnl")
        durable = [b"S" + bytes(8) + b"acked-%d" % i for i in range(3)]
        f.append_parts([record(p) for p in durable])
        f.sync()
        unsynced = [b"B" + bytes(8) + b"in-flight-%d" % i * (i + 1) for i in range(4)]
        f.append_parts([record(p) for p in unsynced])
        d.power_cut()
        data = d.read(J / f"{0:020d}.jnl")
        replay = Replay(J, 0, d)
        got = [p for _lsn, p in replay]
        assert got[:3] == durable  # acknowledged: always there
        assert got[3:] == unsynced[: len(got) - 3]  # then whole unsynced records only
        assert replay.damage == []  # a torn tail is no damage: the boot is not suspicious
        whole = sum(len(record(p)) for p in got)
        assert d.size(J / f"{0:020d}.jnl") == whole  # cut durably at the last whole record
        if faults and len(data) > whole:
            verdict = judge_bad_record(data, whole, last_file=True)
            assert verdict.torn_tail, verdict
            seen_mid_header += len(data) - whole < FRAME.size
            seen_mid_payload += len(data) - whole >= FRAME.size
    assert seen_mid_header and seen_mid_payload  # the draws tore both ways
