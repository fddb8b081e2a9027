"""What every part of a bookie shares: its lifecycle states, the state all parts read,
and the few helpers several parts call.

The Bookie (embedlog/bookie/bookie.py) is put together from one class per concept,
each in a module of its own and a subclass of the parts it calls:

    BookieBase                      base.py: the state every part shares
    Flushing(BookieBase)            flushing.py: background flushes; read-only and back
    Refusals(Flushing)              refusals.py: how a request is refused or fails
    Adds(Refusals)                  adds.py: the add path (ADD, ADD_BATCH, truncation)
    Requests(Adds)                  requests.py: the handler; reads, LAC, lists, cuts
    RepairServices(BookieBase)      repair_services.py: what BP-46 repair asks of it
    Boot(RepairServices, Flushing)  boot.py: boot, journal replay, BP-46 phase one
    Bookie(Requests, Boot)          bookie.py: construction, start, stop, crash, status

The journal's record formats are in records.py. A part declares the attributes it
owns (annotations only; Bookie.__init__ sets them all). Mixins rather than objects
that call each other: a call between parts stays a plain method call on the add path,
the bookie's hot path.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from typing import Any

from attrs import evolve

from embedlog.bookie import records
from embedlog.bookie.config import BookieConfig
from embedlog.bookie.disk import Disk
from embedlog.bookie.index import LedgerInfo
from embedlog.bookie.journal import Durable, Journal
from embedlog.bookie.storage import LedgerStorage
from embedlog.bookie.verdicts import Mode
from embedlog.clock import Clock
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.store import MetadataStore
from embedlog.metrics import BookieMetrics
from embedlog.runtime import settle


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
    _lac_changed: dict[int, asyncio.Event]  # READ_LAC long polls waiting, per ledger
    # Per ledger, the journal record of its newest state change until that record is
    # durable; kept failed if it never became durable (``_state_durable``).
    _unsynced_state: dict[int, asyncio.Future[None]]
    first_live: dict[int, int]  # see Bookie.__init__ (an unsafe switch's only)
    metrics: BookieMetrics  # counters and histograms operators watch (embedlog/metrics.py)

    @property
    def state(self) -> BookieState:
        return self._state

    @property
    def bookie_id(self) -> str:
        return self.config.bookie_id

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
        assert self.storage is not None
        self.storage.set_info(lid, info)
        fut = self._append_state(lid, records.state_record(lid, info))
        return fut if wait else None

    def _append_state(
        self, lid: int, record: bytes, then: Durable | None = None
    ) -> asyncio.Future[None]:
        """Journal a record that carries a ledger's state (``then`` called once it is
        durable) and keep it as the ledger's unsynced state until it is
        (``_state_durable``)."""
        assert self.journal is not None
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(lambda f: self._state_synced(lid, f))
        self._unsynced_state[lid] = fut
        done = settle(fut)

        def durable(exc: BaseException | None) -> None:
            done(exc)
            if then is not None:
                then(exc)

        try:
            self.journal.append_then(record, durable)
        except BaseException as exc:
            done(exc)  # the state in memory was never journaled: nothing may rely on it
            raise
        return fut

    def _state_synced(self, lid: int, fut: asyncio.Future[None]) -> None:
        # A record that failed stays: the state in memory is not durable and never will
        # be, so every request that would rely on it fails (EIO) until the bookie restarts.
        if not fut.cancelled() and fut.exception() is None and self._unsynced_state.get(lid) is fut:
            del self._unsynced_state[lid]

    async def _state_durable(self, lid: int) -> None:
        """Wait until the ledger's state in memory is durable; raise if it cannot be.

        The request that changes a fence or a term waits for its own record; another
        request that finds the change already made must wait for that same record before
        its answer relies on it: a recovery takes a fenced bookie's NoSuchEntry for a
        negative only because the old writer can never reach that bookie again, and a
        crash before the record is durable would let it.
        """
        fut = self._unsynced_state.get(lid)
        if fut is not None:
            await asyncio.shield(fut)

    def _notify_lac(self, ledger_id: int) -> None:
        ev = self._lac_changed.pop(ledger_id, None)
        if ev is not None:
            ev.set()

    async def _blocking_meta(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self.metadata.store.blocking_io:
            return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
        return fn(*args)
