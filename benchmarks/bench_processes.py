"""Bookies in processes of their own against bookies in the client's process, same run.

Pipelined 1 KiB adds, E3 WQ3 AQ2, three bookies: (1) in-process (one interpreter,
one event loop for the client and all bookies), (2) the same over TCP on 127.0.0.1,
still one process, (3) ``LocalCluster(processes=True)``: each bookie an ``embedlog
bookie run`` process, the client in this one. For each: entries/s, and CPU per entry
of every process involved (this one's, and the bookie processes' from /proc), beside
raw fsync'd appends of the same bytes (benchmarks/baseline.py). Rounds alternate the
three so that the disk's and the CPU's drift hits all of them alike.
Run: python -m pytest benchmarks/bench_processes.py -s or python benchmarks/bench_processes.py.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from baseline import main, measure_once, raw_fsync_appends

from embedlog import LocalCluster
from embedlog.metadata.zkserver import running_zookeeper

ENTRIES = 20000
SIZE = 1024
WARM_UP = 200
ROUNDS = 3
MODES = ("inprocess", "tcp", "processes")
_TICK = os.sysconf("SC_CLK_TCK")


def _own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _cpu_of(pid: int) -> float:
    """User plus system seconds of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def pipelined_adds(data_dir: Path, mode: str, zk_uri: str) -> dict[str, float]:
    """Entries/s and CPU µs per entry: this process's and the bookie processes'."""
    payload = os.urandom(SIZE)
    kw: dict[str, Any] = {}
    if mode == "processes":
        kw = {"processes": True, "metadata_uri": zk_uri}
    elif mode == "tcp":
        kw = {"transport": "tcp"}
    with LocalCluster(3, data_dir=data_dir, **kw) as cluster:
        wh = cluster.client("bench").create_ledger(3, 3, 2)
        for _ in range(WARM_UP):
            wh.add(payload)
        pids = [cluster.bookie_pid(b) for b in cluster.bookie_ids] if mode == "processes" else []  # type: ignore[attr-defined]
        bookies_before = sum(_cpu_of(p) for p in pids)
        own_before = _own_cpu()
        start = time.perf_counter()
        futures = [wh.add_async(payload) for _ in range(ENTRIES)]
        futures[-1].result()
        elapsed = time.perf_counter() - start
        own = _own_cpu() - own_before
        bookies = sum(_cpu_of(p) for p in pids) - bookies_before
        wh.close()
    return {
        "entries_per_s": ENTRIES / elapsed,
        "client_process_us": own / ENTRIES * 1e6,
        "bookie_processes_us": bookies / ENTRIES * 1e6,
        "cpu_us_per_entry": (own + bookies) / ENTRIES * 1e6,
        "cores_busy": (own + bookies) / elapsed,
    }


def run(directory: Path) -> dict[str, float]:
    results: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    raw = []
    with running_zookeeper() as zk:
        for i in range(ROUNDS):
            for mode in MODES:
                uri = zk.uri(f"/bench-{mode}-{i}")
                results[mode].append(pipelined_adds(directory / f"{mode}-{i}", mode, uri))
            # The bytes the journals wrote: three copies of each entry; fsync'd in groups
            # of 1,000 (about what the journals reach with the writer's 1,000-entry window).
            raw.append(raw_fsync_appends(directory, 3 * ENTRIES, SIZE, group=1000) / 3)
    out: dict[str, float] = {"raw_entries_per_s": sorted(raw)[len(raw) // 2]}
    for mode, rounds in results.items():
        median = sorted(rounds, key=lambda r: r["entries_per_s"])[len(rounds) // 2]
        out.update({f"{mode}_{k}": v for k, v in median.items()})
        out[f"{mode}_rounds"] = len(rounds)
        out.update({f"{mode}_round_{i}_per_s": r["entries_per_s"] for i, r in enumerate(rounds)})
    return out


def report(r: dict[str, float]) -> str:
    lines = [
        f"\nmedian of {ROUNDS} rounds, {ENTRIES} pipelined 1 KiB adds, E3 WQ3 AQ2, "
        f"3 bookies, {os.cpu_count()} cores"
    ]
    for mode in MODES:
        rounds = ", ".join(f"{r[f'{mode}_round_{i}_per_s']:,.0f}" for i in range(ROUNDS))
        lines.append(
            f"  {mode:>9}: {r[f'{mode}_entries_per_s']:>7,.0f} entries/s "
            f"(rounds {rounds}; ratio {r[f'{mode}_entries_per_s'] / r['raw_entries_per_s']:.2f}), "
            f"CPU {r[f'{mode}_cpu_us_per_entry']:.0f} µs/entry (client process "
            f"{r[f'{mode}_client_process_us']:.0f}, bookie processes "
            f"{r[f'{mode}_bookie_processes_us']:.0f}), {r[f'{mode}_cores_busy']:.2f} cores busy"
        )
    lines.append(
        f"  raw fsync'd appends (3 copies, groups of 1000): {r['raw_entries_per_s']:,.0f} entries/s"
    )
    return "\n".join(lines)


def test_processes_vs_in_process(benchmark, tmp_path):
    result = measure_once(benchmark, run, tmp_path, report)
    assert result["processes_entries_per_s"] > 0


if __name__ == "__main__":
    main(run, report)
