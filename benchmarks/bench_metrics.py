"""What collecting metrics costs the add path.

Pipelined 1 KiB adds (E3 WQ3 AQ2, journal on) with metrics as they are, and with every
histogram observation made a no-op (the counters' increments stay: they cannot be
switched off, and cost less than the histograms), in alternating rounds on one cluster
per round; raw fsync'd appends on the same disk, measured in the same run, are the
baseline of both. Besides adds/s (wall clock, which other work on the machine moves by
tens of percent between rounds) it reports the process's CPU time per add: the bookies
and the client all run in this process, so that is the whole cost of an add, and what
others running on the machine move far less.

Run: python -m pytest benchmarks/bench_metrics.py -s   or   python benchmarks/bench_metrics.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from baseline import main, measure_once, raw_fsync_appends

from embedlog import LocalCluster
from embedlog.metrics import Histogram

ENTRIES = 20000
SIZE = 1024
ROUNDS = 6


def adds_per_second(data_dir: Path) -> tuple[float, float]:
    """Adds/s, and CPU seconds of this process (every thread) per add."""
    payload = os.urandom(SIZE)
    with LocalCluster(3, data_dir=data_dir) as cluster:
        wh = cluster.client("bench").create_ledger(3, 3, 2)
        for _ in range(200):  # warm up
            wh.add(payload)
        start = time.perf_counter()
        cpu = time.process_time()
        futures = [wh.add_async(payload) for _ in range(ENTRIES)]
        futures[-1].result()
        cpu = time.process_time() - cpu
        elapsed = time.perf_counter() - start
        wh.close()
    return ENTRIES / elapsed, cpu / ENTRIES


def run(directory: Path) -> dict[str, float]:
    baseline = raw_fsync_appends(directory, 20000, SIZE, 64)
    on: list[tuple[float, float]] = []
    off: list[tuple[float, float]] = []
    observe = Histogram.observe

    def without_histograms(r: int) -> None:
        Histogram.observe = lambda self, value: None  # type: ignore[method-assign]
        try:
            off.append(adds_per_second(directory / f"off-{r}"))
        finally:
            Histogram.observe = observe  # type: ignore[method-assign]

    # Which of the two runs first alternates: the second run of a pair found the first
    # one's files in the page cache and the disk busy writing them back.
    for r in range(ROUNDS):
        if r % 2:
            without_histograms(r)
            on.append(adds_per_second(directory / f"on-{r}"))
        else:
            on.append(adds_per_second(directory / f"on-{r}"))
            without_histograms(r)
    rate_on = statistics.median(rate for rate, _ in on)
    rate_off = statistics.median(rate for rate, _ in off)
    cpu_on = statistics.median(cpu for _, cpu in on)
    cpu_off = statistics.median(cpu for _, cpu in off)
    return {
        "baseline_appends_per_s": baseline,
        "adds_per_s_metrics": rate_on,
        "adds_per_s_no_histograms": rate_off,
        "cost_fraction": 1 - rate_on / rate_off,
        "cpu_us_per_add_metrics": cpu_on * 1e6,
        "cpu_us_per_add_no_histograms": cpu_off * 1e6,
        "cpu_cost_fraction": cpu_on / cpu_off - 1,
    }


def report(r: dict[str, float]) -> str:
    base = r["baseline_appends_per_s"]
    return (
        f"1 KiB adds, E3 WQ3 AQ2, median of {ROUNDS} alternating rounds:\n"
        f"  with metrics      {r['adds_per_s_metrics']:9,.0f}/s "
        f"({r['adds_per_s_metrics'] / base:.2f} of raw fsync'd appends)\n"
        f"  histograms off    {r['adds_per_s_no_histograms']:9,.0f}/s "
        f"({r['adds_per_s_no_histograms'] / base:.2f})\n"
        f"  raw fsync'd appends (groups of 64) {base:,.0f}/s\n"
        f"  metrics cost {r['cost_fraction']:+.1%} of add throughput (wall clock)\n"
        f"  CPU per add: {r['cpu_us_per_add_metrics']:.1f} us with metrics, "
        f"{r['cpu_us_per_add_no_histograms']:.1f} us histograms off: "
        f"{r['cpu_cost_fraction']:+.1%}"
    )


def test_metrics_cost(benchmark, tmp_path):
    measure_once(benchmark, run, tmp_path, report)


if __name__ == "__main__":
    main(run, report)
