"""A flush's per-entry work in steps the event loop can come in between.

A flush runs in a worker thread beside the loop that serves adds. Its per-entry work
(CRCs, record headers, index keys) is done by ``map`` in C, many times faster than a
Python loop, but a single ``map`` over a whole flush holds the GIL from start to end:
the interpreter hands the GIL to a waiting thread only between bytecodes. Flushing
20,000 entries on three bookies held it for 30-100 ms at a time, and every add and
answer waited. ``map_in_steps`` runs the same ``map`` in steps of ``STEP`` entries,
and lets go of the GIL between steps.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any, TypeVar

__all__ = ["STEP", "consume_in_steps", "map_in_steps"]

T = TypeVar("T")

# Entries per step: about half a millisecond of a flush's C work (a CRC and a header of
# 1 KiB entries), small beside the interpreter's 5 ms switch interval.
STEP = 512


def _pause() -> None:
    # Between bytecodes the interpreter hands the GIL over only after a thread has waited
    # its switch interval (5 ms) for it, and then to any waiting thread: with three
    # bookies flushing, the loop's thread lost to the other flushes again and again. A
    # sleep of 0 lets go of the GIL at once, which the waiting loop takes. Measured
    # (bench_flush_stall, 3 rounds each, same load): the loop's longest wait while three
    # bookies flush 20,000 entries, 41.7 ms in steps without it, 9.1 ms with it; the
    # flush took 212 against 232 ms.
    time.sleep(0)


def _steps(
    fn: Callable[..., T], length: int, iterables: tuple[Iterable[Any], ...]
) -> Iterator[map[T]]:
    """The ``map`` of ``fn`` over ``length`` items of ``iterables``, as one ``map`` per
    step, the GIL let go before each step after the first."""
    its = [iter(i) for i in iterables]
    for at in range(0, length, STEP):
        if at:
            _pause()
        yield map(fn, *(islice(it, STEP) for it in its))


def map_in_steps(fn: Callable[..., T], length: int, *iterables: Iterable[Any]) -> list[T]:
    """``list(map(fn, *iterables))`` for iterables of at least ``length`` items (the
    result has ``length``), made ``STEP`` items at a time."""
    out: list[T] = []
    for step in _steps(fn, length, iterables):
        out += step
    return out


def consume_in_steps(fn: Callable[..., object], length: int, *iterables: Iterable[Any]) -> None:
    """Call ``fn`` on ``length`` items of ``iterables`` (as ``map``), keeping no result."""
    for step in _steps(fn, length, iterables):
        deque(step, maxlen=0)
