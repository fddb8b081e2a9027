"""What collecting metrics costs the add path.

Pipelined 1 KiB adds (E3 WQ3 AQ2, journal on) with metrics as they are, and with every
histogram observation made a no-op (the counters' increments stay: they cannot be
switched off, and cost less than the histograms), in alternating rounds on one cluster
per round; raw fsync'd appends on the same disk, measured in the same run, are the
baseline of both.

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
ROUNDS = 4


def adds_per_second(data_dir: Path) -> float:
    payload = os.urandom(SIZE)
    with LocalCluster(3, data_dir=data_dir) as cluster:
        wh = cluster.client("bench").create_ledger(3, 3, 2)
        for _ in range(200):  # warm up
            wh.add(payload)
        start = time.perf_counter()
        futures = [wh.add_async(payload) for _ in range(ENTRIES)]
        futures[-1].result()
        elapsed = time.perf_counter() - start
        wh.close()
    return ENTRIES / elapsed


def run(directory: Path) -> dict[str, float]:
    baseline = raw_fsync_appends(directory, 20000, SIZE, 64)
    on: list[float] = []
    off: list[float] = []
    observe = Histogram.observe
    for r in range(ROUNDS):
        on.append(adds_per_second(directory / f"on-{r}"))
        Histogram.observe = lambda self, value: None  # type: ignore[method-assign]
        try:
            off.append(adds_per_second(directory / f"off-{r}"))
        finally:
            Histogram.observe = observe  # type: ignore[method-assign]
    return {
        "baseline_appends_per_s": baseline,
        "adds_per_s_metrics": statistics.median(on),
        "adds_per_s_no_histograms": statistics.median(off),
        "cost_fraction": 1 - statistics.median(on) / statistics.median(off),
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
        f"  metrics cost {r['cost_fraction']:+.1%} of add throughput"
    )


def test_metrics_cost(benchmark, tmp_path):
    measure_once(benchmark, run, tmp_path, report)


if __name__ == "__main__":
    main(run, report)
