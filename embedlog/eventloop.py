"""The runtime's event loop: asyncio's selector loop, woken from other threads for less.

Every hand-off to the loop from another thread (the add inbox, each journal's fsync done,
``run_coroutine_threadsafe``) is ``call_soon_threadsafe``: one byte on the loop's
self-pipe. The stock loop drains the pipe by calling ``recv`` until it raises
``BlockingIOError``, so each wake-up costs two system calls, and each one lets go of the
GIL. With three journal threads and a caller waiting for it, the loop then often waits
to get it back: that second ``recv`` is where much of a blocking add's time and CPU went.
A ``recv`` that returns less than it asked for has emptied the pipe (a byte written
after it makes the pipe readable again, and the next ``select`` sees it), so this loop
stops there. Measured (docs/performance.md, "Where the speed tricks live"): one
blocking add 0.77 -> 0.70 ms p50 and 798 -> 587 µs of CPU for the process, pipelined
adds 33,400 -> 44,500/s, 6 alternating rounds.

Only the drain changes; it is asyncio's own code otherwise (a CPython without the
private method this overrides gets the stock loop, and only speed is lost).
"""

from __future__ import annotations

import asyncio
import asyncio.selector_events

_CHUNK = 4096  # what the stock loop asks for at once


class RuntimeLoop(asyncio.SelectorEventLoop):
    def _read_from_self(self) -> None:
        recv = self._ssock.recv  # type: ignore[attr-defined]
        while True:
            try:
                data = recv(_CHUNK)
            except InterruptedError:
                continue
            except BlockingIOError:
                return
            if not data:
                return
            self._process_self_data(data)  # type: ignore[attr-defined]
            if len(data) < _CHUNK:
                return  # the pipe is empty: no second system call to learn it


def _has_drain() -> bool:
    base = asyncio.selector_events.BaseSelectorEventLoop
    return callable(getattr(base, "_read_from_self", None)) and callable(
        getattr(base, "_process_self_data", None)
    )


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A ``RuntimeLoop`` where this CPython's selector loop drains its pipe as above,
    else asyncio's own."""
    if _has_drain():
        return RuntimeLoop()
    return asyncio.new_event_loop()
