"""Virtual time and a simulated disk for the deterministic simulator (one thread).

``VirtualClockLoop`` is an asyncio event loop whose clock only moves when nothing is
ready to run: it then jumps to the next timer instead of sleeping, so a 5 s request
timeout costs no real time. ``SimDisk`` is the ``concurrent.futures.Executor`` a
simulated bookie gets for its journal's and its flush's disk work: the work runs on
the loop thread, one item at a time in submission order (as on the bookie's one disk
thread), each after a latency drawn from the simulation's seed. ``virtual_clock``
points ``time.monotonic``/``time.time`` at the loop's clock while a simulation runs,
because the client's protocol code reads them for its own timeouts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import random
import selectors
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

# time.time() inside a simulation: a fixed epoch plus the virtual clock, so that
# timestamps that reach the metadata (ledger ctime) are the same on every run.
SIM_EPOCH = 1_700_000_000.0

# Nothing scheduled for later runs sooner than this after now. A real clock always moves
# on between two callbacks; without this, code that re-arms a timer for "the rest of
# the interval" (interval - elapsed, a rounding error away from zero) would re-arm it
# for ever at the same virtual instant.
TICK = 1e-6


class SimulationStuckError(RuntimeError):
    """Nothing is ready and no timer is due: every task waits for something that never comes."""


class _VirtualSelector(selectors.SelectSelector):
    """Never waits: a wait of ``timeout`` seconds moves the loop's clock instead.

    Only the loop's own self-pipe is registered (a simulation does no real I/O), and
    the loop runs in one thread, so nothing can ever become readable while we "wait".
    """

    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualClockLoop | None = None

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is None:
            raise SimulationStuckError(
                "the simulation is stuck: no callback is ready and no timer is pending"
            )
        if timeout > 0 and self.loop is not None:
            self.loop.advance_to_next_timer(timeout)
        return []


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        selector = _VirtualSelector()
        super().__init__(selector)
        selector.loop = self
        self._now = 0.0

    def time(self) -> float:
        return self._now

    def advance_to_next_timer(self, timeout: float) -> None:
        # To the due time itself: now + (when - now) can fall short of it by a rounding.
        scheduled: list[asyncio.TimerHandle] = self._scheduled  # type: ignore[attr-defined]
        self._now = max(self._now + timeout, scheduled[0].when() if scheduled else 0.0)

    def call_at(  # type: ignore[override]  # the same signature, less its generics
        self, when: float, callback: Callable[..., object], *args: Any, context: Any = None
    ) -> asyncio.TimerHandle:
        return super().call_at(max(when, self._now + TICK), callback, *args, context=context)

    def _write_to_self(self) -> None:
        # call_soon_threadsafe wakes a sleeping select; ours never sleeps (one thread).
        pass


@contextlib.contextmanager
def virtual_clock(loop: VirtualClockLoop) -> Iterator[None]:
    """``time.monotonic`` and ``time.time`` read ``loop``'s clock (restored on exit).

    Process-wide for the duration: run one simulation at a time, never beside threads
    that need the real clock from Python code.
    """
    saved = time.monotonic, time.time

    def monotonic() -> float:
        return loop.time()

    def wall() -> float:
        return SIM_EPOCH + loop.time()

    time.monotonic, time.time = monotonic, wall  # type: ignore[assignment]
    try:
        yield
    finally:
        time.monotonic, time.time = saved  # type: ignore[assignment]


class _DiskFuture(concurrent.futures.Future[Any]):
    """A blocking wait for disk work (a crash's or a close's ``.result()``) runs the disk's
    queue up to it at once, in order: the thread it would wait for is this one."""

    def __init__(self, disk: SimDisk) -> None:
        super().__init__()
        self._disk = disk

    def result(self, timeout: float | None = None) -> Any:
        if not self.done():
            self._disk.run_through(self)
        return super().result(timeout)


class SimDisk(concurrent.futures.Executor):
    """One bookie's disk thread, simulated: work runs in submission order, each item
    ``latency()`` virtual seconds after the previous one finished."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        name: str,
        latency: Callable[[], float],
        on_run: Callable[[str], None],
    ) -> None:
        self._loop = loop
        self.name = name
        self._latency = latency
        self._on_run = on_run
        self._queue: deque[tuple[_DiskFuture, Callable[..., Any], tuple[Any, ...]]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._shut = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise TypeError("SimDisk.submit takes positional arguments only")
        if self._shut:
            raise RuntimeError(f"disk {self.name} is shut down")
        fut = _DiskFuture(self)
        self._queue.append((fut, fn, args))
        self._schedule()
        return fut

    def _schedule(self) -> None:
        if self._timer is None and self._queue:
            self._timer = self._loop.call_later(self._latency(), self._run_next)

    def _run_next(self) -> None:
        self._timer = None
        self._run_one()
        self._schedule()

    def _run_one(self) -> None:
        while self._queue:
            fut, fn, args = self._queue.popleft()
            if not fut.set_running_or_notify_cancel():
                continue  # cancelled before it started: it never touches the disk
            self._on_run(getattr(fn, "__name__", "work"))
            try:
                result = fn(*args)
            except BaseException as exc:
                fut.set_exception(exc)
            else:
                fut.set_result(result)
            return

    def run_through(self, target: _DiskFuture) -> None:
        while not target.done() and self._queue:
            self._run_one()

    def lose_pending(self) -> int:
        """A power cut: queued work that had not started never reaches the disk."""
        lost = 0
        while self._queue:
            fut, _fn, _args = self._queue.popleft()
            if fut.cancel():
                lost += 1
        return lost

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._shut = True
        if self._timer is not None and not self._queue:
            self._timer.cancel()
            self._timer = None


def seeded(seed: int, *salt: object) -> random.Random:
    """An independent stream of the seed's randomness for one purpose (``salt`` names it),
    so that adding draws to one purpose does not shift every other one."""
    return random.Random(f"{seed}:" + ":".join(map(str, salt)))
