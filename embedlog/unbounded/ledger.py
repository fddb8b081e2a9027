"""UnboundedLedger: the blocking public handle (API.md, "UnboundedLedger").

A handle is either the writer of one term (``create_unbounded``, or
``open_unbounded(takeover=True)``) or a follower (``takeover=False``) that reads and
tails without sending a term, so it never disturbs the writer. ``close()`` stops
writing and leaves the ledger OPEN: the stream goes on with whoever takes it over next.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from embedlog import validate
from embedlog.errors import (
    InvalidTermError,
    LedgerClosedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    ReadPastLastConfirmedError,
)
from embedlog.ledger.batch_reads import Row
from embedlog.ledger.batches import batched
from embedlog.ledger.bookie_client import UNKNOWN_OUTCOMES
from embedlog.ledger.context import ClientContext
from embedlog.ledger.entries import Entry
from embedlog.ledger.future import new_future
from embedlog.ledger.handles import check_range
from embedlog.ledger.inbox import AddInbox
from embedlog.metadata import streams
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.runtime import Runtime
from embedlog.unbounded import follow, layout, positions
from embedlog.unbounded import trim as trimming
from embedlog.unbounded.appending import Prepared, StreamAppends, prepare
from embedlog.unbounded.own_tail import OwnTailWait
from embedlog.unbounded.tailing import AsyncTail, Tail, TailCursor
from embedlog.unbounded.writer import TermWriter
from embedlog.wire.entry import Digester, master_key

START_WORDS = ("earliest", "latest")


T = TypeVar("T")


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
        fresh: bool = False,
    ) -> None:
        """``fresh``: the stream was just created (no earlier term appended a msg_id)."""
        self._runtime = runtime
        self._loop = runtime.loop
        self._inbox = AddInbox(runtime.loop)
        self._ctx = ctx
        self._md = md
        self._password = password
        self._key = master_key(password)
        self._digester = Digester(md.digest_type, password)
        self._writer = writer
        self._appends = (
            None
            if writer is None
            else StreamAppends(
                ctx, writer, self._digester, dedup_window=layout.dedup_window(md), fresh=fresh
            )
        )
        self._lac = lac
        self._closed = False
        # Called on the loop once this handle is closed: the steps of its tails under way.
        self._on_close: set[Callable[[], None]] = set()
        self._own_wait = OwnTailWait(ctx, md.ledger_id)

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

    def append_async(
        self,
        data: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        timestamp: float | None = None,
        msg_id: str | bytes | None = None,
        wait: bool = True,
    ) -> concurrent.futures.Future[int]:
        """Queue a record; the future gives its entry id once it (and all before it) is acked.

        ``timestamp``: seconds since the epoch (default: the writer's clock, kept to the
        microsecond); ``key``: bytes or None; ``headers``: str -> bytes. ``msg_id``: an
        append whose id the stream took within its dedup window returns that entry's id
        and appends nothing, across takeovers too (docs/unbounded.md, "Records").
        Fails with InvalidTermError once another client took the ledger over. The entry
        size limit and the bound on appends in flight are add_async's (WriteHandle); a
        record's envelope counts toward both.
        """
        instead = "call append_async(data) with wait=True"
        return self.append_record(data, key, headers, timestamp, msg_id, wait, instead)

    def append_record(
        self,
        data: object,
        key: object,
        headers: object,
        timestamp: object,
        msg_id: object,
        wait: bool,
        instead: str,
    ) -> concurrent.futures.Future[int]:
        """``append_async`` with what TooManyAddsInFlightError suggests ``instead``."""
        appends, prepared = self._prepared(data, key, headers, timestamp, msg_id)
        appends.budget.take(prepared.cost, self._runtime, wait=wait, instead=instead)
        return self._submit(appends, prepared, recheck=False)

    def append(
        self,
        data: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        timestamp: float | None = None,
        msg_id: str | bytes | None = None,
    ) -> int:
        """``append_async(...).result()``: the record's entry id once acknowledged."""
        return self.append_async(
            data, key=key, headers=headers, timestamp=timestamp, msg_id=msg_id
        ).result()

    async def queue_aio(
        self,
        data: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        timestamp: float | None = None,
        msg_id: str | bytes | None = None,
    ) -> concurrent.futures.Future[int]:
        """``append_async`` for a coroutine on any event loop: awaits room (never blocks
        the loop) and returns the append's future without waiting for its acknowledgement."""
        appends, prepared = self._prepared(data, key, headers, timestamp, msg_id)
        await appends.budget.take_async(prepared.cost)
        return self._submit(appends, prepared, recheck=True)  # it may have closed meanwhile

    async def append_aio(
        self,
        data: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        timestamp: float | None = None,
        msg_id: str | bytes | None = None,
    ) -> int:
        """The asyncio flavour (call on the runtime loop): awaits room, like append_async."""
        appends, prepared = self._prepared(data, key, headers, timestamp, msg_id)
        size = prepared.cost
        await appends.budget.take_async(size)
        future: concurrent.futures.Future[int] = new_future()
        future.set_running_or_notify_cancel()
        appends.add_to(future, prepared.payload, cost=size, msg_id=prepared.msg_id)
        return await asyncio.wrap_future(future)

    def _prepared(
        self, data: object, key: object, headers: object, timestamp: object, msg_id: object
    ) -> tuple[StreamAppends, Prepared]:
        """The writer's appends (the handle checked once: this is every append's path)
        and the record packed for them."""
        appends = self._appends_or_raise()
        if msg_id is not None:
            appends.check_msg_id()
        return appends, prepare(self._ctx, data, key, headers, timestamp, msg_id, self.ledger_id)

    def _appends_or_raise(self) -> StreamAppends:
        appends = self._appends
        if appends is None:
            raise InvalidTermError(
                f"ledger {self.ledger_id} was opened with takeover=False: a follower holds "
                "no term and cannot append; open it with takeover=True to become the writer"
            )
        validate.check_open(self._runtime, self._ctx)
        if self._closed:
            raise LedgerClosedError(f"this handle of ledger {self.ledger_id} was closed")
        return appends

    def _submit(
        self, appends: StreamAppends, prepared: Prepared, *, recheck: bool
    ) -> concurrent.futures.Future[int]:
        """Queue a prepared append whose room in the budget was taken (given back if it
        cannot be queued); ``recheck``: the handle may have closed since it was checked."""
        try:
            if recheck:
                self._appends_or_raise()
            return self._inbox.submit(appends, prepared.payload, prepared.cost, prepared.msg_id)
        except BaseException:
            appends.budget.release(1, prepared.cost)
            raise

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
            md, lac = await self.refresh_aio()
        if last > lac:
            raise ReadPastLastConfirmedError(
                f"ledger {self.ledger_id}: entry {last} is past the last add confirmed {lac}"
            )
        try:
            return await follow.read_visible(self._ctx, md, self._digester, first, last)
        except (NoSuchEntryError, NoSuchLedgerError):
            await follow.current_metadata(self._ctx, self.ledger_id)  # deleted: say so
            raise

    def entries(self, first: int = 0, last: int | None = None) -> Iterator[Entry]:
        """Entries first..last (None: up to the LAC as known now), no-ops left out, read
        lazily in batches. Below the trim point raises NoSuchEntryError, as ``read`` does."""
        validate.check_open(self._runtime, self._ctx)
        if last is None:
            last = self.read_last_add_confirmed()
        first = validate.whole_number(first, "first")
        if last < first:
            return iter(())
        self._runtime.run(self.read_aio(last, last))  # past the LAC: raises now, not later
        return batched(self._runtime, self.read_aio, first, last)

    def read_last_add_confirmed(self) -> int:
        validate.check_open(self._runtime, self._ctx)
        return self._runtime.run(self.refresh_aio())[1]

    async def _view(self) -> tuple[LedgerMetadata, int]:
        if self._writer is not None:
            return self._writer.md, self._writer.lac
        return self._md, self._lac

    async def refresh_aio(self) -> tuple[LedgerMetadata, int]:
        """The metadata and LAC, a follower's LAC read from the bookies first."""
        if self._writer is not None:
            return self._writer.md, self._writer.lac
        try:
            lac, md = await follow.wait_for_lac(self._ctx, self._md, self._lac, 0.0)
        except UNKNOWN_OUTCOMES:
            return self._md, self._lac
        self._keep_view(md, lac)
        return self._md, self._lac

    def _keep_view(self, md: LedgerMetadata, lac: int) -> None:
        """A follower's view after one of its LAC reads: ``md`` was read after ``lac`` was
        seen. Another user of this handle (a second tail, a read) may have kept a newer
        version meanwhile, read after a LAC of its own: the newest version stands, never
        an older one under a higher LAC (entries would be placed by metadata read before
        the LAC that made them visible)."""
        if md.version >= self._md.version:
            self._md = md
        self._lac = max(self._lac, lac)

    def tail(
        self, start: int | str = 0, *, timeout: float | None = None, cursor: str | None = None
    ) -> Tail:
        """Follow the stream from ``start``: every entry (no-ops skipped) once confirmed.

        ``start``: an entry id, ``"earliest"`` (the first entry still kept) or
        ``"latest"`` (only entries confirmed after the tail was made: LAC + 1). Waits with
        long-poll LAC reads; stops after ``timeout`` seconds without a new entry (None:
        never), or when the tail or this handle is closed. Entries below the trim point
        are skipped (the tail's ``skipped`` counts them). ``cursor``: start after that
        cursor's committed position instead (at the trim point if it has none).
        """
        tail_cursor = self._tail_cursor(start, timeout, cursor)
        # Known before the first entry: ``tail.position`` says where it starts.
        self._runtime.run(tail_cursor.resolve_start())
        return Tail(tail_cursor)

    def tail_async_iterator(
        self, start: int | str = 0, *, timeout: float | None = None, cursor: str | None = None
    ) -> AsyncTail:
        """``tail`` for a coroutine on any event loop (``embedlog.aio`` uses it); a
        ``cursor``, ``"earliest"`` or ``"latest"`` is looked up at its first step."""
        return AsyncTail(self._tail_cursor(start, timeout, cursor))

    def _tail_cursor(
        self, start: int | str, timeout: float | None, cursor: str | None
    ) -> TailCursor:
        # Checked here, not at the first next(): a bad argument fails the call that made it.
        self._check_usable("tail()")
        word = start if isinstance(start, str) else None
        if word is not None and word not in START_WORDS:
            raise TypeError(
                f"start must be a whole number (an entry id), 'earliest' or 'latest', not {word!r}"
            )
        first = 0 if word is not None else validate.whole_number(start, "start")
        timeout = validate.optional_seconds(timeout, "timeout")
        if cursor is not None:
            cursor = streams.check_name(cursor, "cursor")
            if start != 0:
                raise ValueError("pass start or cursor to tail(), not both")
        return TailCursor(self, first, timeout, cursor, word)

    async def start_position(self, word: str) -> int:
        """Where ``tail(start=word)`` starts (positions.py)."""
        return await positions.start_position(self, word)

    def first_entry_id(self) -> int:
        """The first entry id still kept (below it everything was trimmed); LAC + 1 when
        the stream keeps no entry."""
        validate.check_open(self._runtime, self._ctx)
        return self._runtime.run(self.first_entry_id_aio())

    async def first_entry_id_aio(self) -> int:
        return await positions.first_entry_id(self)

    def entry_id_at(self, timestamp: float) -> int:
        """The first entry whose timestamp is at or after ``timestamp`` (seconds since the
        epoch); LAC + 1 when none is. About log2(entries kept) small reads, no scan:
        embedlog/unbounded/seek.py says what "first" means when appends set timestamps
        that go backwards."""
        validate.check_open(self._runtime, self._ctx)
        t = validate.timestamp(timestamp, "timestamp")
        return self._runtime.run(self.entry_id_at_aio(t))

    async def entry_id_at_aio(self, timestamp: float) -> int:
        return await positions.entry_id_at(self, timestamp)

    async def cursor_start(self, cursor: str) -> int:
        """Where a tail of ``cursor`` starts (positions.py)."""
        return await positions.cursor_start(self, cursor)

    # -- cursors: consumer positions kept in the metadata store ------------------------------

    def commit(self, cursor: str, entry_id: int, *, force: bool = False) -> None:
        """Store ``entry_id`` as the position of consumer ``cursor`` (the last entry it is
        done with), durably in the metadata store; ``tail(cursor=...)`` resumes after it.

        A position below the committed one raises CursorRewindError unless ``force``.
        An entry id above the last add confirmed raises ValueError (nothing there was read).
        """
        self._check_usable("commit()")
        cursor = streams.check_name(cursor, "cursor")
        entry_id = validate.whole_number(entry_id, "entry_id", minimum=-1)
        force = validate.flag(force, "force")
        self._runtime.run(self.commit_aio(cursor, entry_id, force=force))

    async def commit_aio(self, cursor: str, entry_id: int, *, force: bool = False) -> None:
        await positions.commit(self, self._key, cursor, entry_id, force)

    def cursors(self) -> dict[str, int]:
        """Every cursor of this stream: name -> committed entry id (LedgerDeletedError
        once the stream was deleted, as for every other call)."""
        validate.check_open(self._runtime, self._ctx)
        store = self._ctx.metadata.store
        return self._runtime.run(self._stream_call(streams.cursors, store, self.ledger_id))

    def delete_cursor(self, cursor: str) -> None:
        """Forget cursor ``cursor`` (nothing happens if it has no position)."""
        self._check_usable("delete_cursor()")
        cursor = streams.check_name(cursor, "cursor")
        store = self._ctx.metadata.store
        self._runtime.run(self._stream_call(streams.delete_cursor, store, self.ledger_id, cursor))

    async def _stream_call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn`` on the metadata store, then LedgerDeletedError if the stream is gone (a
        deleted stream has no cursors to list or forget)."""
        out = await self._ctx.meta(fn, *args)
        await follow.current_metadata(self._ctx, self.ledger_id)
        return out

    # -- what a tail needs (on the runtime loop) ---------------------------------------------

    @property
    def runtime(self) -> Runtime:
        return self._runtime

    @property
    def ctx(self) -> ClientContext:
        return self._ctx

    @property
    def digester(self) -> Digester:
        return self._digester

    def check_open(self) -> None:
        validate.check_open(self._runtime, self._ctx)

    def _check_usable(self, what: str) -> None:
        """A closed handle still reads what is stored; it follows, commits and trims no
        more (as a closed Kafka consumer refuses them)."""
        validate.check_open(self._runtime, self._ctx)
        if self._closed:
            raise LedgerClosedError(
                f"this handle of ledger {self.ledger_id} was closed: {what} needs an open "
                "handle; open the stream again (open_unbounded)"
            )

    async def view(self) -> tuple[LedgerMetadata, int]:
        return await self._view()

    async def reread_metadata(self) -> LedgerMetadata:
        """The metadata as the store has it now (a follower keeps it)."""
        md = await follow.current_metadata(self._ctx, self.ledger_id)
        if self._writer is None and md.version >= self._md.version:
            self._md = md
        return md

    def on_close(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` on the loop once this handle is closed (soon, if it is now);
        returns what forgets it. On the loop."""
        if self._closed:
            return asyncio.get_running_loop().call_soon(callback).cancel
        self._on_close.add(callback)
        return lambda: self._on_close.discard(callback)

    def _closed_now(self) -> None:
        for callback in list(self._on_close):
            callback()

    async def wait_past(self, previous: int, wait: float, batch: int = 0) -> list[Row] | None:
        """Wait up to ``wait`` seconds for the LAC to pass ``previous``; with ``batch``, a
        follower also gets the stored entries after ``previous`` if it could read them
        meanwhile (``follow.wait_and_read``; None: read them)."""
        writer = self._writer
        if writer is not None:  # its own LAC, and whether the stream is still its own
            await self._own_wait.wait_past(writer, previous, wait)
            return None
        digester = self._digester if batch > 0 else None
        lac, md, rows = await follow.wait_and_read(
            self._ctx, self._md, digester, previous, wait, batch
        )
        self._keep_view(md, lac)
        return rows

    # -- trimming ----------------------------------------------------------------------------

    def trim(self, before_entry_id: int) -> None:
        """Delete the whole fragments that lie below ``before_entry_id`` (bookies and metadata)."""
        self._check_usable("trim()")
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
        if not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._closed_now)  # active tails end now
            except RuntimeError:  # the loop closed meanwhile: no tail is waiting
                pass
        # A closed client (or stopped cluster) already stopped its writers: nothing to wait for.
        closed = self._runtime.closed_reason or self._ctx.closed_reason
        if self._writer is not None and closed is None:
            self._runtime.run(self._close_writer(self._writer))

    async def _close_writer(self, writer: TermWriter) -> None:
        await writer.drain()
        if writer.error is None and writer.lac >= 0:
            await asyncio.gather(
                *(writer.explicit_lac.send(b, writer.lac) for b in writer.md.last_fragment[1])
            )
        writer.stop()

    def __enter__(self) -> UnboundedLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
