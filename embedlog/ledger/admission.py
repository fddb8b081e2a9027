"""What an add passes before a writer takes it: the entry size limit and the bound on
adds in flight (docs/security.md, "Client limits").

An add is *in flight* from ``add_async``/``append_async`` (or their asyncio flavours)
until its future is done: acknowledged, failed, or cancelled before the loop took it.
Each writer has an ``AddBudget`` that counts those adds and their payload bytes. When
the next add would exceed either bound, the caller waits for room (the default, like
Kafka's ``max.block.ms`` or BookKeeper's add throttle) or, after ``max_block_seconds``,
gets ``TooManyAddsInFlightError``. Waiting is done by the caller: a blocked thread, or
an awaiting coroutine, never the runtime's loop, which is what releases room.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from typing import TYPE_CHECKING

from embedlog.errors import BKError, EntryTooLargeError, TooManyAddsInFlightError
from embedlog.wire.limits import MAX_ENTRY_SIZE, MIB

if TYPE_CHECKING:
    from embedlog.runtime import Runtime

# Per writing handle. Enough to keep the writer's window (``max_outstanding_adds``) full
# and its batches large; small enough that a caller adding faster than the bookies store
# holds some 20 MB of bookkeeping plus the payloads, not gigabytes.
DEFAULT_MAX_ADDS_IN_FLIGHT = 10_000
DEFAULT_MAX_BYTES_IN_FLIGHT = 64 * MIB


def check_limits(
    max_entry_size: object,
    max_adds_in_flight: object,
    max_bytes_in_flight: object,
    max_block_seconds: object,
) -> None:
    """ValueError/TypeError naming the client option that is out of range."""
    for name, value, low, high in (
        ("max_entry_size", max_entry_size, 1, MAX_ENTRY_SIZE),
        ("max_adds_in_flight", max_adds_in_flight, 1, None),
        ("max_bytes_in_flight", max_bytes_in_flight, 1, None),
    ):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"between {low} and {high}"
            raise ValueError(f"{name} must be {bound}, got {value}")
    assert isinstance(max_entry_size, int) and isinstance(max_bytes_in_flight, int)
    if max_bytes_in_flight < max_entry_size:
        raise ValueError(
            f"max_bytes_in_flight ({max_bytes_in_flight}) must be at least max_entry_size "
            f"({max_entry_size}): else the largest entry could never be added"
        )
    if max_block_seconds is not None:
        if not isinstance(max_block_seconds, int | float) or isinstance(max_block_seconds, bool):
            kind = type(max_block_seconds).__name__
            raise TypeError(f"max_block_seconds must be a number or None, not {kind}")
        if not max_block_seconds >= 0:
            raise ValueError(
                f"max_block_seconds must be >= 0 (0: raise at once) or None (wait as long "
                f"as it takes), got {max_block_seconds}"
            )


def entry_bytes(data: object, max_entry_size: int, what: str) -> bytes:
    """``data`` as the bytes of one entry; TypeError or EntryTooLargeError otherwise.

    Checked before anything is copied, so that a huge entry costs nothing but the error.
    """
    if isinstance(data, memoryview):
        size = data.nbytes
    elif isinstance(data, bytes | bytearray):
        size = len(data)
    else:
        raise TypeError(f"entry data must be bytes, not {type(data).__name__}")
    if size > max_entry_size:
        raise EntryTooLargeError(
            f"{what}: an entry of {size} bytes exceeds this client's max_entry_size of "
            f"{max_entry_size} bytes; split the data into smaller entries, or raise "
            f"max_entry_size (up to {MAX_ENTRY_SIZE}) in cluster.client(...) or connect(...)"
        )
    return data if type(data) is bytes else bytes(data)


class _Waiter:
    """A coroutine waiting for room; ``granted`` once room was taken on its behalf."""

    __slots__ = ("future", "granted", "loop", "queued", "size")

    def __init__(self, loop: asyncio.AbstractEventLoop, size: int) -> None:
        self.loop = loop
        self.size = size
        self.future: asyncio.Future[None] = loop.create_future()
        self.queued = True
        self.granted = False


class AddBudget:
    """Adds in flight of one writer, and their payload bytes, held below two bounds.

    ``take`` (a caller's thread) and ``take_async`` (a coroutine, on any loop) reserve
    room for one add before it is queued; the writer ``release``s it, on the runtime's
    loop, once the add's future is done. A single add always fits when nothing is in
    flight (``max_bytes`` is at least the client's ``max_entry_size``).
    """

    def __init__(
        self, max_entries: int, max_bytes: int, max_block: float | None, name: str
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_block = max_block
        self.name = name
        self.entries = 0
        self.bytes = 0
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._threads_waiting = 0
        self._coroutines: deque[_Waiter] = deque()
        self._shut: BKError | None = None

    @property
    def waiting(self) -> int:
        """Callers waiting for room now (threads and coroutines)."""
        return self._threads_waiting + len(self._coroutines)

    def _fits(self, size: int) -> bool:
        return (
            self.entries < self.max_entries and self.bytes + size <= self.max_bytes
        ) or self.entries == 0

    def _full(
        self,
        size: int,
        why: str = "",
        instead: str = "let adds wait for room (max_block_seconds=None, the default)",
    ) -> TooManyAddsInFlightError:
        return TooManyAddsInFlightError(
            f"{self.name}: {self.entries} adds ({self.bytes} bytes) are in flight and one of "
            f"{size} bytes more would exceed max_adds_in_flight={self.max_entries} or "
            f"max_bytes_in_flight={self.max_bytes}{why}; wait for earlier adds' futures "
            f"before adding more, or {instead}"
        )

    # -- reserving ---------------------------------------------------------------------------

    def take(
        self, size: int, runtime: Runtime, *, wait: bool = True, instead: str = "let it wait"
    ) -> None:
        """Reserve room for one add of ``size`` bytes from a caller's thread, waiting for
        it unless ``max_block`` or ``wait=False`` says otherwise (``instead``: what the
        error suggests then). Waiting on ``runtime``'s own loop thread (a future's done
        callback runs there) would deadlock: that raises at once."""
        with self._lock:
            entries = self.entries
            if (
                (entries < self.max_entries and self.bytes + size <= self.max_bytes) or not entries
            ) and not (self._coroutines or self._shut):  # the common case, inlined
                self.entries = entries + 1
                self.bytes += size
                return
            if self._shut is not None:
                raise self._closed()
            if not wait:
                raise self._full(size, " (this add does not wait for room)", instead)
            if self.max_block == 0:
                raise self._full(size)
            if runtime.in_loop:
                raise self._full(
                    size,
                    ", and this call runs on the embedlog runtime's loop thread (in a "
                    "future's done callback, or a coroutine there), where waiting would stop "
                    "the acknowledgements that make room",
                    "add from another thread, or await add_aio/append_aio on that loop",
                )
            deadline = None if self.max_block is None else time.monotonic() + self.max_block
            self._threads_waiting += 1
            try:
                while not self._fits(size) or self._coroutines:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise self._full(size, f" for {self.max_block}s")
                    self._room.wait(left)
                    if self._shut is not None:
                        raise self._closed()
            finally:
                self._threads_waiting -= 1
            self.entries += 1
            self.bytes += size

    async def take_async(self, size: int) -> None:
        """``take`` for a coroutine on any loop: awaits room instead of blocking. Coroutines
        get room in the order they asked (an add queued behind a waiting one waits too)."""
        with self._lock:
            if self._shut is not None:
                raise self._closed()
            if not self._coroutines and self._fits(size):
                self.entries += 1
                self.bytes += size
                return
            if self.max_block == 0:
                raise self._full(size)
            waiter = _Waiter(asyncio.get_running_loop(), size)
            self._coroutines.append(waiter)
        try:
            if self.max_block is None:
                await waiter.future
            else:
                await asyncio.wait_for(asyncio.shield(waiter.future), self.max_block)
        except BaseException as exc:
            waiter.future.cancel()  # a wake-up still on its way finds it done
            with self._lock:
                granted = waiter.granted
                if waiter.queued:
                    waiter.queued = False
                    self._coroutines.remove(waiter)
            if granted:
                self.release(1, size)  # room taken for us, but we will not add
            if isinstance(exc, TimeoutError):
                raise self._full(size, f" for {self.max_block}s") from None
            raise

    # -- releasing ---------------------------------------------------------------------------

    def release(self, entries: int, size: int) -> None:
        """``entries`` adds of ``size`` payload bytes in all are no longer in flight."""
        with self._lock:
            self.entries -= entries
            self.bytes -= size
            if self._coroutines:
                self._grant()
            if self._threads_waiting:
                self._room.notify_all()

    def _grant(self) -> None:
        """Room for waiting coroutines, first come first served (under the lock)."""
        while self._coroutines:
            waiter = self._coroutines[0]
            if self._shut is None and not self._fits(waiter.size):
                return
            self._coroutines.popleft()
            waiter.queued = False
            try:
                closed = None if self._shut is None else self._closed()
                waiter.loop.call_soon_threadsafe(_wake, waiter.future, closed)
            except RuntimeError:  # its loop is closed: nobody waits there any more
                continue
            if self._shut is None:
                self.entries += 1
                self.bytes += waiter.size
                waiter.granted = True

    def _closed(self) -> BKError:
        """A fresh copy of the error ``shut`` gave, for each caller it stops."""
        assert self._shut is not None
        return type(self._shut)(str(self._shut))

    def shut(self, error: BKError) -> None:
        """No more adds: every waiter and every later ``take`` raises ``error``."""
        with self._lock:
            self._shut = error
            self._grant()
            self._room.notify_all()


def _wake(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
