"""What collecting metrics costs the add path.

Pipelined 1 KiB adds (E3 WQ3 AQ2, journal on), measured two ways:

* A/B: metrics as they are, and with every histogram observation made a no-op (the
  counters' increments stay: they cannot be switched off, and cost less than the
  histograms), in alternating rounds on one cluster per round. It reports adds/s (wall
  clock, which other work on the machine moves by tens of percent between rounds) and
  the process's CPU time per add (the bookies and the client all run in this process, so
  that is the whole cost of an add). Rounds differ by a few percent even on a quiet
  machine, so this resolves a cost of several percent, not one of one percent.
* Replayed: one more round records every histogram observation the cluster made (which
  histogram, how many values at once), then the same observations are made again on
  fresh histograms and timed alone. That time per add, against the CPU per add of the
  A/B rounds, is the histograms' share of an add's CPU, to well below one percent.

Raw fsync'd appends on the same disk, measured in the same run, are the baseline.

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
ROUNDS = 8


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


def replayed_seconds_per_add(data_dir: Path) -> float:
    """The histograms' own time per add: record one round's observations, time them again."""
    observe, observe_since = Histogram.observe, Histogram.observe_since
    singles: list[tuple[tuple[float, ...], float]] = []
    batches: list[tuple[tuple[float, ...], float, list[float]]] = []

    def record(self: Histogram, value: float) -> None:
        singles.append((self.bounds, value))
        observe(self, value)

    def record_since(self: Histogram, now: float, starts: object) -> None:
        values = list(starts)  # type: ignore[call-overload]
        batches.append((self.bounds, now, values))
        observe_since(self, now, values)

    Histogram.observe = record  # type: ignore[method-assign]
    Histogram.observe_since = record_since  # type: ignore[method-assign]
    try:
        adds_per_second(data_dir)
    finally:
        Histogram.observe = observe  # type: ignore[method-assign]
        Histogram.observe_since = observe_since  # type: ignore[method-assign]
    fresh = {bounds: Histogram(bounds) for bounds, *_ in [*singles, *batches]}
    # The add path hands observe_since a generator over its entries: replay it so.
    calls = [(fresh[b].observe_since, now, vs) for b, now, vs in batches]
    ones = [(fresh[b].observe, v) for b, v in singles]
    started = time.perf_counter()
    for since, now, values in calls:
        since(now, (v for v in values))
    for one, value in ones:
        one(value)
    return (time.perf_counter() - started) / (ENTRIES + 200)


def run(directory: Path) -> dict[str, float]:
    baseline = raw_fsync_appends(directory, 20000, SIZE, 64)
    on: list[tuple[float, float]] = []
    off: list[tuple[float, float]] = []
    observe, observe_since = Histogram.observe, Histogram.observe_since

    def without_histograms(r: int) -> None:
        Histogram.observe = lambda self, value: None  # type: ignore[method-assign]
        Histogram.observe_since = lambda self, now, starts: None  # type: ignore[method-assign]
        try:
            off.append(adds_per_second(directory / f"off-{r}"))
        finally:
            Histogram.observe = observe  # type: ignore[method-assign]
            Histogram.observe_since = observe_since  # type: ignore[method-assign]

    # Which of the two runs first alternates: the second run of a pair found the first
    # one's files in the page cache and the disk busy writing them back.
    for r in range(ROUNDS):
        if r % 2:
            without_histograms(r)
            on.append(adds_per_second(directory / f"on-{r}"))
        else:
            on.append(adds_per_second(directory / f"on-{r}"))
            without_histograms(r)
    replayed = replayed_seconds_per_add(directory / "replayed")
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
        "cpu_spread": (max(c for _, c in on + off) - min(c for _, c in on + off)) / cpu_off,
        "histogram_us_per_add": replayed * 1e6,
        "histogram_fraction": replayed / cpu_on,
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
        f"  A/B: metrics cost {r['cost_fraction']:+.1%} of add throughput (wall clock)\n"
        f"  A/B: CPU per add {r['cpu_us_per_add_metrics']:.1f} us with metrics, "
        f"{r['cpu_us_per_add_no_histograms']:.1f} us histograms off: "
        f"{r['cpu_cost_fraction']:+.1%} (rounds spread over {r['cpu_spread']:.0%})\n"
        f"  replayed: the histograms' own work {r['histogram_us_per_add'] * 1000:.0f} ns "
        f"per add, {r['histogram_fraction']:.2%} of an add's CPU"
    )


def test_metrics_cost(benchmark, tmp_path):
    measure_once(benchmark, run, tmp_path, report)


if __name__ == "__main__":
    main(run, report)
