"""Pipelined 1 KiB adds to a 3-bookie in-process cluster (E3 WQ3 AQ2, journal on).

Compared in the same run with raw fsync'd appends of the same bytes to the same
disk (benchmarks/baseline.py). Run: python -m pytest benchmarks/bench_ledger.py -s
or python benchmarks/bench_ledger.py.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from baseline import raw_fsync_appends

from embedlog import LocalCluster
from embedlog.bookie.bookie import Bookie
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import OpCode, Response

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


@contextlib.contextmanager
def bookies_answer_without_storing() -> Iterator[None]:
    """A what-if for docs/performance.md: bookies acknowledge adds at once, storing
    nothing, so what remains is the client's and the transport's share of an add."""
    real = Bookie.handle_nowait

    def ack_at_once(self: Bookie, req: Any, reply: Any) -> Any:
        if req.op == OpCode.ADD:
            reply(Response.to(req, StatusCode.EOK, entry_id=req.entry_id))
            return None
        return real(self, req, reply)

    Bookie.handle_nowait = ack_at_once  # type: ignore[method-assign]
    try:
        yield
    finally:
        Bookie.handle_nowait = real  # type: ignore[method-assign]


def run(directory: Path) -> dict[str, float]:
    ledger = pipelined_adds(directory / "cluster")
    with bookies_answer_without_storing():
        client_only = pipelined_adds(directory / "client-only")
    # Three bookies each fsync their own journal: the fair raw baseline is one disk's
    # rate for the same bytes in groups of the size a journal batch typically reaches.
    baseline = raw_fsync_appends(directory, ENTRIES, SIZE, group=64)
    return {
        "ledger_entries_per_s": ledger,
        "client_and_transport_only_per_s": client_only,
        "raw_entries_per_s": baseline,
        "ratio": ledger / baseline,
    }


def test_pipelined_adds_vs_raw_disk(benchmark, tmp_path):
    result = benchmark.pedantic(lambda: run(tmp_path), rounds=1, iterations=1)
    benchmark.extra_info.update(result)
    print(
        f"\nledger adds {result['ledger_entries_per_s']:,.0f}/s, raw fsync'd appends "
        f"{result['raw_entries_per_s']:,.0f}/s, ratio {result['ratio']:.2f}; with bookies "
        f"that store nothing (client and transport alone) "
        f"{result['client_and_transport_only_per_s']:,.0f}/s"
    )
    assert result["ledger_entries_per_s"] > 0


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        r = run(Path(d))
        print(r)
