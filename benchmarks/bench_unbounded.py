"""Unbounded ledgers against bounded-ledger adds, in the same run (E3 WQ3 AQ2, 1 KiB).

* append throughput: pipelined ``append_async`` vs pipelined ``add_async``;
* tail latency: time from an append's acknowledgement to a follower's ``tail()``
  yielding it, for a writer appending every few milliseconds (the LAC travels with
  the next entry, or the writer's prompt explicit LAC) and for a writer that goes quiet
  after each entry (the prompt explicit LAC brings it); compared with a bounded add's own
  latency. bench_tail.py measures tail latency beside the disk's fsync latency.

Run: python -m pytest benchmarks/bench_unbounded.py -s, or python benchmarks/bench_unbounded.py.
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

ENTRIES = 10000
SIZE = 1024
TAIL_SAMPLES = 200
STEADY_GAP = 0.005  # seconds between appends of the steady writer
QUIET_SAMPLES = 10


def _rate(add_async, payload: bytes, entries: int) -> float:
    for _ in range(200):  # warm up
        add_async(payload).result()
    start = time.perf_counter()
    futures = [add_async(payload) for _ in range(entries)]
    futures[-1].result()
    return entries / (time.perf_counter() - start)


def _tail_latencies(cluster: LocalCluster, samples: int, gap: float) -> list[float]:
    writer = cluster.client("tw").create_unbounded(3, 3, 2)
    follower = cluster.client("tf").open_unbounded(writer.ledger_id, takeover=False)
    acked: dict[int, float] = {}
    seen: dict[int, float] = {}

    def follow() -> None:
        for e in follower.tail(0, timeout=30):
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
    return [seen[e] - acked[e] for e in acked if e in seen]


def run(directory: Path) -> dict[str, float]:
    payload = os.urandom(SIZE)
    with LocalCluster(3, data_dir=directory / "cluster") as cluster:
        client = cluster.client("bench")
        wh = client.create_ledger(3, 3, 2)
        bounded = _rate(wh.add_async, payload, ENTRIES)
        ul = client.create_unbounded(3, 3, 2)
        unbounded = _rate(ul.append_async, payload, ENTRIES)
        ul_rolling = client.create_unbounded(3, 3, 2, fragment_max_entries=1000)
        rolling = _rate(ul_rolling.append_async, payload, ENTRIES)
        add_lat = []
        for _ in range(TAIL_SAMPLES):
            t0 = time.perf_counter()
            wh.add(payload)
            add_lat.append(time.perf_counter() - t0)
        steady = _tail_latencies(cluster, TAIL_SAMPLES, STEADY_GAP)
        quiet = _tail_latencies(cluster, QUIET_SAMPLES, 1.0)
        wh.close()
        ul.close()
        ul_rolling.close()
    add_ms = statistics.median(add_lat) * 1000
    steady_ms = statistics.median(steady) * 1000
    return {
        "bounded_adds_per_s": bounded,
        "unbounded_appends_per_s": unbounded,
        "unbounded_rollover_1000_appends_per_s": rolling,
        "throughput_ratio": unbounded / bounded,
        "rollover_throughput_ratio": rolling / bounded,
        "bounded_add_latency_ms_p50": add_ms,
        "tail_latency_ms_p50": steady_ms,
        "tail_latency_ms_p99": sorted(steady)[int(len(steady) * 0.99) - 1] * 1000,
        "tail_latency_quiet_writer_ms_p50": statistics.median(quiet) * 1000,
        "tail_latency_vs_add_latency": steady_ms / add_ms,
    }


def report(r: dict[str, float]) -> str:
    return (
        f"\nbounded adds {r['bounded_adds_per_s']:,.0f}/s, unbounded appends "
        f"{r['unbounded_appends_per_s']:,.0f}/s (ratio {r['throughput_ratio']:.2f}), with a "
        f"new fragment every 1000 entries {r['unbounded_rollover_1000_appends_per_s']:,.0f}/s "
        f"(ratio {r['rollover_throughput_ratio']:.2f})\n"
        f"tail latency (ack -> follower) p50 {r['tail_latency_ms_p50']:.2f} ms, p99 "
        f"{r['tail_latency_ms_p99']:.2f} ms with a writer appending every "
        f"{STEADY_GAP * 1000:.0f} ms; quiet writer p50 "
        f"{r['tail_latency_quiet_writer_ms_p50']:.1f} ms (prompt LAC); bounded add latency "
        f"p50 {r['bounded_add_latency_ms_p50']:.2f} ms (tail/add ratio "
        f"{r['tail_latency_vs_add_latency']:.2f})"
    )


def test_unbounded_vs_bounded(benchmark, tmp_path):
    result = measure_once(benchmark, run, tmp_path, report)
    assert result["unbounded_appends_per_s"] > 0


if __name__ == "__main__":
    main(run, report)
