"""What every system of the side-by-side run is measured with: the load, the figures, the
CPU of all processes involved, and percentiles."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from follow import SIZE, payload, seq_of

__all__ = ["SIZE", "payload", "seq_of"]  # the entries' format lives in follow.py


@dataclass(frozen=True)
class Load:
    """How much each system is asked to do in one round."""

    entries: int = 10_000  # pipelined writes, for entries/s and CPU per entry
    window: int = 1_000  # writes in flight at once in the pipelined phase
    blocking: int = 300  # one write at a time, each waited for
    follow: int = 200  # writes one every `gap` seconds, timed to a follower
    gap: float = 0.005


@dataclass
class Figures:
    """One system in one round. Latencies in seconds."""

    entries_per_s: float = 0.0
    cpu_us_per_entry: float = 0.0  # user + system of every process involved
    own_cpu_us_per_entry: float = 0.0  # of those, the benchmark's process (the client)
    blocking: list[float] = field(default_factory=list)
    follow: list[float] = field(default_factory=list)  # append call -> follower has it
    # The disk's write+fsync of 1 KiB, each sample taken right before a blocking write.
    fsync: list[float] = field(default_factory=list)
    note: str = ""


def pct(values: list[float], q: float) -> float:
    """The q-quantile of ``values`` in milliseconds (nan when there are none)."""
    if not values:
        return float("nan")
    if q == 0.5:
        return statistics.median(values) * 1000
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000


def _cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


class CpuMeter:
    """CPU of this process and of every process it started (servers, bookies), summed
    over a stretch of time. The processes must live through the stretch."""

    def __init__(self, extra_pids: tuple[int, ...] = ()) -> None:
        me = psutil.Process(os.getpid())
        self._procs = [me, *me.children(recursive=True)]
        self._procs += [psutil.Process(p) for p in extra_pids]
        self._start = self._total()
        self._own_start = _cpu_seconds(me)

    def _total(self) -> float:
        total = 0.0
        for p in self._procs:
            try:
                total += _cpu_seconds(p)
            except psutil.NoSuchProcess:
                continue
        return total

    def used(self) -> float:
        return self._total() - self._start

    def own(self) -> float:
        return _cpu_seconds(self._procs[0]) - self._own_start


@contextmanager
def pipelined(fig: Figures, entries: int) -> Iterator[None]:
    """Times the block and counts the CPU of all processes while it runs."""
    meter = CpuMeter()
    start = time.perf_counter()
    yield
    elapsed = time.perf_counter() - start
    fig.entries_per_s = entries / elapsed
    fig.cpu_us_per_entry = meter.used() / entries * 1e6
    fig.own_cpu_us_per_entry = meter.own() / entries * 1e6


def free_ports(n: int) -> list[int]:
    import socket

    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_until(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():  # type: ignore[operator]
                return
        except Exception:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not come up within {timeout:.0f} s")


def clean_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
