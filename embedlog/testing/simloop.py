"""Virtual time and a simulated disk for the deterministic simulator (one thread).

``VirtualClockLoop`` is an asyncio event loop whose clock only moves when nothing is
ready to run: it then jumps to the next timer instead of sleeping, so a 5 s request
timeout costs no real time. ``SimDisk`` is the ``concurrent.futures.Executor`` a
simulated bookie gets for its journal's and its flush's disk work: the work runs on
the loop thread, one item at a time in submission order (as on the bookie's one disk
thread), each after a latency drawn from the simulation's seed. ``LoopClock`` is the
``Clock`` (embedlog/clock.py) every simulated client and bookie reads the time from:
nothing patches ``time``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import heapq
import itertools
import random
import selectors
from asyncio import events, format_helpers
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from attrs import frozen

T = TypeVar("T")

# time.time() inside a simulation: a fixed epoch plus the virtual clock, so that
# timestamps that reach the metadata (ledger ctime) are the same on every run.
SIM_EPOCH = 1_700_000_000.0

# Nothing scheduled for later runs sooner than this after now. A real clock always moves
# on between two callbacks; without this, code that re-arms a timer for "the rest of
# the interval" (interval - elapsed, a rounding error away from zero) would re-arm it
# for ever at the same virtual instant.
TICK = 1e-6
_HALF_TICK = TICK / 2  # timers due within it of now run now


_Handle = events.Handle
_TimerHandle = events.TimerHandle


class _SimTimer(_TimerHandle):
    """asyncio's TimerHandle with its cancel in one call: most timers (every request's
    timeout, every ``wait_for``'s) are cancelled, through three Python calls in asyncio
    (TimerHandle.cancel, the loop's _timer_handle_cancelled, Handle.cancel). The same
    effects, the loop never in debug mode."""

    __slots__ = ()

    def cancel(self) -> None:
        if not self._cancelled:  # type: ignore[has-type]
            if self._scheduled:  # type: ignore[attr-defined]
                self._loop._timer_cancelled_count += 1  # type: ignore[attr-defined]
            self._cancelled = True
            self._callback = None  # type: ignore[assignment]
            self._args = None  # type: ignore[assignment]


_new_handle = _Handle.__new__
_new_timer = _TimerHandle.__new__
_copy_context = contextvars.copy_context
_heappush = heapq.heappush
_heappop = heapq.heappop


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
    """An event loop whose clock jumps to the next timer when nothing is ready.

    Its own timer heap holds (when, sequence, handle) tuples (compared in C, where
    asyncio's heap compares handles in Python), timers due at one instant run in the
    order they were set, and one iteration of the loop does only what a loop without
    I/O needs: most of a simulation's time is spent in the loop itself.
    """

    def __init__(self) -> None:
        selector = _VirtualSelector()
        super().__init__(selector)
        selector.loop = self
        self._now = 0.0
        self._timers: list[tuple[float, int, asyncio.TimerHandle]] = []
        self._timer_cancelled_count: int = 0  # asyncio's own, set by BaseEventLoop too
        self._sequence = itertools.count()

    def time(self) -> float:
        return self._now

    def advance_to_next_timer(self, timeout: float) -> None:
        # To the due time itself: now + (when - now) can fall short of it by a rounding.
        timers = self._timers
        self._now = max(self._now + timeout, timers[0][0] if timers else 0.0)

    def call_at(  # type: ignore[override]  # the same signature, less its generics
        self, when: float, callback: Callable[..., object], *args: Any, context: Any = None
    ) -> asyncio.TimerHandle:
        if self._closed:  # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")
        return self._timer(max(when, self._now + TICK), callback, args, context)

    def call_later(  # type: ignore[override]
        self, delay: float, callback: Callable[..., object], *args: Any, context: Any = None
    ) -> asyncio.TimerHandle:
        # BaseEventLoop.call_later is time() + delay handed to call_at: the same sum here.
        if delay is None:
            raise TypeError("delay must not be None")
        if self._closed:  # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")
        # max(now + delay, now + TICK), a float addition fewer (a sum is monotonic in
        # its addend, so the larger addend gives the larger sum, ties included).
        now = self._now
        return self._timer(now + delay if delay > TICK else now + TICK, callback, args, context)

    def _timer(
        self, when: float, callback: Callable[..., object], args: tuple[Any, ...], context: Any
    ) -> asyncio.TimerHandle:
        # asyncio's TimerHandle, its slots filled here rather than by its two __init__s
        # (which also ask get_debug): a timer is set for every sleep, request and disk op.
        timer: Any = _new_timer(_SimTimer)
        timer._context = context if context is not None else _copy_context()
        timer._loop = self
        timer._callback = callback
        timer._args = args
        timer._cancelled = False
        timer._repr = None
        timer._source_traceback = None
        timer._when = when
        timer._scheduled = True
        _heappush(self._timers, (when, next(self._sequence), timer))
        return timer  # type: ignore[no-any-return]

    def call_soon(  # type: ignore[override]
        self, callback: Callable[..., object], *args: Any, context: Any = None
    ) -> asyncio.Handle:
        if self._closed:  # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")
        # asyncio's Handle, filled in place (see _timer): every task step and every
        # future's callback comes through here.
        handle: Any = _new_handle(_Handle)
        handle._context = context if context is not None else _copy_context()
        handle._loop = self
        handle._callback = callback
        handle._args = args
        handle._cancelled = False
        handle._repr = None
        handle._source_traceback = None
        self._ready.append(handle)  # type: ignore[attr-defined]
        return handle  # type: ignore[no-any-return]

    def get_debug(self) -> bool:
        return False  # every handle asks: the simulation never runs in debug mode

    def run_in_executor(  # type: ignore[override]
        self, executor: Any, func: Callable[..., T], *args: Any
    ) -> Any:
        # A simulated executor (a disk's, the metadata's default one) that serves its work
        # on the loop hands back the loop's own future, without a concurrent one chained
        # to it: the same steps, less of asyncio's thread-safe machinery.
        target = executor
        if target is None and not self._closed:  # type: ignore[attr-defined]
            target = self._default_executor  # type: ignore[attr-defined]
        submit = getattr(target, "submit_to_loop", None)
        if submit is not None:
            return submit(func, args)
        return super().run_in_executor(executor, func, *args)

    def _run_once(self) -> None:
        """Runs the loop until it is stopped, where asyncio's returns after one batch of
        ready callbacks to ``run_forever``'s loop: the same batches in the same order
        (one is what was ready when it began; a stop ends the run after its batch), a
        third less of the loop's own work per callback."""
        ready: deque[asyncio.Handle] = self._ready  # type: ignore[attr-defined]
        popleft = ready.popleft
        while True:
            timers = self._timers
            if len(timers) > 100 and self._timer_cancelled_count * 2 > len(timers):  # type: ignore[attr-defined]
                # Request timeouts are mostly cancelled: drop them before they pile up.
                kept = []
                for entry in timers:
                    if entry[2]._cancelled:  # type: ignore[attr-defined]
                        entry[2]._scheduled = False  # type: ignore[attr-defined]
                    else:
                        kept.append(entry)
                heapq.heapify(kept)
                self._timers = timers = kept
                self._timer_cancelled_count = 0
            else:
                while timers and timers[0][2]._cancelled:  # type: ignore[attr-defined]
                    self._timer_cancelled_count -= 1
                    _heappop(timers)[2]._scheduled = False  # type: ignore[attr-defined]
            if not ready and not self._stopping:  # type: ignore[attr-defined]
                if not timers:
                    raise SimulationStuckError(
                        "the simulation is stuck: no callback is ready and no timer is pending"
                    )
                if timers[0][0] > self._now:
                    self._now = timers[0][0]  # nothing to do until then: time jumps
            end = self._now + _HALF_TICK
            while timers and timers[0][0] < end:
                timer = _heappop(timers)[2]
                timer._scheduled = False  # type: ignore[attr-defined]
                ready.append(timer)
            for _ in range(len(ready)):
                handle = popleft()
                if handle._cancelled:  # type: ignore[attr-defined]
                    continue
                # Handle._run, inlined: one call less per callback. Most callbacks take no
                # argument (task steps) or one (a future's callbacks): a call without a
                # starred tuple costs half as much.
                args = handle._args  # type: ignore[attr-defined]
                try:
                    if not args:
                        handle._context.run(handle._callback)  # type: ignore[attr-defined]
                    elif len(args) == 1:
                        handle._context.run(handle._callback, args[0])  # type: ignore[attr-defined]
                    else:
                        handle._context.run(handle._callback, *args)  # type: ignore[attr-defined]
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:
                    self._callback_failed(handle, exc)
            if self._stopping:  # type: ignore[attr-defined]
                return

    def _callback_failed(self, handle: asyncio.Handle, exc: BaseException) -> None:
        # What Handle._run reports for a callback that raised.
        cb = format_helpers._format_callback_source(  # type: ignore[attr-defined]
            handle._callback,  # type: ignore[attr-defined]
            handle._args,  # type: ignore[attr-defined]
        )
        self.call_exception_handler(
            {"message": f"Exception in callback {cb}", "exception": exc, "handle": handle}
        )

    def close(self) -> None:
        self._timers.clear()
        super().close()

    def _write_to_self(self) -> None:
        # call_soon_threadsafe wakes a sleeping select; ours never sleeps (one thread).
        pass


@frozen
class LoopClock:
    """The ``Clock`` (embedlog/clock.py) the simulator gives every client and bookie: the
    loop's virtual time, and wall time a fixed epoch after it (``SIM_EPOCH``)."""

    loop: asyncio.AbstractEventLoop

    def monotonic(self) -> float:
        return self.loop.time()

    def time(self) -> float:
        return SIM_EPOCH + self.loop.time()


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
        # Work waits here with its future: a concurrent one (``submit``: a blocking wait
        # may come) or the loop's own (``submit_to_loop``: awaited, never blocked on).
        self._queue: deque[tuple[Any, Callable[..., Any], tuple[Any, ...]]] = deque()
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

    def submit_to_loop(self, fn: Callable[..., T], args: tuple[Any, ...]) -> asyncio.Future[T]:
        """``run_in_executor`` on this disk: the loop's future, without a concurrent one
        chained to it (the thread-safe machinery is a third of a disk operation's cost)."""
        if self._shut:
            raise RuntimeError(f"disk {self.name} is shut down")
        fut: asyncio.Future[T] = self._loop.create_future()
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
            if isinstance(fut, asyncio.Future):
                if fut.cancelled():
                    continue
            elif not fut.set_running_or_notify_cancel():
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
