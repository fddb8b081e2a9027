"""The blocking API's per-add future: a ``concurrent.futures.Future``, built cheaply.

``add_async`` returns a ``concurrent.futures.Future`` (API.md), and a caller that
pipelines keeps thousands of them alive. The stock one is about a dozen objects
the garbage collector tracks: a ``threading.Condition`` (itself an ``RLock``, a
deque and five bound methods in an instance dict) and two lists. With 20,000
adds in flight that is 260,000 objects, which the collector's full passes
rescan; it was the largest single cost of an add (docs/performance.md).

``LightFuture`` is that class with three tracked objects instead: itself, its
condition, which is an ``RLock`` that is also the condition (``wait`` and
``notify_all`` on top, the lock's own methods in C), and the list of waiters
that ``concurrent.futures.wait`` appends to; the list of done callbacks is made
by the first ``add_done_callback``. Every method of the base
class is inherited unchanged, and so are ``concurrent.futures.wait`` and
``as_completed``, which take each future's ``_condition`` as a lock.

It fills in the base class's private attributes itself, so it is used only when
the running CPython's ``Future`` has exactly the attributes it knows
(``compatible()``, checked at import); otherwise ``new_future`` gives the stock
class and only speed is lost. tests/ledger/test_future.py checks which methods
of its condition the standard library calls.
"""

from __future__ import annotations

import _thread
import concurrent.futures
from concurrent.futures._base import PENDING
from typing import TYPE_CHECKING, Any

# What concurrent.futures.Future.__init__ sets (CPython 3.8 to 3.14).
_ATTRIBUTES = frozenset(
    {"_condition", "_state", "_result", "_exception", "_waiters", "_done_callbacks"}
)


class FutureCondition(_thread.RLock):  # type: ignore[misc]
    """A reentrant lock with ``threading.Condition``'s ``wait`` and ``notify_all``.

    Acquiring and releasing are the C lock's own (``with`` costs no Python frame).
    The list of sleeping threads exists only once someone waits: the class attribute
    stands for "nobody", so a future completed without a waiter never makes one.
    """

    _sleepers: list[Any] | tuple[()] = ()

    if TYPE_CHECKING:  # the C lock's own, which threading.Condition uses too (no stubs)

        def _is_owned(self) -> bool: ...
        def _release_save(self) -> Any: ...
        def _acquire_restore(self, state: Any) -> None: ...

    def wait(self, timeout: float | None = None) -> bool:
        if not self._is_owned():
            raise RuntimeError("cannot wait on un-acquired lock")
        sleeper = _thread.allocate_lock()
        sleeper.acquire()
        if not self._sleepers:
            self._sleepers = []
        sleepers = self._sleepers
        assert isinstance(sleepers, list)
        sleepers.append(sleeper)
        saved = self._release_save()
        woken = False
        try:
            if timeout is None:
                woken = sleeper.acquire()
            elif timeout > 0:
                woken = sleeper.acquire(True, timeout)
            else:
                woken = sleeper.acquire(False)
            return woken
        finally:
            self._acquire_restore(saved)
            if not woken:
                try:
                    sleepers.remove(sleeper)
                except ValueError:  # notified between the timeout and getting the lock back
                    pass

    def notify_all(self) -> None:
        if not self._is_owned():
            raise RuntimeError("cannot notify on un-acquired lock")
        sleepers = self._sleepers
        if sleepers:
            for sleeper in sleepers:
                sleeper.release()
            sleepers.clear()  # type: ignore[union-attr]


class LightFuture(concurrent.futures.Future):  # type: ignore[type-arg]
    """A ``concurrent.futures.Future`` with a one-object condition (see the module)."""

    def __init__(self) -> None:
        # Deliberately not super().__init__(): that is what builds the heavy condition.
        self._condition = FutureCondition()  # type: ignore[assignment]
        self._state = PENDING
        self._result = None
        self._exception = None
        self._waiters: list[Any] = []
        # No list until a callback is added (the writer's adds never have one).
        self._done_callbacks: list[Any] | tuple[()] = ()

    def add_done_callback(self, fn: Any) -> None:
        with self._condition:
            if isinstance(self._done_callbacks, tuple):
                self._done_callbacks = []
        super().add_done_callback(fn)


def compatible() -> bool:
    """Whether this CPython's ``Future`` has exactly the attributes LightFuture sets."""
    return set(vars(concurrent.futures.Future())) == _ATTRIBUTES


_FUTURE: type[concurrent.futures.Future[Any]] = (
    LightFuture if compatible() else concurrent.futures.Future
)


def new_future() -> concurrent.futures.Future[Any]:
    """A pending future for one add (LightFuture where this CPython allows it)."""
    return _FUTURE()
