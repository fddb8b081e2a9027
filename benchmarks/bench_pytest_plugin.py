"""What the pytest plugin's cluster fixture costs a test.

Starts and stops ROUNDS 3-bookie clusters the way ``embedlog_cluster`` does (the plugin's
own ``ClusterFactory``), each with one ledger created and one entry added, and reports
the time per fixture (start + stop) beside the disk's fsync latency measured in the same
run (a cluster start writes and fsyncs cookies, index markers and journal headers).

Run: python -m pytest benchmarks/bench_pytest_plugin.py -s   or
     python benchmarks/bench_pytest_plugin.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from baseline import main, measure_once

from embedlog.testing.pytest_plugin import ClusterFactory

ROUNDS = 30


def fsync_latency(directory: Path, rounds: int = 200) -> float:
    """Seconds per 4 KiB append + fsync on this disk (median)."""
    path = directory / "fsync.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    block = os.urandom(4096)
    times = []
    try:
        for _ in range(rounds):
            t = time.perf_counter()
            os.write(fd, block)
            os.fsync(fd)
            times.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(times)


def run(directory: Path) -> dict[str, float]:
    fsync = fsync_latency(directory)
    setups, teardowns, uses = [], [], []
    for n in range(ROUNDS):
        factory = ClusterFactory(directory / f"round-{n}")
        t0 = time.perf_counter()
        cluster = factory(3)
        t1 = time.perf_counter()
        wh = cluster.client("client").create_ledger(3, 3, 2)
        wh.add(b"x")
        t2 = time.perf_counter()
        factory.stop_all()
        t3 = time.perf_counter()
        setups.append(t1 - t0)
        uses.append(t2 - t1)
        teardowns.append(t3 - t2)
    fixture = [s + t for s, t in zip(setups, teardowns, strict=True)]
    return {
        "fsync_ms": fsync * 1e3,
        "setup_ms_p50": statistics.median(setups) * 1e3,
        "teardown_ms_p50": statistics.median(teardowns) * 1e3,
        "fixture_ms_p50": statistics.median(fixture) * 1e3,
        "fixture_ms_max": max(fixture) * 1e3,
        "first_ledger_and_add_ms_p50": statistics.median(uses) * 1e3,
    }


def report(r: dict[str, float]) -> str:
    return (
        f"embedlog_cluster (3 bookies), {ROUNDS} rounds: start+stop p50 "
        f"{r['fixture_ms_p50']:.1f} ms (start {r['setup_ms_p50']:.1f}, stop "
        f"{r['teardown_ms_p50']:.1f}), max {r['fixture_ms_max']:.1f} ms; first ledger + "
        f"add p50 {r['first_ledger_and_add_ms_p50']:.1f} ms\n"
        f"disk fsync latency (4 KiB append + fsync, p50): {r['fsync_ms']:.2f} ms; "
        f"fixture = {r['fixture_ms_p50'] / r['fsync_ms']:.0f} fsyncs"
    )


def test_pytest_plugin_fixture_cost(benchmark, tmp_path):
    measure_once(benchmark, run, tmp_path, report)


if __name__ == "__main__":
    main(run, report)
