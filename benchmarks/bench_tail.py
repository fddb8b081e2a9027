"""Tail latency of an unbounded ledger beside the disk's own fsync latency, in one run.

The time from an append's acknowledgement (``append`` returns) to a follower's ``tail()``
yielding the entry (E3 WQ3 AQ2, 1 KiB, three in-process bookies):

* quiet writer: the writer waits after every entry (no later entry carries its LAC;
  the prompt explicit LAC does);
* steady writer: an entry every few milliseconds.

Beside them: the latency of one fsync of a 1 KiB append to a file in the same directory
(what an acknowledgement costs at the least), and of a blocking ``append``. The aim
(issue #15): a follower sees an acknowledged entry within about one fsync plus one round
trip.

Run: python -m pytest benchmarks/bench_tail.py -s, or python benchmarks/bench_tail.py.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from baseline import main, measure_once

from embedlog import LocalCluster

SIZE = 1024
SAMPLES = 300
QUIET_GAP = 0.02  # seconds the quiet writer waits after each entry
STEADY_GAP = 0.005
FSYNC_SAMPLES = 300


def fsync_latencies(directory: Path, samples: int) -> list[float]:
    """Seconds per write+fsync of SIZE bytes appended to one file (the disk's own cost)."""
    path = directory / "fsync-probe.bin"
    block = os.urandom(SIZE)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    out = []
    try:
        for _ in range(samples):
            t0 = time.perf_counter()
            os.write(fd, block)
            os.fsync(fd)
            out.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()
    return out


def tail_latencies(cluster: LocalCluster, samples: int, gap: float) -> list[float]:
    writer = cluster.client("tw").create_unbounded(3, 3, 2)
    follower = cluster.client("tf").open_unbounded(writer.ledger_id, takeover=False)
    acked: dict[int, float] = {}
    seen: dict[int, float] = {}
    tail = follower.tail(0, timeout=30)

    def follow() -> None:
        for e in tail:
            seen[e.entry_id] = time.perf_counter()
            if len(seen) == samples:
                return

    t = threading.Thread(target=follow)
    t.start()
    payload = os.urandom(SIZE)
    for _ in range(samples):
        eid = writer.append(payload)
        acked[eid] = time.perf_counter()
        time.sleep(gap)
    t.join()
    writer.close()
    follower.close()
    return [seen[e] - acked[e] for e in acked if e in seen]


def append_latencies(cluster: LocalCluster, samples: int) -> list[float]:
    ul = cluster.client("aw").create_unbounded(3, 3, 2)
    payload = os.urandom(SIZE)
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        ul.append(payload)
        out.append(time.perf_counter() - t0)
    ul.close()
    return out


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000


def run(directory: Path) -> dict[str, float]:
    with LocalCluster(3, data_dir=directory / "cluster") as cluster:
        fsync = fsync_latencies(directory, FSYNC_SAMPLES)
        appends = append_latencies(cluster, SAMPLES)
        quiet = tail_latencies(cluster, SAMPLES, QUIET_GAP)
        steady = tail_latencies(cluster, SAMPLES, STEADY_GAP)
    return {
        "fsync_ms_p50": statistics.median(fsync) * 1000,
        "fsync_ms_p99": _p(fsync, 0.99),
        "append_ms_p50": statistics.median(appends) * 1000,
        "append_ms_p99": _p(appends, 0.99),
        "tail_quiet_ms_p50": statistics.median(quiet) * 1000,
        "tail_quiet_ms_p99": _p(quiet, 0.99),
        "tail_steady_ms_p50": statistics.median(steady) * 1000,
        "tail_steady_ms_p99": _p(steady, 0.99),
        "tail_samples": float(min(len(quiet), len(steady))),
    }


def report(r: dict[str, float]) -> str:
    return (
        f"\nfsync of a 1 KiB append: p50 {r['fsync_ms_p50']:.2f} ms, p99 {r['fsync_ms_p99']:.2f} ms"
        f"\nblocking append (E3 WQ3 AQ2): p50 {r['append_ms_p50']:.2f} ms, "
        f"p99 {r['append_ms_p99']:.2f} ms"
        f"\ntail latency, ack -> follower, writer quiet after each entry: "
        f"p50 {r['tail_quiet_ms_p50']:.2f} ms, p99 {r['tail_quiet_ms_p99']:.2f} ms"
        f"\ntail latency, writer appending every {STEADY_GAP * 1000:.0f} ms: "
        f"p50 {r['tail_steady_ms_p50']:.2f} ms, p99 {r['tail_steady_ms_p99']:.2f} ms"
    )


def test_tail_latency(benchmark, tmp_path):
    result = measure_once(benchmark, run, tmp_path, report)
    assert result["tail_samples"] == SAMPLES


if __name__ == "__main__":
    main(run, report)
