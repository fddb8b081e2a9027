"""What the bookie's request parts share: its lifecycle states, and what they read of it.

The Bookie (embedlog/bookie/bookie.py) is put together from parts, each an object of its
own that gets what it needs and sees the bookie only through a narrow protocol:

    refusals.py       Refusals: how a request is refused or fails, the negatives it must
                      not give (over ``Served``)
    adds.py           Adds: the add path (ADD, ADD_BATCH, truncation)
    requests.py       Requests: the handler; reads, LAC, lists, cuts
    verdicts.py       whether a request is admitted: pure functions, table-tested
    flushing.py       Flusher: background flushes; read-only and back, over ``Flushed``
    ledgers.py        LedgerTable: per ledger, state records awaiting their fsync and
                      LAC long polls
    boot.py           ``boot``: a function returning what it found (BootReport)
    gc.py             GarbageCollector, over the bookie's ``Collectable`` protocol
    registration.py   Registration, over ``Registrant``
    repair_services.py  RepairServices: what BP-46 repair asks of the bookie's data, and
                      the repair task, over ``RepairHost``
    repair.py         Repairer (BP-46 phase two), over ``BookieForRepair``

The request parts read the bookie's storage and journal through ``Served`` rather than
hold them: the boot opens them after the parts exist, and a bookie object boots once.
"""

from __future__ import annotations

import asyncio
import enum
from typing import Protocol

from embedlog.bookie.index import LedgerInfo
from embedlog.bookie.journal import Journal
from embedlog.bookie.ledgers import LedgerTable
from embedlog.bookie.storage import LedgerStorage
from embedlog.bookie.verdicts import Mode


class BookieState(enum.Enum):
    NEW = "new"
    BOOTING = "booting"
    SERVING = "serving"
    STOPPED = "stopped"
    CRASHED = "crashed"


class Served(Protocol):
    """What the request parts (refusals.py, adds.py, requests.py) read of their bookie:
    what changes as it boots, serves, goes read-only, stops or crashes."""

    @property
    def bookie_id(self) -> str: ...

    @property
    def state(self) -> BookieState: ...

    @property
    def mode(self) -> Mode:
        """What the admission verdicts ask of the bookie as a whole (verdicts.py)."""
        ...

    @property
    def storage(self) -> LedgerStorage | None:
        """Set by the boot (as ``journal``)."""
        ...

    @property
    def journal(self) -> Journal | None: ...


def journal_state(
    bookie: Served, ledgers: LedgerTable, lid: int, info: LedgerInfo
) -> asyncio.Future[None]:
    """Set a ledger's state and journal it; the future resolves once it is durable."""
    storage, journal = bookie.storage, bookie.journal
    assert storage is not None and journal is not None
    return ledgers.journal_state(journal, storage, lid, info)
