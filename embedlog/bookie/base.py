"""What every part of a bookie shares: its lifecycle states, the state all parts read,
and the few helpers several parts call.

The Bookie (embedlog/bookie/bookie.py) is put together from one class per concept,
each in a module of its own and a subclass of the parts it calls:

    BookieBase                      base.py: the state every part shares
    Refusals(BookieBase)            refusals.py: how a request is refused or fails
    Adds(Refusals)                  adds.py: the add path (ADD, ADD_BATCH, truncation)
    Requests(Adds)                  requests.py: the handler; reads, LAC, lists, cuts
    Bookie(Requests)                bookie.py: construction, start, stop, crash, status

and from objects and functions it holds or calls, each seeing only what it needs:

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

The journal's record formats are in records.py. A part declares the attributes it
owns (annotations only; Bookie.__init__ sets them all). Mixins rather than objects
that call each other on the request paths: a call between them stays a plain method
call on the add path, the bookie's hot path.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from typing import Any

from attrs import evolve

from embedlog.bookie.config import BookieConfig
from embedlog.bookie.disk import Disk
from embedlog.bookie.flushing import Flusher
from embedlog.bookie.index import LedgerInfo
from embedlog.bookie.journal import Durable, Journal
from embedlog.bookie.ledgers import LedgerTable
from embedlog.bookie.storage import LedgerStorage
from embedlog.bookie.verdicts import Mode
from embedlog.clock import Clock
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.store import MetadataStore
from embedlog.metrics import BookieMetrics


class BookieState(enum.Enum):
    NEW = "new"
    BOOTING = "booting"
    SERVING = "serving"
    STOPPED = "stopped"
    CRASHED = "crashed"


class BookieBase:
    config: BookieConfig
    metadata: MetadataClient
    session: MetadataStore  # the bookie's registration lives as long as this session
    clock: Clock  # where the bookie reads the time (embedlog/clock.py)
    disk: Disk  # every file the bookie touches, through this (embedlog/bookie/disk.py)
    _state: BookieState
    mode: Mode  # what the admission verdicts ask of the bookie as a whole (verdicts.py)
    storage: LedgerStorage | None  # both set by the boot
    journal: Journal | None
    # Per ledger in memory: state records awaiting their fsync, LAC long polls (ledgers.py)
    ledgers: LedgerTable
    flusher: Flusher  # background flushes; read-only and back (flushing.py)
    metrics: BookieMetrics  # counters and histograms operators watch (embedlog/metrics.py)

    @property
    def state(self) -> BookieState:
        return self._state

    @property
    def bookie_id(self) -> str:
        return self.config.bookie_id

    @property
    def serving(self) -> bool:
        return self._state is BookieState.SERVING

    @property
    def readonly(self) -> bool:
        """Refuses adds with EREADONLY (configured, or a disk that failed)."""
        return self.mode.readonly

    @readonly.setter
    def readonly(self, value: bool) -> None:
        if value != self.mode.readonly:
            self.mode = evolve(self.mode, readonly=value)

    def _journal_state(
        self, lid: int, info: LedgerInfo, *, wait: bool
    ) -> asyncio.Future[None] | None:
        """Set a ledger's state and journal it; with ``wait``, a future for its fsync."""
        assert self.storage is not None and self.journal is not None
        fut = self.ledgers.journal_state(self.journal, self.storage, lid, info)
        return fut if wait else None

    def _append_state(
        self, lid: int, record: bytes, then: Durable | None = None
    ) -> asyncio.Future[None]:
        """``LedgerTable.append_state`` on this bookie's journal."""
        assert self.journal is not None
        return self.ledgers.append_state(self.journal, lid, record, then)

    async def call_metadata(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, on a thread if the metadata store blocks (ZooKeeper's does)."""
        if self.metadata.store.blocking_io:
            return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
        return fn(*args)
