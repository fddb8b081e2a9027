"""Nothing the simulator runs reads ``time`` directly: every client, bookie and metadata
client reads the virtual clock it is given (``LoopClock``, embedlog/clock.py).

The check swaps ``time.monotonic`` and ``time.time`` for functions that raise when an
embedlog module calls them, other than the modules that only ever run against real
sockets, processes or the terminal (which the simulator never runs), and runs a few
seeds of every scenario: nothing patches ``time`` for the simulator, so a direct read
would also make its histories depend on the real clock.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from embedlog.testing.scenarios import SCENARIOS
from embedlog.testing.sim import run_seed
from embedlog.testing.simloop import SIM_EPOCH, LoopClock, VirtualClockLoop

# The modules that read ``time`` directly, by design: real I/O only (embedlog/clock.py).
REAL_TIME_MODULES = (
    "embedlog.transport.tcp",  # and tcp_server, tcp_*
    "embedlog.transport.tls_mismatch",
    "embedlog.process.",
    "embedlog.cli",
    "embedlog.console",
    "embedlog.metadata.zkserver",
    "embedlog.metadata.zookeeper_store",
    "embedlog.metadata.zk_outage",
)


class DirectTimeReadError(AssertionError):
    pass


@contextmanager
def forbid_direct_time_reads(offenders: Counter[str]) -> Iterator[None]:
    """``time.monotonic``/``time.time`` raise for an embedlog module outside
    REAL_TIME_MODULES (and count it: protocol code may catch the error), when read by this
    thread: the simulator runs on one thread, and a thread an earlier test of the same
    process left behind (a pytest-xdist worker runs many) is not the simulator's."""
    saved = time.monotonic, time.time
    simulator = threading.get_ident()

    def guard(name: str, real: Callable[[], float]) -> Callable[[], float]:
        def read() -> float:
            module = sys._getframe(1).f_globals.get("__name__", "")
            if (
                threading.get_ident() == simulator
                and module.startswith("embedlog")
                and not module.startswith(REAL_TIME_MODULES)
            ):
                offenders[module] += 1
                raise DirectTimeReadError(f"{module} reads time.{name}() directly")
            return real()

        return read

    time.monotonic = guard("monotonic", saved[0])  # type: ignore[assignment]
    time.time = guard("time", saved[1])  # type: ignore[assignment]
    try:
        yield
    finally:
        time.monotonic, time.time = saved  # type: ignore[assignment]


def test_the_guard_catches_a_direct_read_and_lets_others_through():
    offenders: Counter[str] = Counter()
    with forbid_direct_time_reads(offenders):
        assert time.monotonic() > 0  # this module is not embedlog's
        from embedlog import clock

        with pytest.raises(DirectTimeReadError, match=r"embedlog\.clock reads time\.time"):
            clock.SYSTEM_CLOCK.time()
    assert offenders == {"embedlog.clock": 1}


def test_the_loop_clock_reads_virtual_time():
    loop = VirtualClockLoop()
    try:
        clock = LoopClock(loop)
        loop.run_until_complete(asyncio.sleep(90))
        assert clock.monotonic() == loop.time() >= 90
        assert clock.time() == SIM_EPOCH + loop.time()
    finally:
        loop.close()


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_nothing_the_simulator_runs_reads_time_directly(scenario):
    offenders: Counter[str] = Counter()
    with forbid_direct_time_reads(offenders):
        results = [run_seed(seed, scenario, keep_trace=False) for seed in range(3)]
    assert not offenders, f"read time directly under the simulator: {dict(offenders)}"
    assert all(r.ok for r in results), [r.violations for r in results if not r.ok]
