"""BP-46 repair outlives a metadata error while it lists its ledgers (found by the simulator).

A bookie that ran without the journal boots suspicious and repairs in the background:
it lists the ledgers it belongs to, then copies back what it lost. A ZooKeeper
ConnectionLoss on that listing used to end the repair until the next boot ("BP-46
repair failed; it resumes at next boot"), leaving the entries it lost with fewer than
AQ copies for as long as it ran (the simulator's AllCommittedEntriesReachAckQuorum,
bounded-nojournal seed 20). It now lists again after its retry interval.
"""

from __future__ import annotations

import asyncio

from embedlog.bookie.bookie import Bookie, BookieState
from embedlog.bookie.config import BookieConfig
from embedlog.bookie.index import REPAIR
from embedlog.client import Client
from embedlog.errors import MetadataError
from embedlog.metadata.client import LEDGERS, MetadataClient
from embedlog.metadata.memory import MemoryMetadataStore
from embedlog.repair_client import repair_clients
from embedlog.testing.sim import SimRuntime
from embedlog.transport.inprocess import InProcessTransport


class FailsOneListing(MemoryMetadataStore):
    """Listing the ledgers fails once, on its ``fail_at``-th call, as on a ConnectionLoss."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_at = 0  # never
        self.listings = 0

    def children(self, path: str) -> list[str]:
        if path == LEDGERS:
            self.listings += 1
            if self.listings == self.fail_at:
                raise MetadataError(f"ZooKeeper ConnectionLoss on {path}")
        return super().children(path)


def test_repair_lists_its_ledgers_again_after_a_metadata_error(tmp_path):
    store = FailsOneListing()
    meta = MetadataClient(store)
    loop = asyncio.new_event_loop()
    bookies: dict[str, Bookie] = {}
    transport = InProcessTransport(bookies.get)

    def repair_client() -> Client:
        return Client(SimRuntime(loop), meta, transport, name="b1-repair")

    cfg = BookieConfig.from_settings(
        "b1", tmp_path / "b1", journal_write_data=False, repair_retry_interval=0.01
    )

    def boot() -> Bookie:
        bookie = Bookie(cfg, meta, store.session(), client_factory=repair_clients(repair_client))
        bookies["b1"] = bookie
        loop.run_until_complete(bookie.start())
        return bookie

    first = boot()
    first.crash()  # without the journal: the next boot is suspicious, and repairs
    # The boot's phase one lists the ledgers; the repair's listing, next, fails.
    store.fail_at = store.listings + 2
    bookie = boot()
    try:
        assert bookie.suspicion and bookie.repair.task is not None
        loop.run_until_complete(bookie.repair.task)
        assert store.listings > store.fail_at  # failed once, listed again
        assert bookie.repairer.progress.state == "done"
        assert bookie.storage is not None and not bookie.storage.index.marker(REPAIR)
        assert bookie.state is BookieState.SERVING
    finally:
        loop.run_until_complete(bookie.stop())
        loop.close()
