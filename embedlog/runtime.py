"""The concurrency model: one asyncio event loop per runtime, in a thread of its own.

Bookies, transports and clients of a LocalCluster all run on its loop; the
blocking API (the public contract) submits coroutines to it and waits. Disk
waits (fsync) go to a thread per bookie's journal and per flusher
(embedlog/bookie/diskthread.py) so the loop never blocks on a disk, and the
journal batches a whole group of adds into one write and one fsync. What each
hand-off between these threads costs and buys: docs/performance.md. See
docs/design/overview.md for why this and not threads per request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from embedlog.errors import ClientClosedError
from embedlog.eventloop import new_event_loop
from embedlog.stopsignals import to_main_thread

T = TypeVar("T")


class Runtime:
    def __init__(self, name: str = "embedlog") -> None:
        self.name = name
        self.loop = new_event_loop()
        self._closed_reason: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"{name}-loop", daemon=True)
        self._started = threading.Event()
        with to_main_thread():  # and the threads the loop starts: disks, ZooKeeper's
            self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        self.loop.run_forever()

    @property
    def in_loop(self) -> bool:
        return threading.current_thread() is self._thread

    @property
    def closed_reason(self) -> str | None:
        """Why this runtime takes no more work (None while it does)."""
        if self._closed_reason is None and self.loop.is_closed():
            return f"the embedlog runtime {self.name} is closed"
        return self._closed_reason

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; returns a concurrent.futures.Future.

        ClientClosedError once the runtime is closed (or closing): its loop would never
        run ``coro``.
        """
        why = self.closed_reason
        if why is not None:
            coro.close()
            raise ClientClosedError(why)
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (from any other thread)."""
        if self.in_loop:
            coro.close()
            raise RuntimeError("blocking embedlog call made from the runtime's own loop thread")
        return self.submit(coro).result(timeout)

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a plain function on the loop thread and wait for its result."""

        async def _call() -> T:
            return fn(*args)

        return self.run(_call())

    def close(self, reason: str | None = None) -> None:
        """Stop the loop; later calls raise ClientClosedError with ``reason``."""
        if self.loop.is_closed():
            return
        if self._closed_reason is None:
            self._closed_reason = reason or f"the embedlog runtime {self.name} is closed"

        async def _shutdown() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(_shutdown(), self.loop).result(10)
            except Exception:
                pass
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
        self.loop.close()


async def wait_any(aws: list[Awaitable[Any]]) -> None:
    await asyncio.wait([asyncio.ensure_future(a) for a in aws], return_when=asyncio.FIRST_COMPLETED)


def settle(fut: asyncio.Future[T]) -> Callable[[T | BaseException], None]:
    """A callback that completes ``fut`` with the outcome it is given: a result, or the
    exception (callback-style code handing its outcome to a coroutine that awaits it)."""

    def done(outcome: T | BaseException) -> None:
        if fut.done():
            return
        if isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome)

    return done
