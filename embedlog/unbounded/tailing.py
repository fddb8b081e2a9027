"""Following a stream: ``UnboundedLedger.tail()`` from a thread or from asyncio.

One ``TailCursor`` holds a follower's position and does the work on the runtime loop in
steps: a step returns the next batch of entries, waiting (long-poll LAC reads) until
there is one, or None when the tail ended (its idle timeout passed, or the tail or its
ledger handle was closed). ``Tail`` iterates it from a thread, ``AsyncTail`` from any
event loop; both let a close (or the cancellation of the task iterating) end the step
at once instead of at the end of a long poll. A step does its work in the task that
runs it, and a close cancels that task: the entries a wait brings reach the caller
with no task or loop turn of the step's own in between.

Entries below the trim point are skipped, never read: ``skipped`` counts their ids. A
read that finds an entry missing is a skip only when the metadata, read after the
missing answer, places the entry below the trim point (a trim changes the metadata
before it deletes anything on the bookies); an entry above it that no bookie has is an
acknowledged entry lost, and the tail raises NoSuchEntryError.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Protocol

from embedlog import validate
from embedlog.errors import (
    ClientClosedError,
    MetadataUnavailableError,
    NoSuchEntryError,
    NoSuchLedgerError,
)
from embedlog.ledger.batch_reads import Row
from embedlog.ledger.context import ClientContext
from embedlog.ledger.entries import Entry
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.runtime import Runtime
from embedlog.unbounded import follow, layout
from embedlog.wire.entry import Digester

log = logging.getLogger(__name__)

TAIL_BATCH = 256  # entries one step reads at most


class Followed(Protocol):
    """What a tail needs of the stream it follows (``UnboundedLedger``, which makes the
    tails: a tail takes this, not the handle's class, so the handle can import this
    module)."""

    @property
    def ledger_id(self) -> int: ...

    @property
    def runtime(self) -> Runtime: ...

    @property
    def ctx(self) -> ClientContext: ...

    @property
    def digester(self) -> Digester: ...

    def check_open(self) -> None: ...

    def on_close(self, callback: Callable[[], None]) -> Callable[[], None]: ...

    async def view(self) -> tuple[LedgerMetadata, int]: ...

    async def reread_metadata(self) -> LedgerMetadata: ...

    async def wait_past(self, previous: int, wait: float, batch: int = 0) -> list[Row] | None: ...

    async def cursor_start(self, cursor: str) -> int: ...

    async def start_position(self, word: str) -> int: ...


def skip_to(position: int, trim_point: int) -> int:
    """How many entry ids a follower at ``position`` skips to reach ``trim_point``."""
    return max(0, trim_point - position)


class TailCursor:
    """A follower's position in the stream and the steps that move it (on the loop)."""

    def __init__(
        self,
        ledger: Followed,
        start: int,
        timeout: float | None,
        cursor: str | None = None,
        start_word: str | None = None,
    ) -> None:
        self.ledger = ledger
        self.position = start
        self._cursor_name = cursor  # start after its committed position (first step)
        self._start_word = start_word  # "earliest" or "latest", looked up at the first step
        self.timeout = timeout
        self.skipped = 0
        self.last_skip: tuple[int, int] | None = None
        self.ended = False
        # The tasks running a step now (on the loop), and those of them that stop() or the
        # handle's close cancelled: such a step returns None.
        self._steps: set[asyncio.Task[Any]] = set()
        self._released: set[asyncio.Task[Any]] = set()
        self._trim_point = 0  # the highest trim point seen (a writer's metadata may lag)
        self._idle_since = ledger.ctx.clock.monotonic()
        self._metadata_down = False  # said once per outage

    async def resolve_start(self) -> None:
        """Look up where a tail of a cursor, "earliest" or "latest" starts (once)."""
        ul = self.ledger
        if self._cursor_name is not None:
            ul.check_open()
            self.position = await ul.cursor_start(self._cursor_name)
            self._cursor_name = None
        if self._start_word is not None:
            ul.check_open()
            self.position = await ul.start_position(self._start_word)
            self._start_word = None

    def stop(self) -> None:
        """End the tail: a step waiting now returns None at once (any thread)."""
        self.ended = True
        loop = self.ledger.runtime.loop
        if not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._release)
            except RuntimeError:  # the loop closed meanwhile: no step is waiting
                pass

    def _release(self) -> None:
        # On the loop: end the steps under way (stop() or the handle's close).
        for task in self._steps - self._released:
            if not task.done():
                self._released.add(task)
                task.cancel()

    async def step(self, deadline: float | None = None) -> list[Entry] | None:
        """The next entries (at least one), or None once the tail ended; with a
        ``deadline`` (``ctx.clock.monotonic()``), [] if none came by then (``poll``).

        The work runs in the caller's task, which stop() and the handle's close cancel.
        The position moves past a batch only where the step returns it, with no await in
        between: a step cancelled by its caller (the runtime stops) never skips entries.
        """
        if self.ended:
            return None
        task = asyncio.current_task()
        assert task is not None
        self._steps.add(task)
        forget = self.ledger.on_close(self._release)
        try:
            batch = await self._next_batch(deadline)
        except asyncio.CancelledError:
            if task not in self._released or task.uncancel() > 0:
                raise  # cancelled by its caller as well
            batch = None
        finally:
            forget()
            self._steps.discard(task)
            self._released.discard(task)
        if batch is None:
            self.ended = True
        return batch

    async def _next_batch(self, deadline: float | None) -> list[Entry] | None:
        ul = self.ledger
        await self.resolve_start()
        # Entries the last wait brought along (first id, rows): read by the metadata the
        # view now holds, so they stand for a read of their own (follow.wait_and_read).
        brought: tuple[int, list[Row]] | None = None
        me = asyncio.current_task()
        while True:
            if me in self._released:
                # Released, but an await under way finished as the cancel came and let it
                # pass (asyncio.wait_for can): end here rather than wait again.
                return None
            ul.check_open()
            md, lac = await ul.view()
            self._trim_point = max(self._trim_point, layout.first_entry(md))
            self._skip(self._trim_point)
            if self.position <= lac:
                first = self.position
                last = min(lac, first + TAIL_BATCH - 1)
                here, brought = brought, None
                try:
                    if here is not None and here[0] == first and here[1]:
                        rows = here[1]
                        follow.check_stored(md, first)
                        last = rows[-1][0]
                        entries = follow.visible(md, rows)
                    else:
                        entries = await follow.read_visible(ul.ctx, md, ul.digester, first, last)
                except (NoSuchEntryError, NoSuchLedgerError):
                    # Trimmed, or deleted (LedgerDeletedError from the re-read), or lost.
                    fresh = await ul.reread_metadata()
                    if layout.first_entry(fresh) <= first:
                        raise  # not trimmed: an acknowledged entry is missing
                    self._trim_point = layout.first_entry(fresh)
                    continue  # trimmed while we read: skip to the new trim point
                self.position = last + 1
                self._idle_since = ul.ctx.clock.monotonic()
                if entries:
                    return entries
                continue  # only no-ops
            wait = follow.POLL_SLICE
            if self.timeout is not None:
                left = self.timeout - (ul.ctx.clock.monotonic() - self._idle_since)
                if left <= 0:
                    return None
                wait = min(wait, left)
            if deadline is not None:
                left = deadline - ul.ctx.clock.monotonic()
                if left <= 0:
                    return []
                wait = min(wait, left)
            try:
                rows_read = await ul.wait_past(self.position - 1, wait, TAIL_BATCH)
                brought = None if rows_read is None else (self.position, rows_read)
            except MetadataUnavailableError as exc:
                # As a Kafka consumer does: wait through a metadata outage, saying so once.
                if not self._metadata_down:
                    self._metadata_down = True
                    log.warning(
                        "ledger %d: the tail waits for the metadata store: %s", ul.ledger_id, exc
                    )
                await asyncio.sleep(wait)  # the store may fail at once (it is stopping)
                continue
            if self._metadata_down:
                self._metadata_down = False
                log.info(
                    "ledger %d: the metadata store answers again; the tail goes on", ul.ledger_id
                )

    def _skip(self, trim_point: int) -> None:
        n = skip_to(self.position, trim_point)
        if n:
            self.skipped += n
            self.last_skip = (self.position, trim_point - 1)
            self.position = trim_point


