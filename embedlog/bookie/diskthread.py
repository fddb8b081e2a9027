"""A bookie's disk thread: one thread that does disk work in the order it is given.

It is a ``concurrent.futures.Executor`` (``submit``, so ``run_in_executor`` and blocking
waits work as with any executor), plus ``run_then``, the journal's hand-off: the work
goes onto the thread's queue, and when it is done the thread schedules one callback on
the event loop with the outcome. A ``ThreadPoolExecutor`` behind ``run_in_executor``
costs, per fsync, a work item and a concurrent future with its condition on the
thread's side, and on the loop's an asyncio future chained to it, the chain's copy of
the outcome and a task's wake-up; ``run_then`` keeps of all that the two hand-offs that
buy something: the queue that wakes the thread (the fsync must not run on the loop),
and one ``call_soon_threadsafe`` back (the outcome must be handled on the loop).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from embedlog.stopsignals import to_main_thread

T = TypeVar("T")

# What the thread reports back: None once the work returned, else what it raised.
Done = Callable[[BaseException | None], None]


class Work:
    """One ``run_then`` item; ``cancel()`` before the thread reaches it and it never runs
    (a crashed journal must not write a group it already gave up on)."""

    __slots__ = ("_args", "_done", "_fn", "_loop", "cancelled")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        done: Done,
    ) -> None:
        self._loop = loop
        self._fn = fn
        self._args = args
        self._done = done
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def __call__(self) -> None:
        if self.cancelled:
            return
        outcome: BaseException | None = None
        try:
            self._fn(*self._args)
        except BaseException as exc:
            outcome = exc
        try:
            self._loop.call_soon_threadsafe(self._done, outcome)
        except RuntimeError:  # the loop closed meanwhile: nobody is left to tell
            pass


class DiskThread(concurrent.futures.Executor):
    """One thread, started by the first piece of work, that runs work in order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[Work | _Call[Any] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._shut = False

    def run_then(
        self,
        loop: asyncio.AbstractEventLoop,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        done: Done,
    ) -> Work:
        """Run ``fn(*args)`` on the thread, then ``done(outcome)`` on ``loop``."""
        work = Work(loop, fn, args, done)
        self._put(work)
        return work

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        call = _Call(fn, args, kwargs)
        self._put(call)
        return call.future

    def _put(self, item: Work | _Call[Any]) -> None:
        if self._thread is None:
            with self._lock:
                if self._shut:
                    raise RuntimeError(f"disk thread {self.name} is shut down")
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                    with to_main_thread():
                        self._thread.start()
        elif self._shut:
            raise RuntimeError(f"disk thread {self.name} is shut down")
        self._queue.put(item)

    def _run(self) -> None:
        get = self._queue.get
        while True:
            item = get()
            if item is None:
                return
            item()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No new work; work already queued still runs unless ``cancel_futures`` (as with
        ``ThreadPoolExecutor``: then what the thread has not started is cancelled)."""
        with self._lock:
            if self._shut:
                return
            self._shut = True
            thread = self._thread
        if thread is None:
            return
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item.cancel()
        self._queue.put(None)
        if wait and thread is not threading.current_thread():
            thread.join()


class _Call(Generic[T]):
    """One ``submit`` item: its future, cancelled if the thread never starts it."""

    __slots__ = ("_args", "_fn", "_kwargs", "future")

    def __init__(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]):
        self._fn = fn
        self._args = args
        self._kwargs = kwargs
        self.future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def cancel(self) -> None:
        self.future.cancel()

    def __call__(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return
        try:
            result = self._fn(*self._args, **self._kwargs)
        except BaseException as exc:
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)
