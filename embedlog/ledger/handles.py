"""WriteHandle and ReadHandle: the blocking public API over the async ledger core."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator

from embedlog import validate
from embedlog.errors import BKError, ReadPastLastConfirmedError
from embedlog.ledger.admission import entry_bytes
from embedlog.ledger.batch_reads import read_range
from embedlog.ledger.batches import batched
from embedlog.ledger.context import ClientContext
from embedlog.ledger.entries import Entry
from embedlog.ledger.inbox import AddInbox
from embedlog.ledger.reader import read_lac
from embedlog.ledger.writer import LedgerWriter
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.runtime import Runtime
from embedlog.wire.entry import Digester


def check_range(first: int, last: int) -> tuple[int, int]:
    return validate.entry_range(first, last)


async def read_entries(
    ctx: ClientContext, md: LedgerMetadata, digester: Digester, first: int, last: int
) -> list[Entry]:
    rows = await read_range(ctx, md, digester, first, last)
    return [Entry(md.ledger_id, eid, bytes(payload)) for eid, _hdr, payload in rows]


class WriteHandle:
    """A ledger this client created and writes (single writer)."""

    def __init__(self, runtime: Runtime, ctx: ClientContext, writer: LedgerWriter) -> None:
        self._runtime = runtime
        self._ctx = ctx
        self._writer = writer
        self._inbox = AddInbox(runtime.loop)

    @property
    def ledger_id(self) -> int:
        return self._writer.md.ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        return self._writer.md

    @property
    def last_add_confirmed(self) -> int:
        return self._writer.lac

    def add_async(self, data: bytes, *, wait: bool = True) -> concurrent.futures.Future[int]:
        """Queue ``data``; the future gives its entry id once it (and all before it) is acked.

        Raises EntryTooLargeError above the client's ``max_entry_size``. With the handle's
        bound of adds in flight reached (``max_adds_in_flight``, ``max_bytes_in_flight``),
        waits for room, at most ``max_block_seconds``, then raises
        TooManyAddsInFlightError; ``wait=False`` raises at once instead of waiting.
        """
        return self._add(data, wait, "call add_async(data) with wait=True")

    def _add(self, data: bytes, wait: bool, instead: str) -> concurrent.futures.Future[int]:
        payload = entry_bytes(data, self._ctx.max_entry_size, f"ledger {self.ledger_id}")
        validate.check_open(self._runtime, self._ctx)
        size = len(payload)
        self._writer.budget.take(size, self._runtime, wait=wait, instead=instead)
        return self._submit(payload, size)

    async def queue_aio(self, data: bytes) -> concurrent.futures.Future[int]:
        """``add_async`` for a coroutine on any event loop: awaits room (never blocks the
        loop) and returns the add's future without waiting for its acknowledgement."""
        payload = entry_bytes(data, self._ctx.max_entry_size, f"ledger {self.ledger_id}")
        size = len(payload)
        await self._writer.budget.take_async(size)
        return self._submit(payload, size)

    def _submit(self, payload: bytes, size: int) -> concurrent.futures.Future[int]:
        try:
            return self._inbox.submit(self._writer, payload, size)
        except BaseException:
            self._writer.budget.release(1, size)
            raise

    def add(self, data: bytes) -> int:
        return self.add_async(data).result()

    async def add_aio(self, data: bytes) -> int:
        """The asyncio flavour (call on the runtime loop): awaits room, like add_async."""
        payload = entry_bytes(data, self._ctx.max_entry_size, f"ledger {self.ledger_id}")
        await self._writer.budget.take_async(len(payload))
        return await self._writer.add(payload, cost=len(payload))

    def close(self) -> None:
        validate.check_open(self._runtime, self._ctx)
        self._runtime.run(self._writer.close())

    def read(self, first: int, last: int) -> list[Entry]:
        validate.check_open(self._runtime, self._ctx)
        first, last = check_range(first, last)
        lac = self._writer.lac
        if last > lac:
            raise ReadPastLastConfirmedError(
                f"ledger {self.ledger_id}: entry {last} is past the last add confirmed {lac}"
            )
        return self._runtime.run(
            read_entries(self._ctx, self._writer.md, self._writer.digester, first, last)
        )

    def __enter__(self) -> WriteHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._writer.error is None:
            try:
                self.close()
            except BKError:
                if exc[0] is None:
                    raise


class ReadHandle:
    """An opened ledger: closed (after recovery) or followed up to its LAC."""

    def __init__(
        self, runtime: Runtime, ctx: ClientContext, md: LedgerMetadata, password: bytes, lac: int
    ) -> None:
        self._runtime = runtime
        self._ctx = ctx
        self._md = md
        self._digester = Digester(md.digest_type, password)
        self._lac = md.last_entry_id if md.is_closed else lac

    @property
    def ledger_id(self) -> int:
        return self._md.ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        return self._md

    @property
    def is_closed(self) -> bool:
        return self._md.is_closed

    @property
    def last_add_confirmed(self) -> int:
        return self._lac

    def read_last_add_confirmed(self) -> int:
        """Ask the bookies (and the metadata, which may have closed meanwhile)."""
        validate.check_open(self._runtime, self._ctx)
        return self._runtime.run(self._refresh())

    async def _refresh(self, *, timeout_ms: int = 0) -> int:
        if not self._md.is_closed:
            md = await self._ctx.meta(self._ctx.metadata.read_ledger, self.ledger_id)
            self._md = md
            if md.is_closed:
                self._lac = md.last_entry_id
                return self._lac
            lac = await read_lac(self._ctx, md, timeout_ms=timeout_ms, previous=self._lac)
            self._lac = max(self._lac, lac)
        return self._lac

    def read(self, first: int, last: int) -> list[Entry]:
        validate.check_open(self._runtime, self._ctx)
        return self._runtime.run(self.read_aio(first, last))

    async def read_aio(self, first: int, last: int) -> list[Entry]:
        validate.check_open(self._runtime, self._ctx)
        first, last = check_range(first, last)
        if last > self._lac and not self._md.is_closed:
            await self._refresh()
        if last > self._lac:
            what = "last entry" if self._md.is_closed else "last add confirmed"
            raise ReadPastLastConfirmedError(
                f"ledger {self.ledger_id}: entry {last} is past the {what} {self._lac}"
            )
        return await read_entries(self._ctx, self._md, self._digester, first, last)

    def entries(self, first: int = 0, last: int | None = None) -> Iterator[Entry]:
        """Entries first..last (None: up to the LAC as known now), read lazily in batches."""
        validate.check_open(self._runtime, self._ctx)
        if last is None:
            if not self._md.is_closed:
                self.read_last_add_confirmed()
            last = self._lac
        first = validate.whole_number(first, "first")
        if last < first:
            return iter(())
        self._runtime.run(self.read_aio(last, last))  # past the LAC: raises now, not later
        return batched(self._runtime, self.read_aio, first, last)

    def close(self) -> None:
        """Nothing to release; kept for symmetry with WriteHandle."""

    def __enter__(self) -> ReadHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