def _closed_error(ul: Followed) -> ClientClosedError:
    why = ul.runtime.closed_reason or ul.ctx.closed_reason
    return ClientClosedError(
        why or f"ledger {ul.ledger_id}: the tail's work was cancelled by the embedlog runtime"
    )


class _TailState:
    """What a tail tells of its progress, the same for the blocking and asyncio ones."""

    def __init__(self, cursor: TailCursor) -> None:
        self._cursor = cursor
        self._buffer: deque[Entry] = deque()
        self._handed = cursor.position  # position after the entries handed out

    @property
    def skipped(self) -> int:
        return self._cursor.skipped

    @property
    def last_skip(self) -> tuple[int, int] | None:
        return self._cursor.last_skip

    @property
    def position(self) -> int:
        if not self._buffer:
            return self._cursor.position
        return self._handed

    def _take(self, max_entries: int) -> list[Entry]:
        out = [self._buffer.popleft() for _ in range(min(max_entries, len(self._buffer)))]
        if out:
            self._handed = out[-1].entry_id + 1
        return out


def _poll_args(max_entries: object, timeout: object) -> tuple[int, float]:
    count = validate.whole_number(max_entries, "max_entries", minimum=1)
    wait = validate.optional_seconds(timeout, "timeout")
    return count, 0.0 if wait is None else wait


