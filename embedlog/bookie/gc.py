"""Garbage collection: a bookie drops what it holds of ledgers that were deleted.

``delete_ledger`` deletes a ledger's metadata, then asks each bookie of its ensembles to
drop its copy. A bookie that was down, unreachable or slow to answer keeps that copy,
and one that took the ledger's fence in BP-46 phase one without ever being in its
ensembles is not asked at all. Every ``gc_interval`` seconds each bookie compares the
ledgers it holds with the metadata's list and drops the ones whose metadata is gone,
as BookKeeper's garbage collector does (its scan-and-compare collector, with the
metadata verified before each deletion).

The list only nominates. A ledger is dropped only when the metadata store answers,
after a sync, that the ledger's node does not exist (``MetadataClient.ledger_is_gone``).
ZooKeeper serves reads from the server a bookie is connected to, which may lag: a list
or a read from a lagging server would miss a ledger created a moment ago whose entries
the bookie already acknowledged. Any other answer (an error, a lost connection, the
ledger found) keeps the ledger until the next round. Ledger ids are never reused (the
metadata store allocates them from a counter), so a ledger whose metadata is gone is
never written again by a client that follows the protocol.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from embedlog.errors import MetadataError

if TYPE_CHECKING:
    from embedlog.bookie.bookie import Bookie

log = logging.getLogger(__name__)


def unlisted(held: Iterable[int], listed: Iterable[int]) -> list[int]:
    """The ledgers a bookie holds that the metadata's list lacks: the candidates, each
    confirmed gone before anything is dropped. Sorted, so rounds go in id order."""
    return sorted(set(held) - set(listed))


class GarbageCollector:
    def __init__(self, bookie: Bookie, interval: float) -> None:
        self.bookie = bookie
        self.interval = interval
        self.rounds = 0  # rounds that ran to the end
        self.collected = 0  # ledgers dropped, in all rounds

    async def run(self) -> None:
        """Every ``interval`` seconds, one round; the first one interval after the boot
        (a booting bookie has enough to do). A round that fails waits for the next."""
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.collect()
            except MetadataError as exc:
                log.info("bookie %s: garbage collection waits: %s", self.bookie.bookie_id, exc)
            except Exception:
                log.exception("bookie %s: garbage collection failed", self.bookie.bookie_id)

    async def collect(self) -> list[int]:
        """One round: drop every ledger whose metadata is gone; returns their ids.

        MetadataError if the metadata could not be listed (nothing dropped); a ledger
        whose confirmation fails is kept, and the round goes on with the others."""
        bookie = self.bookie
        storage = bookie.storage
        if storage is None or bookie.journal is None:
            return []
        # Held first, then listed: a ledger created in between is in the list, and one
        # created after the list was made is not held yet.
        held = storage.ledger_ids()
        listed = await bookie._blocking_meta(lambda: list(bookie.metadata.list_ledgers()))
        dropped = []
        for lid in unlisted(held, listed):
            try:
                gone = await bookie._blocking_meta(bookie.metadata.ledger_is_gone, lid)
            except MetadataError as exc:
                log.info("bookie %s: keeping ledger %s for now: %s", bookie.bookie_id, lid, exc)
                continue
            if not gone:
                continue
            await bookie.drop_ledger(lid)
            dropped.append(lid)
        self.rounds += 1
        self.collected += len(dropped)
        if dropped:
            log.info(
                "bookie %s: dropped %d deleted ledger(s): %s",
                bookie.bookie_id,
                len(dropped),
                ", ".join(map(str, dropped)),
            )
        return dropped
