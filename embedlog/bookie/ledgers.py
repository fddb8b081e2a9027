"""What a bookie keeps per ledger in memory beside the ledger's stored state
(``LedgerInfo``, in storage.py): the journal record of the ledger's newest state change
until it is durable, and the READ_LAC long polls waiting for its LAC to move.

The bookie's parts meet here rather than in dictionaries of their own on the bookie: the
add path and the requests that change a ledger's state (fence, term, limbo) record what
is not durable yet, and every request whose answer relies on that state waits for it;
adds and WRITE_LAC wake the long polls. Tests: tests/bookie/test_ledger_table.py.
"""

from __future__ import annotations

import asyncio

from embedlog.bookie import records
from embedlog.bookie.index import LedgerInfo
from embedlog.bookie.journal import Durable, Journal
from embedlog.bookie.storage import LedgerStorage
from embedlog.runtime import settle


class LedgerTable:
    def __init__(self) -> None:
        # Per ledger, the journal record of its newest state change until that record is
        # durable; kept failed if it never became durable (``durable``).
        self._unsynced: dict[int, asyncio.Future[None]] = {}
        self._lac_changed: dict[int, asyncio.Event] = {}  # READ_LAC long polls waiting
        # Limbo ledger -> the first entry a writer sent after this boot (kept only under
        # the bookie setting unsafe_limbo_clears_at_first_resend; repair.py reads it).
        self.first_live: dict[int, int] = {}

    # -- state records awaiting their fsync ---------------------------------------------------

    def journal_state(
        self, journal: Journal, storage: LedgerStorage, ledger_id: int, info: LedgerInfo
    ) -> asyncio.Future[None]:
        """Set a ledger's state and journal it; the future resolves once it is durable."""
        storage.set_info(ledger_id, info)
        return self.append_state(journal, ledger_id, records.state_record(ledger_id, info))

    def append_state(
        self, journal: Journal, ledger_id: int, record: bytes, then: Durable | None = None
    ) -> asyncio.Future[None]:
        """Journal a record that carries a ledger's state (``then`` called once it is
        durable) and keep it as the ledger's unsynced state until it is (``durable``)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.journaled(ledger_id, fut)
        done = settle(fut)

        def durable(exc: BaseException | None) -> None:
            done(exc)
            if then is not None:
                then(exc)

        try:
            journal.append_then(record, durable)
        except BaseException as exc:
            done(exc)  # the state in memory was never journaled: nothing may rely on it
            raise
        return fut

    def journaled(self, ledger_id: int, record: asyncio.Future[None]) -> None:
        """``record`` resolves once the journal record of the ledger's newest state change
        is durable: until then (or for good, if it fails) requests wait on it."""
        record.add_done_callback(lambda f: self._synced(ledger_id, f))
        self._unsynced[ledger_id] = record

    def _synced(self, ledger_id: int, record: asyncio.Future[None]) -> None:
        # A record that failed stays: the state in memory is not durable and never will
        # be, so every request that would rely on it fails (EIO) until the bookie restarts.
        if (
            not record.cancelled()
            and record.exception() is None
            and self._unsynced.get(ledger_id) is record
        ):
            del self._unsynced[ledger_id]

    def unsynced(self, ledger_id: int) -> asyncio.Future[None] | None:
        """The record the ledger's state in memory waits for; None when it is durable."""
        return self._unsynced.get(ledger_id)

    async def durable(self, ledger_id: int) -> None:
        """Wait until the ledger's state in memory is durable; raise if it cannot be.

        The request that changes a fence or a term waits for its own record; another
        request that finds the change already made must wait for that same record before
        its answer relies on it: a recovery takes a fenced bookie's NoSuchEntry for a
        negative only because the old writer can never reach that bookie again, and a
        crash before the record is durable would let it.
        """
        record = self._unsynced.get(ledger_id)
        if record is not None:
            await asyncio.shield(record)

    # -- LAC long polls -----------------------------------------------------------------------

    def lac_changed(self, ledger_id: int) -> asyncio.Event:
        """The event a long poll on the ledger's LAC waits for (set once it moves)."""
        event = self._lac_changed.get(ledger_id)
        if event is None:
            event = self._lac_changed[ledger_id] = asyncio.Event()
        return event

    def lac_moved(self, ledger_id: int) -> None:
        event = self._lac_changed.pop(ledger_id, None)
        if event is not None:
            event.set()

    def wake_all(self) -> None:
        """The bookie stops or crashes: every long poll ends now."""
        for event in self._lac_changed.values():
            event.set()
