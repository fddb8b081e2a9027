"""The asyncio flavour of the public API, for applications with an event loop of their own.

The ledger protocol runs on the embedlog runtime's loop, in its own thread; these
wrappers let a coroutine on *another* loop await it without blocking that loop:

    from embedlog import LocalCluster
    from embedlog.aio import AsyncClient

    async def main(cluster: LocalCluster) -> None:
        client = AsyncClient(cluster.client("app"))
        wh = await client.create_ledger(3, 3, 2)
        futures = [await wh.enqueue(b"event %d" % i) for i in range(1000)]  # pipelined
        last = await futures[-1]
        await wh.close()

Adds and appends hand their entry to the runtime as the blocking ``add_async`` does
and await its future directly (no thread per entry). They respect the handle's bound
on adds in flight (docs/security.md, "Client limits") without blocking the loop:
``enqueue`` and ``add`` await room; ``add_nowait`` cannot wait, so it raises
TooManyAddsInFlightError when the bound is reached. Everything else (creating,
opening, recovery, reads, trims, closes) runs the blocking call in a worker thread
(``asyncio.to_thread``), so it has exactly the blocking API's meaning and errors.
Do not call these from the runtime's own loop (``client.runtime.loop``): use the
``*_aio`` methods of the blocking objects there.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from embedlog.client import Client
    from embedlog.ledger.entries import Entry
    from embedlog.ledger.handles import ReadHandle, WriteHandle
    from embedlog.metadata.ledger_metadata import LedgerMetadata
    from embedlog.runtime import Runtime
    from embedlog.unbounded.ledger import UnboundedLedger
    from embedlog.unbounded.retention import Retention
    from embedlog.unbounded.tailing import AsyncTail
    from embedlog.wire.entry import DigestType


class AsyncClient:
    """``Client`` for coroutines; ``client`` is a blocking client (``cluster.client()``,
    ``embedlog.connect()``), which this object uses and closes."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 3,
        ack_quorum: int = 2,
        *,
        digest: DigestType | None = None,
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
    ) -> AsyncWriteHandle:
        options: dict[str, Any] = {"password": password, "custom_metadata": custom_metadata}
        if digest is not None:
            options["digest"] = digest
        wh = await asyncio.to_thread(
            self.client.create_ledger, ensemble_size, write_quorum, ack_quorum, **options
        )
        return AsyncWriteHandle(wh)

    async def open_ledger(
        self, ledger_id: int, *, password: bytes = b"", recover: bool = True
    ) -> AsyncReadHandle:
        rh = await asyncio.to_thread(
            self.client.open_ledger, ledger_id, password=password, recover=recover
        )
        return AsyncReadHandle(rh)

    async def create_unbounded(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 3,
        ack_quorum: int = 2,
        *,
        password: bytes = b"",
        fragment_max_entries: int | None = None,
        digest: DigestType | None = None,
        name: str | None = None,
        retention: Retention | None = None,
        retention_overrides_cursors: bool = False,
        dedup_window: float | None = None,
    ) -> AsyncUnboundedLedger:
        """``Client.create_unbounded``; ``digest`` and ``dedup_window`` default to its."""
        options: dict[str, Any] = {}
        if digest is not None:
            options["digest"] = digest
        if dedup_window is not None:
            options["dedup_window"] = dedup_window
        ul = await asyncio.to_thread(
            self.client.create_unbounded,
            ensemble_size,
            write_quorum,
            ack_quorum,
            password=password,
            fragment_max_entries=fragment_max_entries,
            name=name,
            retention=retention,
            retention_overrides_cursors=retention_overrides_cursors,
            **options,
        )
        return AsyncUnboundedLedger(ul)

    async def stream_id(self, ledger_id_or_name: int | str) -> int:
        return await asyncio.to_thread(self.client.stream_id, ledger_id_or_name)

    async def list_streams(self) -> dict[str, int]:
        return await asyncio.to_thread(self.client.list_streams)

    async def open_unbounded(
        self, ledger_id: int | str, *, password: bytes = b"", takeover: bool = True
    ) -> AsyncUnboundedLedger:
        ul = await asyncio.to_thread(
            self.client.open_unbounded, ledger_id, password=password, takeover=takeover
        )
        return AsyncUnboundedLedger(ul)

    async def delete_ledger(self, ledger_id: int) -> None:
        await asyncio.to_thread(self.client.delete_ledger, ledger_id)

    async def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        return await asyncio.to_thread(self.client.ledger_metadata, ledger_id)

    async def list_ledgers(self) -> list[int]:
        return await asyncio.to_thread(lambda: list(self.client.list_ledgers()))

    async def close(self) -> None:
        await asyncio.to_thread(self.client.close)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def _entries(
    runtime: Runtime,
    read_aio: Callable[[int, int], Coroutine[Any, Any, list[Entry]]],
    first: int,
    last: int,
) -> AsyncIterator[Entry]:
    """Entries first..last, one batch of 512 at a time, each read on the embedlog runtime
    (no thread per batch): what the blocking ``entries()`` iterators do, for a coroutine."""
    from embedlog.ledger.batches import BATCH

    for lo in range(first, last + 1, BATCH):
        batch = await asyncio.wrap_future(runtime.submit(read_aio(lo, min(lo + BATCH - 1, last))))
        for entry in batch:
            yield entry


