"""Reading a closed ledger back beside writing it, in the same run (issue #15's aim: reads
at least as fast as writes).

Each round writes 20,000 entries of 1 KiB to a new E3 WQ3 AQ2 ledger on three in-process
bookies with pipelined ``add_async``, closes it, and reads the same ledger back:

* ``read(0, n - 1)`` right after the close (most entries still in the bookies' write
  caches, the rest flushed by the background flush);
* the same after every bookie flushed (every entry from the entry logs and the index);
* ``entries()``, the iterator, which reads in batches one batch ahead.

Every read is checked against what was written. Printed: the median of the rounds'
writes/s and reads/s and the ratio reads/writes, per round too.
Run: python -m pytest benchmarks/bench_reads.py -s or python benchmarks/bench_reads.py.
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

ENTRIES = 20000
SIZE = 1024
ROUNDS = 3
READS = ("read", "read_flushed", "entries")


def one_round(directory: Path, transport: str) -> dict[str, float]:
    payloads = [os.urandom(SIZE) for _ in range(ENTRIES)]
    with LocalCluster(3, data_dir=directory, transport=transport) as cluster:
        wh = cluster.client("writer").create_ledger(3, 3, 2)
        start = time.perf_counter()
        futures = [wh.add_async(p) for p in payloads]
        futures[-1].result()
        writes = ENTRIES / (time.perf_counter() - start)
        wh.close()
        rh = cluster.client("reader").open_ledger(wh.ledger_id)
        out = {"writes": writes}

        def timed(name: str, read: object) -> None:
            start = time.perf_counter()
            got = [e.data for e in read()]  # type: ignore[operator]
            out[name] = ENTRIES / (time.perf_counter() - start)
            if got != payloads:
                raise AssertionError(f"{name}: the entries read back differ from those written")

        timed("read", lambda: rh.read(0, ENTRIES - 1))
        for b in cluster.bookie_ids:
            bookie = cluster.bookie(b)
            assert bookie.storage is not None and bookie.journal is not None
            cluster.runtime.run(bookie.storage.flush(bookie.journal.lsn))
        timed("read_flushed", lambda: rh.read(0, ENTRIES - 1))
        timed("entries", rh.entries)
    return out


def run(directory: Path, transport: str = "inprocess") -> dict[str, float]:
    rounds = [one_round(directory / f"round{i}", transport) for i in range(ROUNDS)]
    result: dict[str, float] = {}
    for key in ("writes", *READS):
        result[f"{key}_per_s"] = statistics.median(r[key] for r in rounds)
    for key in READS:
        ratios = [r[key] / r["writes"] for r in rounds]
        result[f"{key}_ratio"] = statistics.median(ratios)
        for i, ratio in enumerate(ratios):
            result[f"{key}_ratio_round_{i}"] = ratio
    return result


def report(r: dict[str, float]) -> str:
    lines = [
        f"\n{ENTRIES} entries of {SIZE} bytes, E3 WQ3 AQ2, median of {ROUNDS} rounds: "
        f"writes {r['writes_per_s']:,.0f}/s"
    ]
    what = {
        "read": "read() right after the close",
        "read_flushed": "read() after the bookies flushed",
        "entries": "entries() (iterator)",
    }
    for key in READS:
        rounds = ", ".join(f"{r[f'{key}_ratio_round_{i}']:.2f}" for i in range(ROUNDS))
        lines.append(
            f"{what[key]}: {r[f'{key}_per_s']:,.0f} reads/s, ratio reads/writes "
            f"{r[f'{key}_ratio']:.2f} (rounds: {rounds})"
        )
    return "\n".join(lines)


def test_reads_vs_writes_of_the_same_ledger(benchmark, tmp_path):
    result = measure_once(benchmark, run, tmp_path, report)
    assert all(result[f"{key}_per_s"] > 0 for key in ("writes", *READS))


def test_reads_vs_writes_of_the_same_ledger_over_tcp(benchmark, tmp_path):
    result = measure_once(benchmark, lambda d: run(d, "tcp"), tmp_path, report)
    assert all(result[f"{key}_per_s"] > 0 for key in ("writes", *READS))


if __name__ == "__main__":
    main(run, report)
