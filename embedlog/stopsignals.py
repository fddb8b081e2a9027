"""SIGINT and SIGTERM as a request to stop, for the commands that run until stopped
(``embedlog sandbox``, ``embedlog bookie``, ``embedlog auditor run``)."""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType
from typing import Any

# How often the waiting main thread wakes. The kernel may hand a process's signal to
# any of its threads; Python's handler for it then runs only when the main thread next
# runs Python code, and a main thread blocked in ``Event.wait()`` with no timeout never
# does: the stop would be lost (a sandbox that ignored Ctrl-C was seen under load).
POLL_SECONDS = 0.5


class StopSignals:
    """While entered, SIGINT and SIGTERM set ``stop`` instead of raising in whatever code
    runs, so the shutdown runs once, in order, with no KeyboardInterrupt tracebacks from
    threads. A second signal during the shutdown prints ``repeat_message``, if given."""

    def __init__(self, repeat_message: str | None = None) -> None:
        self.stop = threading.Event()
        self._repeat_message = repeat_message
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        for sig in (signal.SIGINT, signal.SIGTERM):
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
