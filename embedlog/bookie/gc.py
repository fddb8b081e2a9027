"""Garbage collection: a bookie drops what it holds of ledgers that were deleted.

``delete_ledger`` deletes a ledger's metadata, then asks each bookie of its ensembles to
drop its copy. A bookie that was down, unreachable or slow to answer keeps that copy,
and one that took the ledger's fence in BP-46 phase one without ever being in its
ensembles is not asked at all. Every ``gc_interval`` seconds each bookie compares the
ledgers it holds with the metadata's list and drops the ones whose metadata is gone,
as BookKeeper's garbage collector does (its scan-and-compare collector, with the
metadata verified before each deletion).

The list only nominates. A ledger is dropped only when the metadata store said, after
a sync, that the ledger's node does not exist (``MetadataClient.ledger_is_gone``) in
two rounds in a row. ZooKeeper serves reads from the server a bookie is connected to,
which may lag: a list or a read from a lagging server would miss a ledger created a
moment ago whose entries the bookie already acknowledged. The sync brings that server
up to date; the second round covers what a sync cannot (a deposed leader that has not
noticed yet answers for a while). Any other answer (an error, a lost connection, the
ledger found) keeps the ledger, and it must be confirmed twice again. Ledger ids are
never reused (the metadata store allocates them from a counter), so a ledger whose
metadata is gone is never written again by a client that follows the protocol; a
writer that still holds it is refused, since a dropped ledger leaves a tombstone
(tombstones.py), as a deletion does.
Restoring the metadata from a backup would make every ledger created since look
deleted: set ``gc_interval = 0`` on every bookie first (docs/ledgers.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable
from typing import Protocol

from embedlog.errors import MetadataError

log = logging.getLogger(__name__)


def unlisted(held: Iterable[int], listed: Iterable[int]) -> list[int]:
    """The ledgers a bookie holds that the metadata's list lacks: the candidates, each
    confirmed gone before anything is dropped. Sorted, so rounds go in id order."""
    return sorted(set(held) - set(listed))


def doomed(gone_now: Iterable[int], gone_before: Collection[int]) -> list[int]:
    """The ledgers to drop: confirmed gone in this round and in the one before."""
    return sorted(lid for lid in gone_now if lid in gone_before)


class Collectable(Protocol):
    """What garbage collection asks of its bookie (embedlog/bookie/bookie.py)."""

    @property
    def bookie_id(self) -> str: ...

    def held_ledgers(self) -> list[int] | None:
        """The ledgers it holds state of; None before its boot opened its storage."""
        ...

    async def listed_ledgers(self) -> list[int]:
        """The metadata's list of ledgers (MetadataError if it cannot be read)."""
        ...

    async def ledger_is_gone(self, ledger_id: int) -> bool:
        """The metadata store says, after a sync, that the ledger's node does not exist."""
        ...

    async def drop_ledgers(self, lids: Collection[int]) -> None: ...

    async def publish_status(self) -> None: ...


class GarbageCollector:
    def __init__(self, bookie: Collectable, interval: float) -> None:
        self.bookie = bookie
        self.interval = interval
        self.rounds = 0  # rounds that ran to the end
        self.collected = 0  # ledgers dropped, in all rounds
        self._gone_before: frozenset[int] = frozenset()  # confirmed gone last round

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
        """One round: drop every ledger confirmed gone in this round and the one before;
        returns their ids.

        MetadataError if the metadata could not be listed (nothing dropped, and the
        next round starts the confirmations over); a ledger whose confirmation fails is
        kept, and the round goes on with the others."""
        bookie = self.bookie
        # Held first, then listed: a ledger created in between is in the list, and one
        # created after the list was made is not held yet.
        held = bookie.held_ledgers()
        if held is None:
            return []
        self._gone_before, gone_before = frozenset(), self._gone_before
        listed = await bookie.listed_ledgers()
        gone_now = []
        for lid in unlisted(held, listed):
            try:
                if await bookie.ledger_is_gone(lid):
                    gone_now.append(lid)
            except MetadataError as exc:
                log.info("bookie %s: keeping ledger %s for now: %s", bookie.bookie_id, lid, exc)
        dropped = doomed(gone_now, gone_before)
        if dropped:
            await bookie.drop_ledgers(dropped)
        self._gone_before = frozenset(gone_now)
        self.rounds += 1
        self.collected += len(dropped)
        if dropped:
            log.info(
                "bookie %s: dropped %d deleted ledger(s): %s",
                bookie.bookie_id,
                len(dropped),
                ", ".join(map(str, dropped)),
            )
            await bookie.publish_status()  # what `embedlog bookie status` shows
        return dropped
