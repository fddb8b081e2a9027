"""embedlog beside what a Python user would otherwise pick, on this machine, in one command:

    bash benchmarks/peers/install.sh      # once: etcd from Debian, the rest from PyPI
    python benchmarks/peers/run.py        # --rounds 3 --entries 10000 --only embedlog,nats

Every round runs each system once, in an order that rotates from round to round, so that
the disk's and the CPU's drift over minutes hits all of them alike; each system starts
fresh in a temporary directory on the same disk and listens on 127.0.0.1 only. Per
system: pipelined entries/s (1 KiB, ``--window`` in flight), the CPU of every process
involved per entry (this one's and every server's or bookie's), one blocking write's
latency, and the time from an append call to a follower having the entry while the
writer appends every 5 ms. The disk's own figures come first: write+fsync of 1 KiB (the
least an acknowledged write costs) and raw fsync'd appends (benchmarks/baseline.py).
The table gives the median over rounds and the range; the ratios are embedlog
in-process's figure over the other system's, taken in each round and then summarised.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from baseline import raw_fsync_appends  # noqa: E402
from bench_tail import fsync_latencies  # noqa: E402
from common import SIZE, Figures, Load, pct  # noqa: E402

Measure = Callable[[Path, Load], Figures]


def _disk(directory: Path, load: Load) -> Figures:
    fsyncs = fsync_latencies(directory, max(load.blocking, 300))
    return Figures(
        entries_per_s=raw_fsync_appends(directory, 2000, SIZE, group=1),
        blocking=fsyncs,
        note="write+fsync of each 1 KiB",
    )


def _disk_grouped(directory: Path, load: Load) -> Figures:
    # What three journals write for each entry, fsync'd in groups of 1,000 (an upper
    # bound for any system here that keeps three copies on this one disk).
    copies = raw_fsync_appends(directory, 3 * load.entries, SIZE, group=1000)
    return Figures(entries_per_s=copies / 3, note="3 copies per entry, fsync per 1,000")


def systems(old_group_wait: bool) -> dict[str, Measure]:
    import embedlog_peer
    import etcd_peer
    import nats_peer
    import syncobj_peer

    found: dict[str, Measure] = {
        "disk": _disk,
        "disk-grouped": _disk_grouped,
        "embedlog": lambda d, load: embedlog_peer.measure(d, load, processes=False),
        "embedlog-processes": lambda d, load: embedlog_peer.measure(d, load, processes=True),
        "nats-sync-always": lambda d, load: nats_peer.measure(d, load, sync_always=True),
        "nats-default": lambda d, load: nats_peer.measure(d, load, sync_always=False),
        "etcd": etcd_peer.measure,
        "pysyncobj": syncobj_peer.measure,
    }
    if old_group_wait:
        found["embedlog-group-wait-1ms"] = lambda d, load: embedlog_peer.measure(
            d, load, processes=False, journal_max_group_wait=0.001
        )
    return found


LABELS = {
    "disk": "the disk: write+fsync each 1 KiB",
    "disk-grouped": "the disk: 3 copies/entry, fsync per 1,000",
    "embedlog": "embedlog, 3 bookies in-process",
    "embedlog-group-wait-1ms": "embedlog in-process, journal group wait 1 ms",
    "embedlog-processes": "embedlog, 3 bookie processes (TCP, ZooKeeper)",
    "nats-sync-always": "JetStream R3, sync_interval: always",
    "nats-default": "JetStream R3, default sync (2 min)",
    "etcd": "etcd, 3 members",
    "pysyncobj": "PySyncObj, 3 nodes in one process",
}


def _span(values: list[float], fmt: str) -> str:
    values = [v for v in values if v == v]  # drop nan
    if not values:
        return ""
    mid = statistics.median(values)
    if len(values) == 1 or min(values) == max(values):
        return format(mid, fmt)
    return f"{format(mid, fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def table(rounds: list[dict[str, Figures]], names: list[str]) -> str:
    head = (
        "| system | entries/s | CPU µs/entry (all processes) | blocking p50 / p99 ms | "
        "append → follower p50 / p99 ms | embedlog's ratio: entries/s, CPU/entry, "
        "blocking p50, follower p50 |\n|---|---|---|---|---|---|"
    )
    rows = [head]
    for name in names:
        figs = [r[name] for r in rounds if name in r]
        if not figs:
            continue
        rate = _span([f.entries_per_s for f in figs], ",.0f")
        cpu = _span([f.cpu_us_per_entry for f in figs if f.cpu_us_per_entry], ".0f")
        block = (
            ""
            if not figs[0].blocking
            else (
                f"{_span([pct(f.blocking, 0.5) for f in figs], '.2f')} / "
                f"{_span([pct(f.blocking, 0.99) for f in figs], '.2f')}"
            )
        )
        follow = (
            ""
            if not figs[0].follow
            else (
                f"{_span([pct(f.follow, 0.5) for f in figs], '.2f')} / "
                f"{_span([pct(f.follow, 0.99) for f in figs], '.2f')}"
            )
        )
        ratios = ""
        if name != "embedlog":
            per_round = [(r["embedlog"], r[name]) for r in rounds if "embedlog" in r and name in r]
            parts = [
                _span([e.entries_per_s / o.entries_per_s for e, o in per_round], ".2f"),
                _span(
                    [
                        e.cpu_us_per_entry / o.cpu_us_per_entry
                        for e, o in per_round
                        if o.cpu_us_per_entry
                    ],
                    ".2f",
                ),
                _span(
                    [
                        pct(e.blocking, 0.5) / pct(o.blocking, 0.5)
                        for e, o in per_round
                        if o.blocking
                    ],
                    ".2f",
                ),
                _span(
                    [pct(e.follow, 0.5) / pct(o.follow, 0.5) for e, o in per_round if o.follow],
                    ".2f",
                ),
            ]
            ratios = ", ".join(p or "-" for p in parts)
        rows.append(
            f"| {LABELS[name]} | {rate} | {cpu or '-'} | {block or '-'} | "
            f"{follow or '-'} | {ratios} |"
        )
    return "\n".join(rows)


def bounds(rounds: list[dict[str, Figures]]) -> str:
    """Issue #29's bound on one blocking add, against write+fsync samples of the same disk
    taken right before each add; and the journal's group wait, 0 against 1 ms."""
    lines = []
    for name in ("embedlog", "embedlog-group-wait-1ms"):
        figs = [r[name] for r in rounds if name in r]
        if not figs:
            continue
        lines.append(
            f"{LABELS[name]}: blocking add p50 {_span([pct(f.blocking, 0.5) for f in figs], '.2f')}"
            f" / p99 {_span([pct(f.blocking, 0.99) for f in figs], '.2f')} ms; fsync p50 "
            f"{_span([pct(f.fsync, 0.5) for f in figs], '.2f')} / p99 "
            f"{_span([pct(f.fsync, 0.99) for f in figs], '.2f')} ms; ratio p50 "
            f"{_span([pct(f.blocking, 0.5) / pct(f.fsync, 0.5) for f in figs], '.2f')}x, p99 "
            f"{_span([pct(f.blocking, 0.99) / pct(f.fsync, 0.99) for f in figs], '.2f')}x "
            "(bound: 3x each)"
        )
    pairs = [r for r in rounds if "embedlog" in r and "embedlog-group-wait-1ms" in r]
    if pairs:
        ratio = [
            r["embedlog"].entries_per_s / r["embedlog-group-wait-1ms"].entries_per_s for r in pairs
        ]
        lines.append(
            f"pipelined entries/s, group wait 0 over 1 ms, per round: {_span(ratio, '.2f')}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--window", type=int, default=1_000)
    parser.add_argument("--blocking", type=int, default=300)
    parser.add_argument("--follow", type=int, default=200)
    parser.add_argument("--only", default="", help="comma-separated names (default: all)")
    parser.add_argument(
        "--old-group-wait",
        action="store_true",
        help="also embedlog in-process with the journal waiting 1 ms for company",
    )
    parser.add_argument("--dir", default=None, help="where the systems keep their data")
    args = parser.parse_args()
    load = Load(args.entries, args.window, args.blocking, args.follow)
    found = systems(args.old_group_wait)
    names = [n for n in args.only.split(",") if n] or list(found)
    unknown = sorted(set(names) - set(found))
    if unknown:
        raise SystemExit(f"unknown system(s) {unknown}: choose from {sorted(found)}")
    rounds: list[dict[str, Figures]] = []
    print(f"load: {load}; load average at start {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="peers-") as tmp:
        for i in range(args.rounds):
            order = names[i % len(names) :] + names[: i % len(names)]
            results: dict[str, Figures] = {}
            for name in order:
                t0 = time.perf_counter()
                where = Path(tmp) / f"{name}-{i}"
                where.mkdir()
                try:
                    f = results[name] = found[name](where, load)
                except Exception as exc:  # one system failing leaves the others' figures
                    print(f"round {i + 1} {name}: failed: {exc!r}", flush=True)
                    continue
                print(
                    f"round {i + 1} {name}: {f.entries_per_s:,.0f}/s, "
                    f"{f.cpu_us_per_entry:.0f} µs/entry "
                    f"({f.own_cpu_us_per_entry:.0f} in this process), blocking p50 "
                    f"{pct(f.blocking, 0.5):.2f} p99 {pct(f.blocking, 0.99):.2f} ms, follower "
                    f"p50 {pct(f.follow, 0.5):.2f} p99 {pct(f.follow, 0.99):.2f} ms "
                    f"({time.perf_counter() - t0:.0f} s, load {os.getloadavg()[0]:.1f}) {f.note}",
                    flush=True,
                )
            rounds.append(results)
    print(f"\nload average at the end {os.getloadavg()}; {args.rounds} rounds, median (range)\n")
    print(table(rounds, names))
    print()
    print(bounds(rounds))


if __name__ == "__main__":
    main()
