"""The client's view of the bookies: send one request, get one answer or an 'unknown'."""

from __future__ import annotations

import asyncio

from embedlog.errors import BKTimeoutError, BookieUnavailableError
from embedlog.transport.base import Then, Transport, next_txn
from embedlog.wire.messages import NO_TERM, OpCode, Request, Response

# Transport failures that say nothing about the bookie's state: the outcome is unknown.
UNKNOWN_OUTCOMES = (BKTimeoutError, BookieUnavailableError)


class BookieClient:
    def __init__(self, transport: Transport, name: str, request_timeout: float) -> None:
        self.transport = transport
        self.name = name
        self.request_timeout = request_timeout

    async def call(
        self,
        bookie_id: str,
        op: OpCode,
        ledger_id: int,
        entry_id: int = -1,
        *,
        flags: int = 0,
        term: int = NO_TERM,
        master_key: bytes = b"",
        body: bytes = b"",
        timeout_ms: int = 0,
        timeout: float | None = None,
        lafr: int = -1,
    ) -> Response:
        """One request; raises BKTimeoutError/BookieUnavailableError when the outcome is unknown."""
        req = Request(
            op, next_txn(), ledger_id, entry_id, flags, term, timeout_ms, master_key, body, lafr
        )
        wait = self.request_timeout if timeout is None else timeout
        return await self.transport.request(self.name, bookie_id, req, wait)

    def call_nowait(
        self,
        bookie_id: str,
        op: OpCode,
        ledger_id: int,
        entry_id: int = -1,
        *,
        flags: int = 0,
        term: int = NO_TERM,
        master_key: bytes = b"",
        then: Then | None = None,
    ) -> asyncio.Future[Response]:
        """``call`` as a future, without a coroutine or task per request (recovery's reads:
        ``then`` is called with it once answered, as in ``add_nowait``)."""
        req = Request(op, next_txn(), ledger_id, entry_id, flags, term, 0, master_key, b"", -1)
        return self.transport.send_nowait(self.name, bookie_id, req, self.request_timeout, then)

    def add_nowait(
        self,
        bookie_id: str,
        ledger_id: int,
        entry_id: int,
        *,
        flags: int,
        term: int,
        master_key: bytes,
        body: bytes,
        lafr: int = -1,
        then: Then | None = None,
    ) -> asyncio.Future[Response]:
        """An ADD as a future (the writer's hot path: no coroutine per request); ``then``
        is called with it once answered (``Transport.send_nowait``)."""
        return self._send_add(
            OpCode.ADD, bookie_id, ledger_id, entry_id, flags, term, master_key, body, lafr, then
        )

    def add_batch_nowait(
        self,
        bookie_id: str,
        ledger_id: int,
        first_entry_id: int,
        body: bytes,
        *,
        flags: int,
        term: int,
        master_key: bytes,
        lafr: int = -1,
        then: Then | None = None,
    ) -> asyncio.Future[Response]:
        """Entries in one ADD_BATCH request (``body``: as ``pack_entries`` frames them); the
        answer holds one result per entry, in the same order."""
        return self._send_add(
            OpCode.ADD_BATCH,
            bookie_id,
            ledger_id,
            first_entry_id,
            flags,
            term,
            master_key,
            body,
            lafr,
            then,
        )

    def _send_add(
        self,
        op: OpCode,
        bookie_id: str,
        ledger_id: int,
        entry_id: int,
        flags: int,
        term: int,
        master_key: bytes,
        body: bytes,
        lafr: int,
        then: Then | None,
    ) -> asyncio.Future[Response]:
        req = Request(op, next_txn(), ledger_id, entry_id, flags, term, 0, master_key, body, lafr)
        return self.transport.send_nowait(self.name, bookie_id, req, self.request_timeout, then)

    def can_batch(self) -> bool:
        """Whether adds may share requests: not while network faults are configured, so
        that a lost request (``drop_next("add")``) means exactly one entry, as in tests."""
        faults = getattr(self.transport, "faults", None)
        return faults is None or not faults.active
