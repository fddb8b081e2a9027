"""What BP-46 asks of a bookie's own data: the ledgers it belongs to, the entries it can
read back, the copies the repairer brings, limbo cleared; and the repair task.

BP-46 phase one (embedlog/bookie/boot.py) uses ``ledgers_to_protect``; phase two, the
Repairer (embedlog/bookie/repair.py), runs as the bookie's repair task and sees the
bookie only through these (its BookieForRepair protocol). A part of the Bookie
(embedlog/bookie/base.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from embedlog.bookie.base import BookieBase, BookieState
from embedlog.bookie.index import REPAIR, LedgerInfo
from embedlog.bookie.integrity import Protection, owes_entries, protection_for
from embedlog.bookie.repair import Repairer
from embedlog.errors import BookieIOError, NoSuchLedgerInMetadataError
from embedlog.metadata.client import LEDGERS
from embedlog.metadata.ledger_metadata import LedgerMetadata

log = logging.getLogger(__name__)


class RepairServices(BookieBase):
    repairer: Repairer
    _repair_task: asyncio.Task[None] | None  # BP-46 phase two, when the boot left it pending

    async def ledgers_with_me(self) -> list[LedgerMetadata]:
        """Metadata of every ledger whose ensembles (any fragment) contain this bookie."""
        return await self._scan_metadata(lambda md: self.bookie_id in md.bookies())

    async def ledgers_to_protect(self) -> list[tuple[LedgerMetadata, Protection]]:
        """What BP-46 phase one does to each ledger of the cluster (``integrity``:
        ``owes_entries`` and ``protection_for``), for those it does something to.

        Not to a ledger this bookie dropped (tombstones.py), though its metadata may not
        be gone yet (a delete under way): it owes nothing of a deleted ledger, and a fence
        or limbo record would give it state again."""
        assert self.storage is not None
        held = set(self.storage.ledger_ids())
        me, skip = self.bookie_id, self.config.unsafe_skip_fence_on_boot
        plans = []
        for md in await self._scan_metadata(lambda md: True):
            if self.storage.dropped(md.ledger_id):
                continue
            owes = owes_entries(md, me, held=md.ledger_id in held)
            plan = protection_for(md, owes=owes, skip_fence=skip)
            if plan.fence or plan.limbo or plan.term is not None:
                plans.append((md, plan))
        return plans

    async def _scan_metadata(self, keep: Callable[[LedgerMetadata], bool]) -> list[LedgerMetadata]:
        """The metadata of every ledger ``keep`` accepts, in one pass over the store."""

        def scan() -> list[LedgerMetadata]:
            # Phase one must see every ledger created before the crash: a lagging
            # ZooKeeper server could leave out one whose entries this bookie acknowledged.
            self.metadata.store.sync(LEDGERS)
            out = []
            for lid in self.metadata.list_ledgers():
                try:
                    md = self.metadata.read_ledger(lid)
                except NoSuchLedgerInMetadataError:
                    continue  # deleted while we listed
                if keep(md):
                    out.append(md)
            return out

        result: list[LedgerMetadata] = await self._blocking_meta(scan)
        return result

    async def read_metadata(self, ledger_id: int) -> LedgerMetadata:
        md: LedgerMetadata = await self._blocking_meta(self.metadata.read_ledger, ledger_id)
        return md

    def limbo_ledgers(self) -> list[int]:
        assert self.storage is not None
        return [
            lid for lid in self.storage.ledger_ids() if (i := self.storage.info(lid)) and i.limbo
        ]

    def holds_readable(self, ledger_id: int, entry_id: int) -> bool:
        """True when the entry is here and its bytes can be read back (not just indexed)."""
        assert self.storage is not None
        try:
            return self.storage.get(ledger_id, entry_id) is not None
        except BookieIOError:
            return False  # indexed, but its entry log is gone or damaged: copy it again

    def dropped_here(self, ledger_id: int) -> bool:
        """This bookie dropped the ledger (tombstones.py): there is nothing to repair."""
        assert self.storage is not None
        return self.storage.dropped(ledger_id)

    def store_repaired(self, ledger_id: int, entry_id: int, body: bytes, key: bytes) -> None:
        """Keep an entry copied from a peer (made durable by the repairer's next flush);
        not one of a ledger dropped while it was copied."""
        assert self.storage is not None
        if self.storage.dropped(ledger_id):
            return
        if self.storage.info(ledger_id) is None:
            self.storage.set_info(ledger_id, LedgerInfo(master_key=key.hex(), limbo=True))
        self.storage.put(ledger_id, entry_id, body)

    async def clear_limbo(self, ledger_ids: list[int]) -> None:
        assert self.storage is not None and self.journal is not None
        cleared: list[LedgerInfo] = []
        try:
            for lid in ledger_ids:
                info = self.storage.info(lid)
                if info is not None and info.limbo:
                    info.limbo = False
                    cleared.append(info)
                    self._journal_state(lid, info, wait=False)
            if cleared:
                await self.journal.sync()  # one wait for all (see Boot._phase_one)
        except BaseException:
            # Not known durable: still in limbo here too (its answers stay "unknown"), so
            # that the repair's next round clears it again rather than find nothing to do.
            for info in cleared:
                info.limbo = True
            raise

    def repair_finished(self) -> None:
        assert self.storage is not None
        self.storage.index.set_marker(REPAIR, False)

    async def _run_repair(self) -> None:
        try:
            await self.repairer.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            if self._state is BookieState.SERVING:
                log.exception(
                    "bookie %s: BP-46 repair failed; it resumes at next boot", self.bookie_id
                )

    def wait_repaired_nowait(self) -> bool:
        """True once no BP-46 repair is pending or running."""
        return self._repair_task is None or self._repair_task.done()
