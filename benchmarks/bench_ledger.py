"""Pipelined 1 KiB adds to a 3-bookie in-process cluster (E3 WQ3 AQ2, journal on).

Compared in the same run with raw fsync'd appends of the same bytes to the same
disk (benchmarks/baseline.py): the three copies of each entry the bookies'
journals wrote, fsync'd in groups of the size the journals reached.
Run: python -m pytest benchmarks/bench_ledger.py -s or python benchmarks/bench_ledger.py.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from baseline import main, measure_once, raw_fsync_appends

from embedlog import LocalCluster
from embedlog.bookie.bookie import Bookie
from embedlog.ledger.writer import LedgerWriter
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import OpCode, Response, pack_results, unpack_entries

ENTRIES = 20000
SIZE = 1024
WARM_UP = 200
ROUNDS = 3


def pipelined_adds(
    data_dir: Path,
    entries: int = ENTRIES,
    size: int = SIZE,
    stats: dict[str, float] | None = None,
    *,
    writer_futures: bool = False,
    **config: Any,
) -> float:
    """Entries/s; ``stats`` (if given) gets the journals' mean group size (entry copies
    per fsync: a journal record may hold a whole ADD_BATCH). ``writer_futures``: a what-if
    for docs/performance.md, the same adds made on the runtime's loop with the writer's
    own asyncio futures, i.e. without the blocking API's concurrent futures."""
    payload = os.urandom(size)
    with LocalCluster(3, data_dir=data_dir, **config) as cluster:
        wh = cluster.client("bench").create_ledger(3, 3, 2)
        for _ in range(WARM_UP):
            wh.add(payload)
        journals = [cluster.bookie(b).journal for b in cluster.bookie_ids]
        # Groups written during the measured adds only: the warm-up's single adds are a
        # group each and would make the groups look ten times smaller than they were.
        groups_before = sum(j.batches for j in journals if j is not None)
        start = time.perf_counter()
        if writer_futures:
            cluster.runtime.run(_on_the_loop(wh._writer, payload, entries))
        else:
            futures = [wh.add_async(payload) for _ in range(entries)]
            futures[-1].result()
        elapsed = time.perf_counter() - start
        groups = sum(j.batches for j in journals if j is not None) - groups_before
        wh.close()
        if stats is not None:
            stats["journal_group"] = 3 * entries / max(1, groups)
    return entries / elapsed


async def _on_the_loop(writer: LedgerWriter, payload: bytes, entries: int) -> None:
    futures = [writer.add(payload) for _ in range(entries)]
    await futures[-1]


@contextlib.contextmanager
def bookies_answer_without_storing() -> Iterator[None]:
    """A what-if for docs/performance.md: bookies acknowledge adds at once, storing
    nothing, so what remains is the client's and the transport's share of an add."""
    real = Bookie.handle_nowait

    def ack_at_once(self: Bookie, req: Any, reply: Any) -> Any:
        if req.op == OpCode.ADD:
            reply(Response.to(req, StatusCode.EOK, entry_id=req.entry_id))
            return None
        if req.op == OpCode.ADD_BATCH:
            ok = [(StatusCode.EOK, req.term) for _ in unpack_entries(req.body)]
            reply(Response.to(req, StatusCode.EOK, entry_id=req.entry_id, body=pack_results(ok)))
            return None
        return real(self, req, reply)

    Bookie.handle_nowait = ack_at_once  # type: ignore[method-assign]
    try:
        yield
    finally:
        Bookie.handle_nowait = real  # type: ignore[method-assign]


def run(directory: Path) -> dict[str, float]:
    # Paired rounds, each ledger run followed by its own baseline: fsync time drifts
    # over minutes, and the ratio of one pair is what it is compared on; the median
    # round is reported (and all rounds, so that the spread shows).
    rounds = []
    for i in range(ROUNDS):
        stats: dict[str, float] = {}
        ledger = pipelined_adds(directory / f"cluster-{i}", stats=stats)
        # The baseline writes what the ledger wrote to this disk: each entry three times
        # (one journal record per bookie), fsync'd in groups of the size the journals reached.
        group = max(1, round(stats["journal_group"]))
        copies = raw_fsync_appends(directory, 3 * ENTRIES, SIZE, group=group)
        rounds.append((ledger / (copies / 3), ledger, copies, stats["journal_group"]))
    ratio, ledger, copies, group_size = sorted(rounds)[len(rounds) // 2]
    writer_futures = pipelined_adds(directory / "on-loop", writer_futures=True)
    with bookies_answer_without_storing():
        client_only = pipelined_adds(directory / "client-only")
    result = {
        "ledger_entries_per_s": ledger,
        "client_and_transport_only_per_s": client_only,
        "writer_futures_per_s": writer_futures,
        "journal_group_size": group_size,
        "raw_appends_per_s": copies,
        "raw_entries_per_s": copies / 3,
        "ratio": ratio,
    }
    result.update({f"ratio_round_{i}": r[0] for i, r in enumerate(rounds)})
    return result


def report(r: dict[str, float]) -> str:
    rounds = ", ".join(f"{r[f'ratio_round_{i}']:.2f}" for i in range(ROUNDS))
    return (
        f"\nmedian of {ROUNDS} rounds: ledger adds {r['ledger_entries_per_s']:,.0f}/s; raw "
        f"fsync'd appends of the same bytes (3 copies per entry, groups of "
        f"{r['journal_group_size']:.0f}) {r['raw_appends_per_s']:,.0f}/s = "
        f"{r['raw_entries_per_s']:,.0f} entries/s; ratio {r['ratio']:.2f} (rounds: {rounds}). "
        f"What-ifs: the same adds with the writer's asyncio futures on the runtime loop "
        f"instead of the blocking API's concurrent futures {r['writer_futures_per_s']:,.0f}/s; "
        f"with bookies that store nothing (client and transport alone) "
        f"{r['client_and_transport_only_per_s']:,.0f}/s"
    )


def test_pipelined_adds_vs_raw_disk(benchmark, tmp_path):
    result = measure_once(benchmark, run, tmp_path, report)
    assert result["ledger_entries_per_s"] > 0


if __name__ == "__main__":
    main(run, report)