class Tail(_TailState, Iterator[Entry]):
    """What ``UnboundedLedger.tail()`` returns: an iterator of entries for a thread.

    ``skipped``: entry ids passed over because they were trimmed before this tail read
    them (``last_skip``: the last such range, first and last id). ``position``: the id the
    tail reads next (the one after the last entry it handed out, or the trim point).
    ``close()`` (from any thread) ends it, as does closing the ledger handle; a stopped
    cluster or closed client ends it with ClientClosedError.
    """

    def __iter__(self) -> Tail:
        return self

    def __next__(self) -> Entry:
        if not self._buffer:
            batch = _run(self._cursor)
            if batch is None:
                raise StopIteration
            self._buffer.extend(batch)
        entry = self._buffer.popleft()
        self._handed = entry.entry_id + 1
        return entry

    def poll(self, max_entries: int = 500, timeout: float = 1.0) -> list[Entry]:
        """Up to ``max_entries`` entries that are ready, waiting at most ``timeout``
        seconds for the first one: [] if none came (or the tail ended)."""
        count, wait = _poll_args(max_entries, timeout)
        if not self._buffer and not self._cursor.ended:
            batch = _run(self._cursor, self._cursor.ledger.ctx.clock.monotonic() + wait)
            self._buffer.extend(batch or ())
        return self._take(count)

    def close(self) -> None:
        self._cursor.stop()
        self._buffer.clear()

    def __enter__(self) -> Tail:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _run(cursor: TailCursor, deadline: float | None = None) -> list[Entry] | None:
    ul = cursor.ledger
    if cursor.ended:
        return None
    try:
        return ul.runtime.run(cursor.step(deadline))
    except concurrent.futures.CancelledError:
        # The runtime cancels every task when its cluster stops: say so, in our terms.
        raise _closed_error(ul) from None


