"""An idle bookie's periodic flush is done where the flush loop wakes, without the
coroutines of a flush with work: a simulated bookie flushes every 20 ms in a third of
the histories, idle nearly always (docs/simulation.md, Speed). It still counts as a
flush and removes the journal files the checkpoint covers; a flush with work, or one
of a read-only bookie, takes the whole path."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from embedlog.bookie.flushing import Flusher
from embedlog.wire.codes import StatusCode


def wait(h: Any, cond: Callable[[], bool]) -> None:
    """Run the bookie's loop until ``cond`` (no deadline: pytest's own timeout applies)."""
    while not cond():
        h.run(asyncio.sleep(0.01))


def counted(monkeypatch: Any) -> list[int]:
    """Count the flushes that take the whole path (``Flusher._in_background``)."""
    calls = [0]
    real = Flusher._in_background

    async def whole(self: Flusher) -> None:
        calls[0] += 1
        await real(self)

    monkeypatch.setattr(Flusher, "_in_background", whole)
    return calls


def test_an_idle_bookie_flushes_in_place(harness: Any, monkeypatch: Any) -> None:
    h = harness(flush_interval=0.01)
    h.boot()
    storage = h.bookie.storage
    assert h.add(1, 0, b"first").status == StatusCode.EOK
    wait(h, lambda: not storage.cache and storage.index.location(1, 0) is not None)
    whole = counted(monkeypatch)
    before = storage.flushes
    wait(h, lambda: storage.flushes >= before + 5)
    assert whole[0] == 0  # five idle flushes, none through the coroutines
    assert h.add(1, 1, b"second").status == StatusCode.EOK
    wait(h, lambda: storage.index.location(1, 1) is not None)
    assert whole[0] >= 1  # the flush with work took the whole path


def test_an_idle_read_only_bookie_takes_the_whole_path(harness: Any, monkeypatch: Any) -> None:
    """Writable again after a flush is the whole path's to decide (_resume_writes)."""
    h = harness(flush_interval=0.01)
    h.boot()
    whole = counted(monkeypatch)
    h.bookie.flusher.go_readonly()
    wait(h, lambda: not h.bookie.readonly)
    assert whole[0] >= 1
    assert h.meta.writable_bookies() == ["b1"]
