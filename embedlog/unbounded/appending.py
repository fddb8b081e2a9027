"""How a stream's writer handle turns appends into entries: records, order, deduplication.

``prepare`` (the caller's thread) checks the record's fields and packs its envelope
(embedlog/wire/record.py) before the payload. ``StreamAppends`` (the runtime loop) hands
each append to the term's writer in the order the handle got them, and answers an
append whose ``msg_id`` the stream took within its window with the entry id already
there (embedlog/unbounded/dedup.py).

A writer that took the stream over knows none of the ids the earlier terms appended. At
the first append with a ``msg_id`` it reads them back from the stream (from the first
entry appended within the window, found by ``seek.entry_id_at``); appends that arrive
meanwhile wait, so that the stream keeps them in the order they were made.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections import deque
from typing import NamedTuple

from embedlog import validate
from embedlog.errors import BKError, EntryTooLargeError
from embedlog.ledger.admission import AddBudget, entry_bytes
from embedlog.ledger.context import ClientContext
from embedlog.unbounded import follow, layout, seek
from embedlog.unbounded.dedup import DedupWindow
from embedlog.unbounded.writer import TermWriter
from embedlog.wire import record
from embedlog.wire.entry import FLAG_RECORD, Digester

log = logging.getLogger(__name__)

# Entries read per request while a new writer reads the window's message ids back.
REBUILD_BATCH = 256


class Prepared(NamedTuple):
    """An append ready for the loop: envelope and data, and its message id if any.

    A NamedTuple, not an attrs class: one is made per append, and it costs a third less."""

    payload: bytes
    msg_id: bytes | None
    # The caller's bytes (data, key, headers, msg_id): what max_entry_size bounds, the
    # bound on bytes in flight takes and retention counts. The envelope's fixed bytes
    # are left out, as the term prefix is.
    cost: int


def prepare(
    ctx: ClientContext,
    data: object,
    key: object,
    headers: object,
    timestamp: object,
    msg_id: object,
    ledger_id: int,
) -> Prepared:
    """Check an append's arguments and pack its record; one error naming what is wrong
    (and ``ledger_id``: the messages' text is made only when one is raised)."""
    if (
        type(data) is bytes
        and key is None
        and headers is None
        and timestamp is None
        and msg_id is None
        and len(data) <= ctx.max_entry_size
    ):
        # The common append, a third of the general path's cost (benchmarks/bench_records.py).
        return Prepared(record.encode(ctx.clock.time()) + data, None, len(data))
    what = f"ledger {ledger_id}"
    size = len(entry_bytes(data, ctx.max_entry_size, what))  # type and size of data first
    key_b, headers_d, msg_b = record.check_fields(key, headers, msg_id)
    now = ctx.clock.time()
    appended = None
    if timestamp is None:
        ts = now
    else:
        ts = validate.timestamp(timestamp, "timestamp")
        # The dedup window is measured on the writer's clock, not the caller's: every
        # record with a timestamp of the caller's keeps it, with a msg_id or not, or a
        # back-dated record would make a new writer's read-back of the window start past
        # the ids it must know (seek.entry_id_at searches the stream by this time).
        appended = now
    envelope = record.encode(ts, key_b, headers_d, msg_b, appended)
    # max_entry_size bounds what the caller gives (data, key, headers, msg_id), not the
    # envelope's fixed bytes, which the bookies' margin for headers and the term holds.
    fields = len(envelope) - record.TIME_ONLY_SIZE - (0 if appended is None else 8)
    if size + fields > ctx.max_entry_size:
        raise EntryTooLargeError(
            f"{what}: an entry of {size} bytes with a key, headers and msg_id of {fields} "
            f"bytes exceeds this client's max_entry_size of {ctx.max_entry_size} bytes; make "
            "the data, key or headers smaller, or raise max_entry_size in cluster.client(...) "
            "or connect(...)"
        )
    return Prepared(envelope + bytes(data), msg_b, size + fields)  # type: ignore[call-overload]


class StreamAppends:
    """The runtime loop's side of a writer handle's appends (the ``AddInbox`` target)."""

    def __init__(
        self,
        ctx: ClientContext,
        writer: TermWriter,
        digester: Digester,
        *,
        dedup_window: float,
        fresh: bool,
    ) -> None:
        """``fresh``: the stream was just created, so no earlier term appended an id."""
        self._ctx = ctx
        self._writer = writer
        self._digester = digester
        self._window_len = dedup_window
        self._window: DedupWindow | None = DedupWindow(dedup_window) if fresh else None
        # Appends waiting, in order, while the window is read back from the stream.
        self._parked: deque[tuple[concurrent.futures.Future[int], bytes, int, bytes | None]] | (
            None
        ) = None
        self._inflight: dict[bytes, concurrent.futures.Future[int]] = {}

    @property
    def budget(self) -> AddBudget:
        return self._writer.budget

    def check_msg_id(self) -> None:
        """ValueError if this stream keeps no message ids (made with dedup_window=0)."""
        if self._window_len <= 0:
            raise ValueError(
                f"stream {self._ledger_id} was created with dedup_window=0: it keeps no "
                "message ids; append without msg_id"
            )

    @property
    def window(self) -> DedupWindow | None:
        """The message ids this term knows (None until read back after a takeover)."""
        return self._window

    def send_now(self) -> None:
        self._writer.send_now()

    def add_to(
        self,
        future: concurrent.futures.Future[int],
        payload: bytes,
        *,
        cost: int = -1,
        msg_id: bytes | None = None,
    ) -> None:
        """Append ``payload`` (a record) for ``future``, in order with the others."""
        if self._parked is not None:
            self._parked.append((future, payload, cost, msg_id))
            return
        if msg_id is None:
            self._writer.add_to(future, payload, entry_flags=FLAG_RECORD, cost=cost)
            return
        if self._window is None:
            self._parked = deque([(future, payload, cost, msg_id)])
            asyncio.get_running_loop().create_task(self._read_back())
            return
        self._once(future, payload, cost, msg_id)

    def _once(
        self, future: concurrent.futures.Future[int], payload: bytes, cost: int, msg_id: bytes
    ) -> None:
        assert self._window is not None
        now = self._ctx.clock.time()
        found = self._window.find(msg_id, now)
        if found is not None:
            self._release(cost)
            future.set_result(found)
            return
        first = self._inflight.get(msg_id)
        if first is not None:  # the same id still in flight: its outcome is this one's
            self._release(cost)
            first.add_done_callback(lambda done: _copy(done, future))
            return
        self._inflight[msg_id] = future
        future.add_done_callback(lambda done: self._settled(msg_id, now, done))
        self._writer.add_to(future, payload, entry_flags=FLAG_RECORD, cost=cost)

    def _settled(self, msg_id: bytes, at: float, done: concurrent.futures.Future[int]) -> None:
        self._inflight.pop(msg_id, None)
        if self._window is not None and not done.cancelled() and done.exception() is None:
            self._window.record(msg_id, done.result(), at)

    def _release(self, cost: int) -> None:
        if cost >= 0:
            self._writer.budget.release(1, cost)

    async def _read_back(self) -> None:
        try:
            self._window = await self._rebuild()
            error: BaseException | None = None
        except Exception as e:  # a read failed: the ids stay unknown, so no msg_id append
            log.warning("stream %s: reading back message ids failed: %s", self._ledger_id, e)
            error = e
        parked, self._parked = self._parked, None
        assert parked is not None
        for future, payload, cost, msg_id in parked:
            if msg_id is not None and self._window is None:
                self._release(cost)
                future.set_exception(
                    BKError(
                        f"stream {self._ledger_id}: this writer could not read back the "
                        f"message ids appended within the dedup window ({error}); the "
                        "append was not made, retry it"
                    )
                )
            else:
                self.add_to(future, payload, cost=cost, msg_id=msg_id)

    @property
    def _ledger_id(self) -> int:
        return self._writer.md.ledger_id

    async def _rebuild(self) -> DedupWindow:
        """The ids the stream took within the window, read back from its entries."""
        writer = self._writer
        md, lac = writer.md, writer.lac
        window = DedupWindow(self._window_len)
        horizon = self._ctx.clock.time() - self._window_len

        async def times(first: int, last: int) -> list[tuple[int, float | None]]:
            return [(eid, rec.appended_at) for eid, rec in await self._records(first, last)]

        start = await seek.entry_id_at(times, layout.first_entry(md), lac, horizon)
        for first in range(start, lac + 1, REBUILD_BATCH):
            for eid, rec in await self._records(first, min(first + REBUILD_BATCH - 1, lac)):
                if rec.msg_id is not None:
                    window.record(rec.msg_id, eid, rec.appended_at or 0.0)
        log.info(
            "stream %s term %s: read back %d message ids of the last %.0f s (entries %d..%d)",
            md.ledger_id,
            writer.term,
            len(window),
            self._window_len,
            start,
            lac,
        )
        return window

    async def _records(self, first: int, last: int) -> list[tuple[int, record.Record]]:
        rows = await follow.read_records(self._ctx, self._writer.md, self._digester, first, last)
        return [(eid, rec) for eid, rec, _data in rows]


def _copy(done: concurrent.futures.Future[int], into: concurrent.futures.Future[int]) -> None:
    if done.cancelled():
        into.set_exception(concurrent.futures.CancelledError())
    elif (error := done.exception()) is not None:
        into.set_exception(error)
    else:
        into.set_result(done.result())
