"""One bookie's add throughput (1 KiB entries, journal on) vs raw fsync'd appends.

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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from baseline import main, measure_once, raw_fsync_appends

from embedlog.bookie.bookie import Bookie
from embedlog.bookie.config import BookieConfig
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.memory import MemoryMetadataStore
from embedlog.transport.server import serve_frame
from embedlog.wire.entry import Digester, DigestType, master_key
from embedlog.wire.messages import OpCode, Request, Response

ENTRIES = 30000
SIZE = 1024
IN_FLIGHT = 1000


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
        Request(OpCode.ADD, i, 1, i, master_key=key, body=digester.pack(1, i, i - 1, payload))
        .encode()
        for i in range(entries)
    ]
    done = asyncio.get_running_loop().create_future()
    sent = answered = 0

    def reply(frame: bytes | None, gone: BaseException | None) -> None:
        nonlocal answered
        assert frame is not None and gone is None, gone
        assert Response.decode(frame).status == 0
        answered += 1
        if answered == entries:
            done.set_result(None)
        else:
            send_more()

    def send_more() -> None:
        nonlocal sent
        while sent < entries and sent - answered < IN_FLIGHT:
            serve_frame(bookie, frames[sent], reply)
            sent += 1

    start = time.perf_counter()
    send_more()
    await done
    elapsed = time.perf_counter() - start
    assert bookie.journal is not None
    group = bookie.journal.records / max(1, bookie.journal.batches)
    await bookie.stop()
    return entries / elapsed, group


def run(directory: Path) -> dict[str, float]:
    rate, group = asyncio.run(bookie_adds(directory, ENTRIES, SIZE))
    entry_bytes = SIZE + 25 + 4 + 8 + 17  # payload, entry header, digest, frame, record type
    baseline = raw_fsync_appends(directory, ENTRIES, entry_bytes, group=max(1, round(group)))
    return {
        "bookie_adds_per_s": rate,
        "journal_group_size": group,
        "raw_fsync_appends_per_s": baseline,
        "ratio": rate / baseline,
    }


def report(r: dict[str, float]) -> str:
    return (
        f"\nbookie adds {r['bookie_adds_per_s']:,.0f}/s (journal groups of "
        f"{r['journal_group_size']:.0f}), raw fsync'd appends in the same groups "
        f"{r['raw_fsync_appends_per_s']:,.0f}/s, ratio {r['ratio']:.2f}"
    )

def test_bookie_adds_vs_raw_disk(benchmark, tmp_path):
    result = measure_once(benchmark, run, tmp_path, report)
    assert result["bookie_adds_per_s"] > 0


if __name__ == "__main__":
    main(run, report)
