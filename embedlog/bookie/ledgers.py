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
        # Per ledger, a future for each READ_LAC long poll waiting, in the order they came
        # (a dict for its order: the polls wake in that order).
        self._lac_waiters: dict[int, dict[asyncio.Future[bool], None]] = {}
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
        waiting = self.durable_wait(ledger_id)
        if waiting is not None:
            await waiting

    def durable_wait(self, ledger_id: int) -> asyncio.Future[None] | None:
        """``durable`` without a coroutine: a future to await (shielded: a waiter that
        gives up must not cancel the record), or None when the state is durable already."""
        record = self.unsynced(ledger_id)
        return None if record is None else asyncio.shield(record)

    # -- LAC long polls -----------------------------------------------------------------------

    def lac_waiter(self, ledger_id: int) -> asyncio.Future[bool]:
        """A future a long poll on the ledger's LAC awaits: True once the LAC moves (or the
        bookie goes); the poll completes it False when its time is up, and forgets it
        (``forget_waiter``). A plain future, not an Event's wait under ``wait_for``: on
        Python 3.11 that wraps the wait in a task, and the answer came three loop turns
        after the LAC moved instead of one."""
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._lac_waiters.setdefault(ledger_id, {})[waiter] = None
        return waiter

    def forget_waiter(self, ledger_id: int, waiter: asyncio.Future[bool]) -> None:
        waiters = self._lac_waiters.get(ledger_id)
        if waiters is not None:
            waiters.pop(waiter, None)
            if not waiters:
                del self._lac_waiters[ledger_id]

    def lac_moved(self, ledger_id: int) -> None:
        _wake(self._lac_waiters.pop(ledger_id, {}))

    def wake_all(self) -> None:
        """The bookie stops or crashes: every long poll ends now."""
        waiting, self._lac_waiters = self._lac_waiters, {}
        for waiters in waiting.values():
            _wake(waiters)


def _wake(waiters: dict[asyncio.Future[bool], None]) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(True)
