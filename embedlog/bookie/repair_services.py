"""What BP-46 asks of a bookie's own data: the ledgers it belongs to, the entries it can
read back, the copies the repairer brings, limbo cleared; and the repair task.

BP-46 phase one (embedlog/bookie/boot.py) scans the metadata here; phase two, the
Repairer (embedlog/bookie/repair.py), runs as the bookie's repair task and sees the
bookie only through these (its BookieForRepair protocol). A part the Bookie holds
(``Bookie.repair``), seeing the bookie through ``RepairHost``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from embedlog.bookie.config import BookieConfig
from embedlog.bookie.index import REPAIR, LedgerInfo
from embedlog.bookie.repair import ClientFactory, Repairer
from embedlog.bookie.storage import LedgerStorage
from embedlog.clock import Clock
from embedlog.errors import BookieIOError, NoSuchLedgerInMetadataError
from embedlog.metadata.client import LEDGERS, MetadataClient
from embedlog.metadata.ledger_metadata import LedgerMetadata

log = logging.getLogger(__name__)


class RepairHost(Protocol):
    """What the repair services ask of their bookie (embedlog/bookie/bookie.py)."""

    @property
    def bookie_id(self) -> str: ...

    @property
    def config(self) -> BookieConfig: ...

    @property
    def metadata(self) -> MetadataClient: ...

    @property
    def storage(self) -> LedgerStorage | None: ...

    @property
    def serving(self) -> bool: ...

    @property
    def first_live(self) -> dict[int, int]: ...

    async def call_metadata(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    def journal_states(self, states: dict[int, LedgerInfo]) -> None:
        """Set these ledgers' states and journal them (``sync`` waits for them)."""
        ...

    async def sync(self) -> None:
        """Wait until everything journaled so far is durable."""
        ...

    async def flush(self) -> None: ...

    async def publish_status(self) -> None: ...


class RepairServices:
    """The bookie's side of BP-46 phase two (the Repairer's BookieForRepair) and the
    repair task."""

    def __init__(
        self,
        bookie: RepairHost,
        client_factory: ClientFactory | None,
        clock: Clock,
    ) -> None:
        self.bookie = bookie
        self.repairer = Repairer(self, client_factory, bookie.config.repair_retry_interval, clock)
        self.task: asyncio.Task[None] | None = None  # phase two, when the boot left it pending

    @property
    def bookie_id(self) -> str:
        return self.bookie.bookie_id

    @property
    def config(self) -> BookieConfig:
        return self.bookie.config

    @property
    def first_live(self) -> dict[int, int]:
        return self.bookie.first_live

    async def flush(self) -> None:
        await self.bookie.flush()

    async def publish_status(self) -> None:
        await self.bookie.publish_status()

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def ledgers_with_me(self) -> list[LedgerMetadata]:
        """Metadata of every ledger whose ensembles (any fragment) contain this bookie."""
        return await self.scan_metadata(lambda md: self.bookie_id in md.bookies())

    async def scan_metadata(self, keep: Callable[[LedgerMetadata], bool]) -> list[LedgerMetadata]:
        """The metadata of every ledger ``keep`` accepts, in one pass over the store."""

        def scan() -> list[LedgerMetadata]:
            # Phase one must see every ledger created before the crash: a lagging
            # ZooKeeper server could leave out one whose entries this bookie acknowledged.
            self.bookie.metadata.store.sync(LEDGERS)
            out = []
            for lid in self.bookie.metadata.list_ledgers():
                try:
                    md = self.bookie.metadata.read_ledger(lid)
                except NoSuchLedgerInMetadataError:
                    continue  # deleted while we listed
                if keep(md):
                    out.append(md)
            return out

        result: list[LedgerMetadata] = await self.bookie.call_metadata(scan)
        return result

    async def read_metadata(self, ledger_id: int) -> LedgerMetadata:
        md: LedgerMetadata = await self.bookie.call_metadata(
            self.bookie.metadata.read_ledger, ledger_id
        )
        return md

    def limbo_ledgers(self) -> list[int]:
        storage = self.bookie.storage
        assert storage is not None
        return [lid for lid in storage.ledger_ids() if (i := storage.info(lid)) and i.limbo]

    def holds_readable(self, ledger_id: int, entry_id: int) -> bool:
        """True when the entry is here and its bytes can be read back (not just indexed)."""
        storage = self.bookie.storage
        assert storage is not None
        try:
            return storage.get(ledger_id, entry_id) is not None
        except BookieIOError:
            return False  # indexed, but its entry log is gone or damaged: copy it again

    def dropped_here(self, ledger_id: int) -> bool:
        """This bookie dropped the ledger (tombstones.py): there is nothing to repair."""
        storage = self.bookie.storage
        assert storage is not None
        return storage.dropped(ledger_id)

    def store_repaired(self, ledger_id: int, entry_id: int, body: bytes, key: bytes) -> None:
        """Keep an entry copied from a peer (made durable by the repairer's next flush);
        not one of a ledger dropped while it was copied."""
        storage = self.bookie.storage
        assert storage is not None
        if storage.dropped(ledger_id):
            return
        if storage.info(ledger_id) is None:
            storage.set_info(ledger_id, LedgerInfo(master_key=key.hex(), limbo=True))
        storage.put(ledger_id, entry_id, body)

    async def clear_limbo(self, ledger_ids: list[int]) -> None:
        storage = self.bookie.storage
        assert storage is not None
        cleared: dict[int, LedgerInfo] = {}
        try:
            for lid in ledger_ids:
                info = storage.info(lid)
                if info is not None and info.limbo:
                    info.limbo = False
                    cleared[lid] = info
            if cleared:
                self.bookie.journal_states(cleared)
                await self.bookie.sync()  # one wait for all (see boot._phase_one)
        except BaseException:
            # Not known durable: still in limbo here too (its answers stay "unknown"), so
            # that the repair's next round clears it again rather than find nothing to do.
            for info in cleared.values():
                info.limbo = True
            raise

    def repair_finished(self) -> None:
        storage = self.bookie.storage
        assert storage is not None
        storage.index.set_marker(REPAIR, False)

    async def _run(self) -> None:
        try:
            await self.repairer.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            if self.bookie.serving:
                log.exception(
                    "bookie %s: BP-46 repair failed; it resumes at next boot", self.bookie_id
                )

    def wait_repaired_nowait(self) -> bool:
        """True once no BP-46 repair is pending or running."""
        return self.task is None or self.task.done()