class AsyncWriteHandle:
    def __init__(self, handle: WriteHandle) -> None:
        self.handle = handle

    @property
    def ledger_id(self) -> int:
        return self.handle.ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        return self.handle.metadata

    @property
    def last_add_confirmed(self) -> int:
        return self.handle.last_add_confirmed

    def add_nowait(self, data: bytes) -> asyncio.Future[int]:
        """Queue ``data`` at once (pipelining); the future gives its entry id once it and
        every earlier entry are acknowledged. Call from a running loop. Raises
        TooManyAddsInFlightError if the handle's bound on adds in flight is reached."""
        return asyncio.wrap_future(
            self.handle._add(data, False, "await enqueue(data), which waits for room")
        )

    async def enqueue(self, data: bytes) -> asyncio.Future[int]:
        """``add_nowait`` that first awaits room under the bound on adds in flight."""
        return asyncio.wrap_future(await self.handle.queue_aio(data))

    async def add(self, data: bytes) -> int:
        return await (await self.enqueue(data))

    async def read(self, first: int, last: int) -> list[Entry]:
        return await asyncio.to_thread(self.handle.read, first, last)

    async def close(self) -> None:
        await asyncio.to_thread(self.handle.close)

    async def __aenter__(self) -> AsyncWriteHandle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncReadHandle:
    def __init__(self, handle: ReadHandle) -> None:
        self.handle = handle

    @property
    def ledger_id(self) -> int:
        return self.handle.ledger_id

    @property
    def is_closed(self) -> bool:
        return self.handle.is_closed

    @property
    def metadata(self) -> LedgerMetadata:
        return self.handle.metadata

    async def entries(self, first: int = 0, last: int | None = None) -> AsyncIterator[Entry]:
        """``ReadHandle.entries`` as an async iterator: ``async for e in rh.entries():``."""
        if last is None:
            last = await self.read_last_add_confirmed()
        async for entry in _entries(self.handle._runtime, self.handle.read_aio, first, last):
            yield entry

    @property
    def last_add_confirmed(self) -> int:
        return self.handle.last_add_confirmed

    async def read(self, first: int, last: int) -> list[Entry]:
        return await asyncio.to_thread(self.handle.read, first, last)

    async def read_last_add_confirmed(self) -> int:
        return await asyncio.to_thread(self.handle.read_last_add_confirmed)

    async def close(self) -> None:
        await asyncio.to_thread(self.handle.close)

    async def __aenter__(self) -> AsyncReadHandle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncUnboundedLedger:
    def __init__(self, ledger: UnboundedLedger) -> None:
        self.ledger = ledger

    @property
    def ledger_id(self) -> int:
        return self.ledger.ledger_id

    @property
    def term(self) -> int:
        return self.ledger.term

    @property
    def last_add_confirmed(self) -> int:
        return self.ledger.last_add_confirmed

    @property
    def is_writer(self) -> bool:
        return self.ledger.is_writer

    @property
    def metadata(self) -> LedgerMetadata:
        return self.ledger.metadata

    async def first_entry_id(self) -> int:
        return await asyncio.to_thread(self.ledger.first_entry_id)

    async def entries(self, first: int = 0, last: int | None = None) -> AsyncIterator[Entry]:
        """``UnboundedLedger.entries`` as an async iterator (no-op entries left out)."""
        if last is None:
            last = await self.read_last_add_confirmed()
        async for entry in _entries(self.ledger.runtime, self.ledger.read_aio, first, last):
            yield entry

    def append_nowait(
        self,
        data: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        timestamp: float | None = None,
        msg_id: str | bytes | None = None,
    ) -> asyncio.Future[int]:
        """Queue a record at once (pipelining); the future gives its entry id. Raises
        TooManyAddsInFlightError if the bound on appends in flight is reached. The
        record's fields are ``UnboundedLedger.append_async``'s."""
        instead = "await enqueue(data), which waits for room"
        return asyncio.wrap_future(
            self.ledger.append_record(data, key, headers, timestamp, msg_id, False, instead)
        )

    async def enqueue(
        self,
        data: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        timestamp: float | None = None,
        msg_id: str | bytes | None = None,
    ) -> asyncio.Future[int]:
        """``append_nowait`` that first awaits room under the bound on appends in flight."""
        return asyncio.wrap_future(
            await self.ledger.queue_aio(
                data, key=key, headers=headers, timestamp=timestamp, msg_id=msg_id
            )
        )

    async def append(
        self,
        data: bytes,
        *,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        timestamp: float | None = None,
        msg_id: str | bytes | None = None,
    ) -> int:
        return await (
            await self.enqueue(data, key=key, headers=headers, timestamp=timestamp, msg_id=msg_id)
        )

    async def entry_id_at(self, timestamp: float) -> int:
        """``UnboundedLedger.entry_id_at``: the first entry at or after ``timestamp``."""
        return await asyncio.to_thread(self.ledger.entry_id_at, timestamp)

    async def read(self, first: int, last: int) -> list[Entry]:
        return await asyncio.to_thread(self.ledger.read, first, last)

    async def read_last_add_confirmed(self) -> int:
        return await asyncio.to_thread(self.ledger.read_last_add_confirmed)

    def tail(
        self, start: int | str = 0, *, timeout: float | None = None, cursor: str | None = None
    ) -> AsyncTail:
        """``UnboundedLedger.tail`` as an async iterator: ``async for entry in ul.tail():``.

        The waiting happens on the embedlog runtime, not in a thread: cancelling the task
        that iterates ends it at once, and so do ``await tail.close()`` and ``ul.close()``.
        ``skipped`` and ``position`` are the blocking tail's."""
        return self.ledger.tail_async_iterator(start, timeout=timeout, cursor=cursor)

    async def commit(self, cursor: str, entry_id: int, *, force: bool = False) -> None:
        await asyncio.to_thread(self.ledger.commit, cursor, entry_id, force=force)

    async def cursors(self) -> dict[str, int]:
        return await asyncio.to_thread(self.ledger.cursors)

    async def delete_cursor(self, cursor: str) -> None:
        await asyncio.to_thread(self.ledger.delete_cursor, cursor)

    async def trim(self, before_entry_id: int) -> None:
        await asyncio.to_thread(self.ledger.trim, before_entry_id)

    async def close(self) -> None:
        await asyncio.to_thread(self.ledger.close)

    async def __aenter__(self) -> AsyncUnboundedLedger:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
