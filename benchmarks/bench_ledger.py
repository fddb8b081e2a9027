"""Pipelined 1 KiB adds to a 3-bookie in-process cluster (E3 WQ3 AQ2, journal on).

Compared in the same run with raw fsync'd appends of the same bytes to the same
disk (benchmarks/baseline.py). Run: python -m pytest benchmarks/bench_ledger.py -s
or python benchmarks/bench_ledger.py.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from baseline import raw_fsync_appends

from embedlog import LocalCluster

ENTRIES = 20000
SIZE = 1024


def pipelined_adds(data_dir: Path, entries: int = ENTRIES, size: int = SIZE, **config) -> float:
    payload = os.urandom(size)
    with LocalCluster(3, data_dir=data_dir, **config) as cluster:
        wh = cluster.client("bench").create_ledger(3, 3, 2)
        for _ in range(200):  # warm up
            wh.add(payload)
        start = time.perf_counter()
        futures = [wh.add_async(payload) for _ in range(entries)]
        futures[-1].result()
        elapsed = time.perf_counter() - start
        wh.close()
    return entries / elapsed


def run(directory: Path) -> dict[str, float]:
    ledger = pipelined_adds(directory / "cluster")
    # Three bookies each fsync their own journal: the fair raw baseline is one disk's
    # rate for the same bytes in groups of the size a journal batch typically reaches.
    baseline = raw_fsync_appends(directory, ENTRIES, SIZE, group=64)
    return {
        "ledger_entries_per_s": ledger,
        "raw_entries_per_s": baseline,
        "ratio": ledger / baseline,
    }


def test_pipelined_adds_vs_raw_disk(benchmark, tmp_path):
    result = benchmark.pedantic(lambda: run(tmp_path), rounds=1, iterations=1)
    benchmark.extra_info.update(result)
    print(
        f"\nledger adds {result['ledger_entries_per_s']:,.0f}/s, raw fsync'd appends "
        f"{result['raw_entries_per_s']:,.0f}/s, ratio {result['ratio']:.2f}"
    )
    assert result["ledger_entries_per_s"] > 0


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        r = run(Path(d))
        print(r)
