"""BP-46: adds with and without the journal, and how long a suspicious boot takes.

1. Pipelined 1 KiB adds (E3 WQ3 AQ2) with ``journal_write_data`` True and False,
   each against raw fsync'd appends on the same disk in the same run, plus the
   bytes each configuration wrote to disk per entry (the point of BP-46 is
   halving disk writes).
2. A bookie holding LEDGERS ledgers crashes while adds skip the journal: time from
   start to serving (phase one) and to repair done (phase two).

Run: python -m pytest benchmarks/bench_bp46.py -s   or   python benchmarks/bench_bp46.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from baseline import main, measure_once, raw_fsync_appends

from embedlog import LocalCluster

ENTRIES = 20000
SIZE = 1024
LEDGERS = 1000


def adds(data_dir: Path, journal_write_data: bool) -> tuple[float, float]:
    """(entries/s, bytes written to journals and entry logs per entry, all three bookies)."""
    payload = os.urandom(SIZE)
    with LocalCluster(3, data_dir=data_dir, journal_write_data=journal_write_data) as cluster:
        bookies = [cluster.bookie(b) for b in cluster.bookie_ids]
        wh = cluster.client("bench").create_ledger(3, 3, 2)
        for _ in range(200):
            wh.add(payload)

        def written() -> int:
            # Journal LSNs count every byte appended; entry logs only grow.
            return sum(b.journal.lsn + b.storage.logs.size_on_disk() for b in bookies)

        before = written()
        start = time.perf_counter()
        futures = [wh.add_async(payload) for _ in range(ENTRIES)]
        futures[-1].result()
        elapsed = time.perf_counter() - start
        for b in bookies:
            cluster.runtime.run(b.flush())
        per_entry = (written() - before) / ENTRIES
        wh.close()
    return ENTRIES / elapsed, per_entry


def suspicious_boot(data_dir: Path, ledgers: int = LEDGERS) -> dict[str, float]:
    with LocalCluster(
        3, data_dir=data_dir, journal_write_data=False, flush_interval=3600.0
    ) as cluster:
        client = cluster.client("bench")
        for i in range(ledgers):
            wh = client.create_ledger(3, 3, 2)
            wh.add(b"entry of %d" % i)
            if i % 2:
                wh.close()  # half closed, half open (the open ones get recovered)
        bid = cluster.bookie_ids[0]
        cluster.crash_bookie(bid)
        start = time.perf_counter()
        cluster.start_bookie(bid)
        serving = time.perf_counter() - start
        status = cluster.wait_repaired(bid, timeout=600)
        repaired = time.perf_counter() - start
    return {
        "ledgers": ledgers,
        "restart_to_serving_s": serving,
        "restart_to_repaired_s": repaired,
        "entries_copied": status["repair"]["entries_copied"],
        "ledgers_recovered": status["repair"]["ledgers_recovered"],
    }


def run(directory: Path) -> dict[str, float]:
    with_journal, bytes_with = adds(directory / "journal-on", True)
    without_journal, bytes_without = adds(directory / "journal-off", False)
    raw = raw_fsync_appends(directory, ENTRIES, SIZE, group=64)
    boot = suspicious_boot(directory / "boot")
    return {
        "journal_on_entries_per_s": with_journal,
        "journal_off_entries_per_s": without_journal,
        "raw_entries_per_s": raw,
        "ratio_journal_on": with_journal / raw,
        "ratio_journal_off": without_journal / raw,
        "disk_bytes_per_entry_journal_on": bytes_with,
        "disk_bytes_per_entry_journal_off": bytes_without,
        **boot,
    }


def report(r: dict[str, float]) -> str:
    return (
        f"\nadds with journal {r['journal_on_entries_per_s']:,.0f}/s "
        f"(ratio {r['ratio_journal_on']:.3f} of raw), without "
        f"{r['journal_off_entries_per_s']:,.0f}/s (ratio {r['ratio_journal_off']:.3f}); "
        f"raw fsync'd appends {r['raw_entries_per_s']:,.0f}/s\n"
        f"disk bytes per 1 KiB entry (3 bookies): journal on "
        f"{r['disk_bytes_per_entry_journal_on']:,.0f}, off "
        f"{r['disk_bytes_per_entry_journal_off']:,.0f}\n"
        f"suspicious boot with {r['ledgers']} ledgers: serving after "
        f"{r['restart_to_serving_s']:.2f}s, repair done after {r['restart_to_repaired_s']:.2f}s "
        f"({r['ledgers_recovered']} recovered, {r['entries_copied']} entries copied)"
    )


def test_bp46_journal_off_and_boot(benchmark, tmp_path):
    result = measure_once(benchmark, run, tmp_path, report)
    assert result["journal_off_entries_per_s"] > 0


if __name__ == "__main__":
    main(run, report)
