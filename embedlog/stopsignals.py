"""SIGINT and SIGTERM as a request to stop, for the commands that run until stopped
(``embedlog sandbox``, ``embedlog bookie``, ``embedlog auditor run``), and the threads
embedlog starts leaving both to the main thread (``to_main_thread``)."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})

# How often the waiting main thread wakes. Threads embedlog starts never take a stop
# signal (``to_main_thread``), but a thread the application started may: Python's
# handler then runs only when the main thread next runs Python code, and a main thread
# blocked in ``Event.wait()`` with no timeout never does.
POLL_SECONDS = 0.5


@contextlib.contextmanager
def to_main_thread() -> Iterator[None]:
    """Threads started inside block SIGINT and SIGTERM, and so does every thread they
    start (a new thread inherits its creator's signal mask).

    The kernel hands a signal sent to the process to any thread that does not block
    it, and Python runs the handler only in the main thread, when it next runs Python
    code. A main thread blocked in a wait for the event loop's answer (a blocking call,
    ``embedlog stream tail`` following a stream) woke only when the answer came: a
    Ctrl-C that the kernel handed to the loop's or a disk's thread waited for the next
    entry. With every embedlog thread blocking both, the kernel picks the main thread,
    whose wait the signal interrupts at once. The calling thread's own mask is back as
    it was on leaving."""
    if not hasattr(signal, "pthread_sigmask"):  # no POSIX threads: nothing to hand over
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


class StopSignals:
    """While entered, SIGINT and SIGTERM set ``stop`` instead of raising in whatever code
    runs, so the shutdown runs once, in order, with no KeyboardInterrupt tracebacks from
    threads. A second signal during the shutdown prints ``repeat_message``, if given."""

    def __init__(self, repeat_message: str | None = None) -> None:
        self.stop = threading.Event()
        self._repeat_message = repeat_message
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        for sig in sorted(STOP_SIGNALS):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, _signum: int, _frame: FrameType | None) -> None:
        if self.stop.is_set() and self._repeat_message:
            print(self._repeat_message, file=sys.stderr, flush=True)
        self.stop.set()

    def wait(self) -> None:
        """Until a stop signal (or ``stop.set()``); call it from the main thread."""
        while not self.stop.wait(POLL_SECONDS):
            pass

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
