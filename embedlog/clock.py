"""Where protocol code reads the time: an injected ``Clock``, never ``time`` directly.

The client's context (``ClientContext.clock``) and every bookie (``Bookie(clock=...)``)
hold one. Real runs use ``SYSTEM_CLOCK``; the deterministic simulator passes a clock
that reads its virtual event loop (``embedlog.testing.simloop.LoopClock``), so no code
needs ``time`` patched process-wide. Code that only ever runs against real sockets,
processes or the terminal (the TCP transport, the process supervisor, the CLI) reads
``time`` directly: the simulator never runs it. So does a wait that blocks a real thread
(a ``threading`` wait or ``time.sleep``: a blocking add waiting for room, the periodic
auditor between passes, ``LocalCluster.wait_repaired``): it lasts real seconds, so its
deadline is read on the real clock (tests/sim/test_injected_clock.py checks that nothing
else the simulator runs reads ``time``).

Timers (``asyncio.sleep``, ``loop.call_later``) already follow the loop's own clock, so
a clock here only answers "what time is it now".
"""

from __future__ import annotations

import time
from typing import Protocol

from attrs import frozen


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (deadlines, intervals, latencies)."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since the epoch (timestamps that users or metadata see)."""
        ...


@frozen
class SystemClock:
    """The machine's clocks: ``time.monotonic`` and ``time.time``."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()


SYSTEM_CLOCK: Clock = SystemClock()
