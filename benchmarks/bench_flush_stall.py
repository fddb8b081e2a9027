"""How long the event loop waits while three in-process bookies flush a burst.

Three in-process bookies (periodic flushes off), E3 WQ3 AQ2: a pipelined burst of
``--entries`` 1 KiB entries, then all three bookies flush it at once while a ticker on
the runtime's loop sleeps 1 ms at a time. Reported per tree: how long the flush took,
and how late the ticker woke (p50, p99, max), beside the same ticker's lateness with
nothing flushing (the baseline, measured in the same round). A late tick is an add or an
answer that waited as long.

``--compare REV`` runs each round also on another commit's tree, alternating.

Run: python benchmarks/bench_flush_stall.py --rounds 5 --compare HEAD~1
     python -m pytest benchmarks/bench_flush_stall.py -s (one round, this tree)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_latency import WINDOW, pct  # noqa: E402  (it puts benchmarks/peers on the path)
from follow import add_pipelined  # noqa: E402
from rounds import alternate  # noqa: E402

ENTRIES = 20_000
TICK = 0.001


async def _ticks(stop: asyncio.Event) -> list[float]:
    loop = asyncio.get_running_loop()
    late = []
    while not stop.is_set():
        t = loop.time()
        await asyncio.sleep(TICK)
        late.append(loop.time() - t - TICK)
    return late


def _quantiles(late: list[float], prefix: str) -> dict[str, float]:
    return {
        f"{prefix}_p50": pct(late, 0.5),
        f"{prefix}_p99": pct(late, 0.99),
        f"{prefix}_max": max(late) * 1000,
    }


def one_round(directory: Path, entries: int) -> dict[str, float]:
    from embedlog import LocalCluster

    r: dict[str, float] = {}
    with LocalCluster(3, data_dir=directory / "cluster", flush_interval=3600.0) as cluster:
        wh = cluster.client("bench").create_ledger(3, 3, 2)
        data = os.urandom(1024)

        async def idle() -> list[float]:
            stop = asyncio.Event()
            asyncio.get_running_loop().call_later(0.3, stop.set)
            return await _ticks(stop)

        r.update(_quantiles(cluster.runtime.run(idle()), "idle"))
        add_pipelined(wh, data, entries, WINDOW)

        async def flush() -> tuple[float, list[float]]:
            stop = asyncio.Event()
            ticker = asyncio.ensure_future(_ticks(stop))
            t0 = time.perf_counter()
            await asyncio.gather(*(cluster.bookie(b).flush() for b in cluster.bookie_ids))
            took = time.perf_counter() - t0
            stop.set()
            return took, await ticker

        took, late = cluster.runtime.run(flush())
        r["flush_ms"] = took * 1000
        r.update(_quantiles(late, "flush"))
    return r


LINES = [
    ("flush of the burst, ms", "flush_ms", "{:.0f}"),
    ("loop lateness while flushing, p50 ms", "flush_p50", "{:.2f}"),
    ("loop lateness while flushing, p99 ms", "flush_p99", "{:.1f}"),
    ("loop lateness while flushing, max ms", "flush_max", "{:.1f}"),
    ("baseline: loop lateness idle, p99 ms", "idle_p99", "{:.2f}"),
    ("baseline: loop lateness idle, max ms", "idle_max", "{:.2f}"),
]


def table(columns: dict[str, list[dict[str, float]]]) -> str:
    rows = ["| | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for label, key, fmt in LINES:
        cells = []
        for rounds in columns.values():
            values = [r[key] for r in rounds]
            cell = fmt.format(statistics.median(values))
            if len(values) > 1:
                cell += f" ({fmt.format(min(values))}-{fmt.format(max(values))})"
            cells.append(cell)
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--entries", type=int, default=ENTRIES)
    parser.add_argument("--compare", metavar="REV", nargs="+", default=[])
    parser.add_argument("--one-round", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_round:
        print(json.dumps(one_round(Path(args.one_round), args.entries)))
        return
    script = Path(__file__).resolve()
    columns, load = alternate(script, args.compare, args.rounds, "--entries", str(args.entries))
    print(table(columns))
    print(
        f"\n{args.rounds} rounds of {args.entries:,} entries; load average (1 min) "
        f"{min(load):.1f}-{max(load):.1f}"
    )


def test_flush_stall(benchmark: Any, tmp_path: Path) -> None:
    from baseline import measure_once

    result = measure_once(
        benchmark,
        lambda d: one_round(d, ENTRIES),
        tmp_path,
        lambda r: "\n" + table({"this tree": [r]}),
    )
    assert result["flush_ms"] > 0 and result["flush_max"] >= result["flush_p50"]


if __name__ == "__main__":
    main()
