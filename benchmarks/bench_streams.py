"""Streams: the cost of a cursor commit, and reading a closed ledger against writing it.

* commit: ``ul.commit(cursor, entry_id)`` latency on the embedded LevelDB metadata store
  (one read and one compare-and-swap of the cursor's node);
* read vs write: 1 KiB entries written pipelined (``add_async``) to a ledger that is then
  closed, and read back with ``rh.entries()`` (batches of 512, one batch ahead), in the
  same run on the same cluster.

Run: python -m pytest benchmarks/bench_streams.py -s, or python benchmarks/bench_streams.py.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from baseline import main, measure_once

from embedlog import LocalCluster

ENTRIES = 10000
SIZE = 1024
COMMITS = 500


def run(directory: Path) -> dict[str, float]:
    payload = os.urandom(SIZE)
    with LocalCluster(3, data_dir=directory / "cluster") as cluster:
        client = cluster.client("bench")
        ul = client.create_unbounded(3, 3, 2, name="bench")
        ul.append(b"x")
        commit = []
        for _ in range(COMMITS):
            t0 = time.perf_counter()
            ul.commit("c", 0)
            commit.append(time.perf_counter() - t0)
        moving = []
        for i in range(COMMITS):
            ul.append(b"x")
            t0 = time.perf_counter()
            ul.commit("m", i)
            moving.append(time.perf_counter() - t0)
        wh = client.create_ledger(3, 3, 2)
        t0 = time.perf_counter()
        futures = [wh.add_async(payload) for _ in range(ENTRIES)]
        futures[-1].result()
        write_s = time.perf_counter() - t0
        wh.close()
        rh = client.open_ledger(wh.ledger_id)
        t0 = time.perf_counter()
        n = sum(1 for _ in rh.entries())
        read_s = time.perf_counter() - t0
        assert n == ENTRIES
        t0 = time.perf_counter()
        rh.read(0, ENTRIES - 1)
        read_list_s = time.perf_counter() - t0
    return {
        "commit_same_ms_p50": statistics.median(commit) * 1000,
        "commit_forward_ms_p50": statistics.median(moving) * 1000,
        "commit_forward_ms_p99": sorted(moving)[int(COMMITS * 0.99)] * 1000,
        "write_entries_per_s": ENTRIES / write_s,
        "read_entries_per_s": ENTRIES / read_s,
        "read_list_entries_per_s": ENTRIES / read_list_s,
    }


def report(r: dict[str, float]) -> str:
    return (
        f"\ncursor commit (LevelDB metadata): moving forward p50 "
        f"{r['commit_forward_ms_p50']:.3f} ms, p99 {r['commit_forward_ms_p99']:.3f} ms; "
        f"same position again p50 {r['commit_same_ms_p50']:.3f} ms"
        f"\nclosed ledger, 1 KiB: written {r['write_entries_per_s']:,.0f}/s (add_async), read "
        f"{r['read_entries_per_s']:,.0f}/s with entries(), {r['read_list_entries_per_s']:,.0f}/s "
        f"with read(0, last)"
    )


def test_streams(benchmark, tmp_path):
    result = measure_once(benchmark, run, tmp_path, report)
    assert result["read_entries_per_s"] > 0


if __name__ == "__main__":
    main(run, report)
