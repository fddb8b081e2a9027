"""A bookie with nothing to flush parks its flush loop until the next change, instead of
flushing nothing every interval: an embedded bookie at rest does not wake, and a
simulated one (flushing every 20 ms in a third of the histories) costs the simulator no
wake-ups (docs/simulation.md, Speed). Whatever a flush would write wakes it: an entry
cached, a ledger's state set; and so does going read-only, since only a flush makes the
bookie writable again."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable
from typing import Any

from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import NO_TERM, OpCode

INTERVAL = 0.01


def wait(h: Any, cond: Callable[[], bool]) -> None:
    """Run the bookie's loop until ``cond`` (no deadline: pytest's own timeout applies)."""
    while not cond():
        h.run(asyncio.sleep(INTERVAL))


def parked(h: Any) -> bool:
    wake = h.bookie.flusher._wake
    return wake is not None and not wake.done()


def idle_after_an_add(harness: Any) -> Any:
    """A bookie that flushed its one entry and parked."""
    h = harness(flush_interval=INTERVAL)
    h.boot()
    assert h.add(1, 0, b"first").status == StatusCode.EOK
    wait(h, lambda: h.bookie.storage.index.location(1, 0) is not None and parked(h))
    return h


def test_an_idle_bookie_parks_until_an_add(harness: Any) -> None:
    h = idle_after_an_add(harness)
    storage = h.bookie.storage
    before = storage.flushes
    h.run(asyncio.sleep(20 * INTERVAL))
    assert storage.flushes == before and parked(h)  # twenty intervals, no flush at all
    assert h.add(1, 1, b"second").status == StatusCode.EOK
    assert not parked(h)
    wait(h, lambda: storage.index.location(1, 1) is not None and parked(h))
    after = storage.flushes
    h.run(asyncio.sleep(20 * INTERVAL))
    assert storage.flushes == after  # parked again


def test_a_state_change_alone_wakes_it(harness: Any) -> None:
    """A WRITE_LAC caches no entry; the LAC it sets must still reach the index."""
    h = idle_after_an_add(harness)
    storage = h.bookie.storage
    assert h.request(OpCode.WRITE_LAC, 1, 0, term=NO_TERM).status == StatusCode.EOK
    wait(h, lambda: storage.index.ledger(1).explicit_lac == 0)


def test_going_read_only_wakes_it(harness: Any) -> None:
    """Writable again after a flush is the whole path's to decide (_resume_writes): a
    parked flusher must run it."""
    h = harness(flush_interval=INTERVAL)
    h.boot()
    wait(h, lambda: parked(h))
    h.bookie.flusher.go_readonly()
    assert not parked(h)
    wait(h, lambda: not h.bookie.readonly)
    assert h.meta.writable_bookies() == ["b1"]


def test_an_idle_flush_that_fails_does_not_park_a_read_only_bookie(
    harness: Any, monkeypatch: Any
) -> None:
    """The idle pass's journal cleanup fails once (a transient EACCES): the bookie goes
    read-only and must not park, since it refuses the adds that would wake it; the next
    pass flushes and makes it writable again (review: it stayed read-only for good)."""
    h = harness(flush_interval=INTERVAL)
    h.boot()
    journal = h.bookie.journal
    real = journal.remove_before
    calls = [0]

    def fails_once(checkpoint: int) -> int:
        calls[0] += 1
        if calls[0] == 1:
            raise OSError(errno.EACCES, "permission denied")
        return real(checkpoint)

    monkeypatch.setattr(journal, "remove_before", fails_once)
    wait(h, lambda: calls[0] >= 1)
    wait(h, lambda: not h.bookie.readonly)
    assert h.meta.writable_bookies() == ["b1"]
    wait(h, lambda: parked(h))  # and idle again once healthy
