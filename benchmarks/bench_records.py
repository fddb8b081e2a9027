"""What stream records cost (docs/unbounded.md, "Records"), measured, not asserted.

1. CPU per append, pipelined and blocking (1 KiB, E3 WQ3 AQ2, three in-process bookies),
   of this tree against the code before records (``--before DIR``: a checkout of an
   older commit, e.g. ``git archive 7b2c2a3 | tar x -C /tmp/before``), in alternating
   child processes so that the machine's load hits both alike. Without ``--before`` it
   measures this tree only.
2. What packing the envelope costs per call (``appending.prepare``): no key or headers,
   and a key with two headers.
3. Deduplication: the first msg_id append of a writer that took over a stream with N
   ids in its window (it reads them back) against its first plain append; and the memory
   one id takes in the window.

Run: python benchmarks/bench_records.py [--before DIR] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, os, sys, tempfile, time
from embedlog import LocalCluster
N, SIZE, BLOCKING = int(sys.argv[1]), 1024, 500
payload = os.urandom(SIZE)
with tempfile.TemporaryDirectory() as d, LocalCluster(3, d) as cluster:
    ul = cluster.client("w").create_unbounded(3, 3, 2)
    for _ in range(300):
        ul.append_async(payload).result()
    cpu, wall = time.process_time(), time.perf_counter()
    futures = [ul.append_async(payload) for _ in range(N)]
    futures[-1].result()
    pipelined = (time.process_time() - cpu) / N, N / (time.perf_counter() - wall)
    cpu = time.process_time()
    for _ in range(BLOCKING):
        ul.append(payload)
    blocking = (time.process_time() - cpu) / BLOCKING
print(json.dumps({"cpu_pipelined": pipelined[0], "rate": pipelined[1], "cpu_blocking": blocking}))
"""


def _child(tree: Path, entries: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(entries)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
        timeout=900,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def cpu_per_append(before: Path | None, rounds: int, entries: int) -> None:
    trees = {"records": ROOT} | ({"before": before} if before else {})
    import embedlog

    trees["records"] = Path(embedlog.__file__).resolve().parent.parent  # what this runs
    got: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for r in range(rounds):
        for name, tree in trees.items():
            got[name].append(_child(tree, entries))
            print(f"  round {r + 1}/{rounds} {name}: {got[name][-1]}", flush=True)
    print("\nCPU per append (median of rounds; process CPU: the caller and every thread)")
    print(f"{'code':10} {'pipelined µs':>13} {'entries/s':>10} {'blocking µs':>12}")
    for name, rows in got.items():
        pipe = statistics.median(r["cpu_pipelined"] for r in rows) * 1e6
        rate = statistics.median(r["rate"] for r in rows)
        block = statistics.median(r["cpu_blocking"] for r in rows) * 1e6
        print(f"{name:10} {pipe:13.1f} {rate:10.0f} {block:12.1f}")


def envelope_cost() -> None:
    from embedlog.ledger.context import ClientContext
    from embedlog.unbounded.appending import prepare

    ctx = ClientContext(bookies=None, metadata=None, placement=None)  # type: ignore[arg-type]
    data = os.urandom(1024)
    n = 200_000
    for label, kw in (
        ("no key, no headers", {}),
        ("key + 2 headers", {"key": b"user-1234", "headers": {"a": b"1", "trace": b"x" * 16}}),
    ):
        key, headers = kw.get("key"), kw.get("headers")
        start = time.perf_counter()
        for _ in range(n):
            prepare(ctx, data, key, headers, None, None, 7)
        per = (time.perf_counter() - start) / n * 1e6
        size = len(prepare(ctx, data, key, headers, None, None, 7).payload) - len(data)
        print(f"prepare(), {label}: {per:.2f} µs per append, envelope {size} bytes")


def dedup_costs(ids: int) -> None:
    from embedlog import LocalCluster
    from embedlog.unbounded.dedup import DedupWindow

    with tempfile.TemporaryDirectory() as d, LocalCluster(3, d) as cluster:
        w = cluster.client("w").create_unbounded(3, 3, 2, name="dedup")
        futures = [w.append_async(b"x" * 100, msg_id=f"id-{i}") for i in range(ids)]
        futures[-1].result()
        w.close()
        plain = cluster.client("p").open_unbounded("dedup")
        start = time.perf_counter()
        plain.append(b"plain")
        first_plain = time.perf_counter() - start
        plain.close()
        again = cluster.client("d").open_unbounded("dedup")
        start = time.perf_counter()
        assert again.append(b"x", msg_id="id-7") == 7
        first_dedup = time.perf_counter() - start
    print(
        f"first append after a takeover, {ids} ids in the window: plain "
        f"{first_plain * 1e3:.1f} ms, with msg_id {first_dedup * 1e3:.1f} ms "
        f"(reads the window back: {(first_dedup - first_plain) / ids * 1e6:.1f} µs per id)"
    )
    tracemalloc.start()
    window = DedupWindow(120.0)
    before = tracemalloc.get_traced_memory()[0]
    for i in range(100_000):
        window.record(b"order-%08d" % i, i, 1000.0 + i)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    print(f"memory per id in the window (14-byte ids): {used / 100_000:.0f} bytes")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", type=Path, default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--ids", type=int, default=10_000)
    args = ap.parse_args()
    envelope_cost()
    dedup_costs(args.ids)
    cpu_per_append(args.before, args.rounds, args.entries)


if __name__ == "__main__":
    main()