class AsyncTail(_TailState, AsyncIterator[Entry]):
    """``Tail`` for coroutines on any event loop (``embedlog.aio``).

    The step runs on the embedlog runtime's loop (no thread waits for it). Cancelling
    the task that awaits it leaves the step running: its entries are the next call's;
    ``aclose()`` ends it.
    """

    def __init__(self, cursor: TailCursor) -> None:
        super().__init__(cursor)
        self._inflight: concurrent.futures.Future[list[Entry] | None] | None = None
        self._inflight_deadline: float | None = None  # the deadline it was made with

    def __aiter__(self) -> AsyncTail:
        return self

    async def __anext__(self) -> Entry:
        if not self._buffer:
            batch = await self._step()
            if batch is None:
                raise StopAsyncIteration
            self._buffer.extend(batch)
        entry = self._buffer.popleft()
        self._handed = entry.entry_id + 1
        return entry

    async def poll(self, max_entries: int = 500, timeout: float = 1.0) -> list[Entry]:
        """``Tail.poll``: up to ``max_entries`` ready entries, awaiting the first for at
        most ``timeout`` seconds."""
        count, wait = _poll_args(max_entries, timeout)
        if not self._buffer and not self._cursor.ended:
            batch = await self._step(self._cursor.ledger.ctx.clock.monotonic() + wait)
            self._buffer.extend(batch or ())
        return self._take(count)

    @property
    def position(self) -> int:
        if not self._buffer:
            batch = self._ready_batch()
            if batch:
                return batch[0].entry_id  # a step's batch no call has taken yet
        return super().position

    def _ready_batch(self) -> list[Entry] | None:
        future = self._inflight
        if future is None or not future.done() or future.cancelled():
            return None
        return None if future.exception() is not None else future.result()

    async def _step(self, deadline: float | None = None) -> list[Entry] | None:
        """The cursor's next step, run on the runtime's loop. A caller that gives up
        (its task cancelled, an ``asyncio.timeout``) leaves the step running there: the
        step may have moved the position past a batch already, and the next call takes
        that batch from it. (A cancelled step could lose such a batch: the cancel reached
        the runtime's loop a turn late, after the step had returned, and its result went
        with the cancelled future.)"""
        cursor = self._cursor
        ul = cursor.ledger
        clock = ul.ctx.clock
        while True:
            future = self._inflight
            if future is None:
                if cursor.ended:
                    return None
                future = self._inflight = ul.runtime.submit(cursor.step(deadline))
                self._inflight_deadline = deadline
            left = None if deadline is None else max(0.0, deadline - clock.monotonic())
            made = self._inflight_deadline
            if deadline is not None and made is not None and made <= deadline:
                left = None  # the step ends by its own deadline, with what is ready
            # asyncio.wait, not an await of the future: cancelling the caller must not
            # cancel the step.
            waited = asyncio.wrap_future(future)
            # The outcome is read from ``future`` below; a step left behind by a closed or
            # dropped tail must not log "exception never retrieved" for its wrapper.
            waited.add_done_callback(_outcome_read)
            done, _ = await asyncio.wait({waited}, timeout=left)
            if not done:
                return []  # this poll's time is up; the step's batch is the next call's
            self._inflight = None
            if future.cancelled():  # the runtime cancels its tasks when the cluster stops
                raise _closed_error(ul)
            batch = future.result()
            if batch == [] and (deadline is None or clock.monotonic() < deadline):
                continue  # an earlier poll's step whose own time ran out: step again
            return batch

    async def aclose(self) -> None:
        self._cursor.stop()
        self._buffer.clear()

    async def close(self) -> None:
        await self.aclose()

    async def __aenter__(self) -> AsyncTail:
        # Where a tail of a cursor, "earliest" or "latest" starts is looked up here, on
        # the runtime's loop, so that ``position`` is right inside the block before the
        # first entry, as the blocking tail's is once made.
        if self._inflight is None and not self._cursor.ended:
            await asyncio.wrap_future(
                self._cursor.ledger.runtime.submit(self._cursor.resolve_start())
            )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _outcome_read(waited: asyncio.Future[Any]) -> None:
    if not waited.cancelled():
        waited.exception()


__all__ = ["AsyncTail", "Tail", "TailCursor", "skip_to"]
