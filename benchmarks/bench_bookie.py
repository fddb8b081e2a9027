"""One bookie's add throughput (1 KiB entries, journal on) vs raw fsync'd appends.

Two measures: the whole add path (decode, checks, write cache, journal, answer)
and the journal path alone (records framed, group-committed and fsync'd by the
journal's thread, durability reported by callback), both with 1,000 in flight.

Request frames go straight to the bookie's frame handler (as a transport hands
them over), 1,000 in flight, so the journal's group commit batches them;
the baseline appends the same bytes to a file on the same disk, fsync'ing once
per group of the size the journal actually achieved. Run:
python -m pytest benchmarks/bench_bookie.py -s  or  python benchmarks/bench_bookie.py
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from baseline import main, measure_once, raw_fsync_appends

from embedlog.bookie.bookie import Bookie
from embedlog.bookie.config import BookieConfig
from embedlog.bookie.diskthread import DiskThread
from embedlog.bookie.journal import Journal
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.memory import MemoryMetadataStore
from embedlog.transport.server import serve_frame
from embedlog.wire.entry import Digester, DigestType, master_key
from embedlog.wire.messages import OpCode, Request, Response

ENTRIES = 30000
SIZE = 1024
IN_FLIGHT = 1000


async def windowed(
    count: int, start_one: Callable[[int, Callable[..., None]], object], check: Callable[..., None]
) -> float:
    """Seconds to complete ``count`` operations kept IN_FLIGHT at a time: ``start_one(i,
    done)`` starts operation i, which calls ``done(*outcome)``; ``check`` vets each outcome."""
    finished = asyncio.get_running_loop().create_future()
    started = completed = 0

    def done(*outcome: object) -> None:
        nonlocal completed
        check(*outcome)
        completed += 1
        if completed == count:
            finished.set_result(None)
        else:
            start_more()

    def start_more() -> None:
        nonlocal started
        while started < count and started - completed < IN_FLIGHT:
            start_one(started, done)
            started += 1

    t0 = time.perf_counter()
    start_more()
    await finished
    return time.perf_counter() - t0


async def bookie_adds(directory: Path, entries: int, size: int) -> tuple[float, float]:
    """Request frames in, answer frames out, as a transport drives a bookie (no client)."""
    store = MemoryMetadataStore()
    bookie = Bookie(
        BookieConfig.from_settings("bench", directory / "bench"),
        MetadataClient(store),
        store.session(),
    )
    await bookie.start()
    key = master_key(b"")
    digester = Digester(DigestType.CRC32C)
    payload = os.urandom(size)
    frames = [
        Request(
            OpCode.ADD, i, 1, i, master_key=key, body=digester.pack(1, i, i - 1, payload)
        ).encode()
        for i in range(entries)
    ]

    def check(frame: bytes | None, gone: BaseException | None) -> None:
        assert frame is not None and gone is None, gone
        assert Response.decode(frame).status == 0

    elapsed = await windowed(entries, lambda i, done: serve_frame(bookie, frames[i], done), check)
    assert bookie.journal is not None
    group = bookie.journal.records / max(1, bookie.journal.batches)
    await bookie.stop()
    return entries / elapsed, group


async def journal_appends(directory: Path, entries: int, size: int) -> tuple[float, float]:
    """The journal alone: the records a bookie writes for 1 KiB adds, 1,000 in flight."""
    config = BookieConfig.from_settings("journal", directory / "journal")
    config.journal_dir.mkdir(parents=True, exist_ok=True)
    executor = DiskThread("bench-journal")  # the bookie's own kind
    journal = Journal(config, executor, 0)
    journal.start()
    record = os.urandom(size + 25 + 4 + 17)  # entry header, digest, record type

    def check(exc: BaseException | None) -> None:
        assert exc is None, exc

    elapsed = await windowed(entries, lambda _i, done: journal.append_then(record, done), check)
    group = journal.records / max(1, journal.batches)
    await journal.close()
    executor.shutdown()
    return entries / elapsed, group


def run(directory: Path) -> dict[str, float]:
    rate, group = asyncio.run(bookie_adds(directory, ENTRIES, SIZE))
    entry_bytes = SIZE + 25 + 4 + 8 + 17  # payload, entry header, digest, frame, record type
    baseline = raw_fsync_appends(directory, ENTRIES, entry_bytes, group=max(1, round(group)))
    j_rate, j_group = asyncio.run(journal_appends(directory, ENTRIES, SIZE))
    j_baseline = raw_fsync_appends(directory, ENTRIES, entry_bytes, group=max(1, round(j_group)))
    return {
        "bookie_adds_per_s": rate,
        "journal_group_size": group,
        "raw_fsync_appends_per_s": baseline,
        "ratio": rate / baseline,
        "journal_appends_per_s": j_rate,
        "journal_alone_group_size": j_group,
        "raw_for_journal_per_s": j_baseline,
        "journal_ratio": j_rate / j_baseline,
    }


def report(r: dict[str, float]) -> str:
    return (
        f"\nbookie adds {r['bookie_adds_per_s']:,.0f}/s (journal groups of "
        f"{r['journal_group_size']:.0f}), raw fsync'd appends in the same groups "
        f"{r['raw_fsync_appends_per_s']:,.0f}/s, ratio {r['ratio']:.2f}\n"
        f"journal path alone {r['journal_appends_per_s']:,.0f} records/s (groups of "
        f"{r['journal_alone_group_size']:.0f}), raw in the same groups "
        f"{r['raw_for_journal_per_s']:,.0f}/s, ratio {r['journal_ratio']:.2f}"
    )


def test_bookie_adds_vs_raw_disk(benchmark, tmp_path):
    result = measure_once(benchmark, run, tmp_path, report)
    assert result["bookie_adds_per_s"] > 0


if __name__ == "__main__":
    main(run, report)
