"""UnboundedLedger: the blocking public handle (API.md, "UnboundedLedger").

A handle is either the writer of one term (``create_unbounded``, or
``open_unbounded(takeover=True)``) or a follower (``takeover=False``) that reads and
tails without sending a term, so it never disturbs the writer. ``close()`` stops
writing and leaves the ledger OPEN: the stream goes on with whoever takes it over next.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Generator

from embedlog import validate
from embedlog.errors import InvalidTermError, LedgerClosedError, ReadPastLastConfirmedError
from embedlog.ledger.admission import entry_bytes
from embedlog.ledger.bookie_client import UNKNOWN_OUTCOMES
from embedlog.ledger.context import ClientContext
from embedlog.ledger.entries import Entry
from embedlog.ledger.handles import check_range
from embedlog.ledger.inbox import AddInbox
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.runtime import Runtime
from embedlog.unbounded import follow, layout
from embedlog.unbounded import trim as trimming
from embedlog.unbounded.writer import TermWriter
from embedlog.wire.entry import Digester, master_key

TAIL_BATCH = 256  # entries one tail step reads at most


class UnboundedLedger:
    def __init__(
        self,
        runtime: Runtime,
        ctx: ClientContext,
        md: LedgerMetadata,
        password: bytes,
        *,
        writer: TermWriter | None = None,
        lac: int = -1,
    ) -> None:
        self._runtime = runtime
        self._loop = runtime.loop
        self._inbox = AddInbox(runtime.loop)
        self._ctx = ctx
        self._md = md
        self._password = password
        self._key = master_key(password)
        self._digester = Digester(md.digest_type, password)
        self._writer = writer
        self._lac = lac
        self._closed = False

    # -- identity ----------------------------------------------------------------------------

    @property
    def ledger_id(self) -> int:
        return self._md.ledger_id

    @property
    def term(self) -> int:
        """The term this handle writes in (a follower: the term it last saw)."""
        return self._writer.term if self._writer is not None else self._md.term

    @property
    def is_writer(self) -> bool:
        return self._writer is not None

    @property
    def metadata(self) -> LedgerMetadata:
        return self._writer.md if self._writer is not None else self._md

    @property
    def last_add_confirmed(self) -> int:
        return self._writer.lac if self._writer is not None else self._lac

    @property
    def writer(self) -> TermWriter | None:
        """The term's writer (for tests and tools: LAFR, rollovers)."""
        return self._writer

    # -- appending ---------------------------------------------------------------------------

    def append_async(self, data: bytes, *, wait: bool = True) -> concurrent.futures.Future[int]:
        """Queue ``data``; the future gives its entry id once it (and all before it) is acked.

        Fails with InvalidTermError once another client took the ledger over. The entry
        size limit and the bound on appends in flight are add_async's (WriteHandle).
        """
        return self._append(data, wait, "call append_async(data) with wait=True")

    def _append(self, data: bytes, wait: bool, instead: str) -> concurrent.futures.Future[int]:
        writer, payload = self._appendable(data)
        size = len(payload)
        writer.budget.take(size, self._runtime, wait=wait, instead=instead)
        return self._submit(writer, payload, size)

    async def queue_aio(self, data: bytes) -> concurrent.futures.Future[int]:
        """``append_async`` for a coroutine on any event loop: awaits room (never blocks
        the loop) and returns the append's future without waiting for its acknowledgement."""
        writer, payload = self._appendable(data)
        await writer.budget.take_async(len(payload))
        return self._submit(writer, payload, len(payload))

    def _appendable(self, data: bytes) -> tuple[TermWriter, bytes]:
        payload = entry_bytes(data, self._ctx.max_entry_size, f"ledger {self.ledger_id}")
        writer = self._writer
        if writer is None:
            raise InvalidTermError(
                f"ledger {self.ledger_id} was opened with takeover=False: a follower holds "
                "no term and cannot append; open it with takeover=True to become the writer"
            )
        validate.check_open(self._runtime, self._ctx)
        if self._closed:
            raise LedgerClosedError(f"this handle of ledger {self.ledger_id} was closed")
        return writer, payload

    def _submit(
        self, writer: TermWriter, payload: bytes, size: int
    ) -> concurrent.futures.Future[int]:
        try:
            return self._inbox.submit(writer, payload, size)
        except BaseException:
            writer.budget.release(1, size)
            raise

    def append(self, data: bytes) -> int:
        return self.append_async(data).result()

    async def append_aio(self, data: bytes) -> int:
        """The asyncio flavour (call on the runtime loop): awaits room, like append_async."""
        if self._writer is None:
            raise InvalidTermError(f"ledger {self.ledger_id}: a follower cannot append")
        payload = entry_bytes(data, self._ctx.max_entry_size, f"ledger {self.ledger_id}")
        await self._writer.budget.take_async(len(payload))
        return await self._writer.add(payload, cost=len(payload))

    # -- reading -----------------------------------------------------------------------------

    def read(self, first: int, last: int) -> list[Entry]:
        """Entries first..last (at most the LAC), the no-op entries left out."""
        validate.check_open(self._runtime, self._ctx)
        return self._runtime.run(self.read_aio(first, last))

    async def read_aio(self, first: int, last: int) -> list[Entry]:
        validate.check_open(self._runtime, self._ctx)
        first, last = check_range(first, last)
        md, lac = await self._view()
        if last > lac:
            md, lac = await self._refresh()
        if last > lac:
            raise ReadPastLastConfirmedError(
                f"ledger {self.ledger_id}: entry {last} is past the last add confirmed {lac}"
            )
        return await follow.read_visible(self._ctx, md, self._digester, first, last)

    def read_last_add_confirmed(self) -> int:
        validate.check_open(self._runtime, self._ctx)
        return self._runtime.run(self._refresh())[1]

    async def _view(self) -> tuple[LedgerMetadata, int]:
        if self._writer is not None:
            return self._writer.md, self._writer.lac
        return self._md, self._lac

    async def _refresh(self) -> tuple[LedgerMetadata, int]:
        if self._writer is not None:
            return self._writer.md, self._writer.lac
        try:
            lac, md = await follow.wait_for_lac(self._ctx, self._md, self._lac, 0.0)
        except UNKNOWN_OUTCOMES:
            return self._md, self._lac
        self._md, self._lac = md, max(self._lac, lac)
        return self._md, self._lac

    def tail(self, start: int = 0, *, timeout: float | None = None) -> Generator[Entry, None, None]:
        """Follow the stream from ``start``: every entry (no-ops skipped) once confirmed.

        Waits with long-poll LAC reads; stops after ``timeout`` seconds without a new
        entry (None: never). Entries below the trim point are skipped.
        """
        # Checked here, not at the first next(): a bad argument fails the call that made it.
        validate.check_open(self._runtime, self._ctx)
        start = validate.whole_number(start, "start")
        timeout = validate.optional_seconds(timeout, "timeout")
        return self._tail(start, timeout)

    def _tail(self, start: int, timeout: float | None) -> Generator[Entry, None, None]:
        next_id = start
        idle_since = time.monotonic()
        while True:
            md, lac = self._runtime.run(self._view())
            next_id = max(next_id, layout.first_entry(md))
            if next_id <= lac:
                last = min(lac, next_id + TAIL_BATCH - 1)
                entries = self._runtime.run(
                    follow.read_visible(self._ctx, md, self._digester, next_id, last)
                )
                next_id = last + 1
                idle_since = time.monotonic()
                yield from entries
                continue
            wait = follow.POLL_SLICE
            if timeout is not None:
                left = timeout - (time.monotonic() - idle_since)
                if left <= 0:
                    return
                wait = min(wait, left)
            self._runtime.run(self._wait(next_id - 1, wait))

    async def _wait(self, previous: int, wait: float) -> None:
        writer = self._writer
        if writer is not None:
            # The writer knows its own LAC: wait for it to move (no request needed).
            deadline = time.monotonic() + wait
            while writer.lac <= previous and writer.error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                writer._progress.clear()
                try:
                    await asyncio.wait_for(writer._progress.wait(), left)
                except TimeoutError:
                    return
            return
        lac, md = await follow.wait_for_lac(self._ctx, self._md, previous, wait)
        self._md, self._lac = md, max(self._lac, lac)

    # -- trimming ----------------------------------------------------------------------------

    def trim(self, before_entry_id: int) -> None:
        """Delete the whole fragments that lie below ``before_entry_id`` (bookies and metadata)."""
        validate.check_open(self._runtime, self._ctx)
        self._runtime.run(self.trim_aio(before_entry_id))

    async def trim_aio(self, before_entry_id: int) -> None:
        validate.check_open(self._runtime, self._ctx)
        before_entry_id = validate.whole_number(before_entry_id, "before_entry_id")
        old, new = await trimming.trim(self._ctx, self.ledger_id, before_entry_id, self._key)
        writer = self._writer
        if writer is not None and writer.md.version == old.version and new is not old:
            writer.md = new  # else the writer's next CAS fails and it re-reads the trimmed one
        if writer is None and new.version >= self._md.version:
            self._md = new

    # -- closing -----------------------------------------------------------------------------

    def close(self) -> None:
        """Wait for the queued appends, tell the bookies the final LAC, stop writing.

        The ledger stays OPEN in this term: another client continues it by taking over.
        """
        if self._closed:
            return
        self._closed = True
        # A closed client (or stopped cluster) already stopped its writers: nothing to wait for.
        closed = self._runtime.closed_reason or self._ctx.closed_reason
        if self._writer is not None and closed is None:
            self._runtime.run(self._close_writer(self._writer))

    async def _close_writer(self, writer: TermWriter) -> None:
        await writer.drain()
        if writer.error is None and writer.lac >= 0:
            await asyncio.gather(
                *(writer._send_lac(b, writer.lac) for b in writer.md.last_fragment[1])
            )
        writer.stop()

    def __enter__(self) -> UnboundedLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
