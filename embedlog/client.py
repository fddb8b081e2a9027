"""Client: creates, opens, recovers and deletes ledgers (the API.md contract)."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterator, Mapping

from embedlog import validate
from embedlog.clock import SYSTEM_CLOCK, Clock
from embedlog.errors import (
    ClientClosedError,
    NoSuchLedgerInMetadataError,
    NotEnoughBookiesError,
    TlsHandshakeError,
)
from embedlog.ledger.admission import (
    DEFAULT_MAX_ADDS_IN_FLIGHT,
    DEFAULT_MAX_BYTES_IN_FLIGHT,
    check_limits,
)
from embedlog.ledger.bookie_client import UNKNOWN_OUTCOMES, BookieClient
from embedlog.ledger.context import ClientContext
from embedlog.ledger.handles import ReadHandle, WriteHandle
from embedlog.ledger.placement import PlacementPolicy, RandomPlacement
from embedlog.ledger.reader import read_lac
from embedlog.ledger.recovery import check_password, recover_ledger
from embedlog.ledger.writer import LedgerWriter
from embedlog.metadata import streams
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.runtime import Runtime
from embedlog.transport.base import Transport
from embedlog.unbounded.layout import DEFAULT_DEDUP_WINDOW
from embedlog.unbounded.ledger import UnboundedLedger
from embedlog.unbounded.retention import Retention
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import DigestType, master_key
from embedlog.wire.limits import DEFAULT_MAX_ENTRY_SIZE
from embedlog.wire.messages import OpCode

log = logging.getLogger(__name__)


class Client:
    def __init__(
        self,
        runtime: Runtime,
        metadata: MetadataClient,
        transport: Transport,
        *,
        name: str = "client",
        request_timeout: float = 5.0,
        placement: PlacementPolicy | None = None,
        add_entry_quorum_timeout: float = 60.0,
        explicit_lac_interval: float = 0.2,
        max_entry_size: int = DEFAULT_MAX_ENTRY_SIZE,
        max_adds_in_flight: int = DEFAULT_MAX_ADDS_IN_FLIGHT,
        max_bytes_in_flight: int = DEFAULT_MAX_BYTES_IN_FLIGHT,
        max_block_seconds: float | None = None,
        unsafe_recovery_reads_without_fence: bool = False,
        unsafe_recovery_from_minus_one: bool = False,
        unsafe_takeover_without_noop: bool = False,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
    ) -> None:
        if request_timeout <= 0:
            raise ValueError(f"request_timeout must be > 0, got {request_timeout}")
        check_limits(max_entry_size, max_adds_in_flight, max_bytes_in_flight, max_block_seconds)
        self.name = name
        self._runtime = runtime
        self.ctx = ClientContext(
            BookieClient(transport, name, request_timeout),
            metadata,
            placement or RandomPlacement(),
            add_entry_quorum_timeout=add_entry_quorum_timeout,
            explicit_lac_interval=explicit_lac_interval,
            max_entry_size=max_entry_size,
            max_adds_in_flight=max_adds_in_flight,
            max_bytes_in_flight=max_bytes_in_flight,
            max_block_seconds=max_block_seconds,
            unsafe_recovery_reads_without_fence=unsafe_recovery_reads_without_fence,
            unsafe_recovery_from_minus_one=unsafe_recovery_from_minus_one,
            unsafe_takeover_without_noop=unsafe_takeover_without_noop,
            clock=clock,
            rng=rng or random.Random(),
        )
        self._writers: list[LedgerWriter] = []
        self._closed = False

    @property
    def runtime(self) -> Runtime:
        return self._runtime

    def _check_open(self) -> None:
        validate.check_open(self._runtime, self.ctx)

    # -- bounded ledgers ---------------------------------------------------------------------

    def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 3,
        ack_quorum: int = 2,
        *,
        digest: DigestType = DigestType.CRC32C,
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
    ) -> WriteHandle:
        self._check_open()
        return self._runtime.run(
            self.create_ledger_aio(
                ensemble_size,
                write_quorum,
                ack_quorum,
                digest=digest,
                password=password,
                custom_metadata=custom_metadata,
            )
        )

    async def create_ledger_aio(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 3,
        ack_quorum: int = 2,
        *,
        digest: DigestType = DigestType.CRC32C,
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
    ) -> WriteHandle:
        self._check_open()
        password = validate.password(password)
        md = await self.new_ledger_metadata(
            ensemble_size,
            write_quorum,
            ack_quorum,
            digest=digest,
            password=password,
            custom_metadata=custom_metadata,
        )
        writer = LedgerWriter(self.ctx, md, password)
        self._writers.append(writer)
        return WriteHandle(self._runtime, self.ctx, writer)

    async def new_ledger_metadata(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        *,
        digest: DigestType,
        password: bytes,
        custom_metadata: Mapping[str, bytes] | None,
        unbounded: bool = False,
    ) -> LedgerMetadata:
        ensemble_size, write_quorum, ack_quorum = validate.quorums(
            ensemble_size, write_quorum, ack_quorum
        )
        digest = validate.digest(digest)
        password = validate.password(password)
        custom_metadata = validate.custom_metadata(custom_metadata)
        available = await self.ctx.writable_bookies()
        if len(available) < ensemble_size:
            raise NotEnoughBookiesError(
                f"need {ensemble_size} writable bookies, {len(available)} available"
            )
        ensemble = self.ctx.placement.new_ensemble(ensemble_size, write_quorum, available, set())
        md = LedgerMetadata(
            ledger_id=-1,
            ensemble_size=ensemble_size,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            fragments=[(0, tuple(ensemble))],
            digest_type=digest,
            password_hash=master_key(password).hex(),
            password=password,
            custom_metadata=custom_metadata,
            term=1 if unbounded else -1,
            unbounded=unbounded,
            ctime=self.ctx.clock.time(),
        )
        return await self.ctx.meta(self.ctx.metadata.create_ledger, md)

    def open_ledger(
        self, ledger_id: int, *, password: bytes = b"", recover: bool = True
    ) -> ReadHandle:
        self._check_open()
        return self._runtime.run(
            self.open_ledger_aio(ledger_id, password=password, recover=recover)
        )

    async def open_ledger_aio(
        self, ledger_id: int, *, password: bytes = b"", recover: bool = True
    ) -> ReadHandle:
        self._check_open()
        ledger_id = validate.ledger_id(ledger_id)
        password = validate.password(password)
        if validate.flag(recover, "recover"):
            md = await self.ctx.meta(self.ctx.metadata.read_ledger, ledger_id)
            if md.unbounded:
                # Bounded recovery would fence and close the stream for good.
                raise ValueError(
                    f"ledger {ledger_id} is an unbounded ledger: open_unbounded() takes it "
                    "over; open_ledger(recover=False) reads it without disturbing the writer"
                )
            md = await recover_ledger(self.ctx, ledger_id, password)
            return ReadHandle(self._runtime, self.ctx, md, password, md.last_entry_id)
        md = await self._read_metadata(ledger_id, password)
        lac = md.last_entry_id if md.state is LedgerState.CLOSED else await self._read_lac(md)
        return ReadHandle(self._runtime, self.ctx, md, password, lac)

    async def _read_metadata(self, ledger_id: int, password: bytes) -> LedgerMetadata:
        md = await self.ctx.meta(self.ctx.metadata.read_ledger, ledger_id)
        check_password(md, password)
        return md

    async def _read_lac(self, md: LedgerMetadata) -> int:
        """The LAC the bookies of an open ledger report; -1 while none answers."""
        try:
            return await read_lac(self.ctx, md)
        except TlsHandshakeError:
            raise  # not "nothing confirmed yet": this client cannot talk to the bookies
        except UNKNOWN_OUTCOMES:
            return -1  # nobody answered yet: start from nothing confirmed

    # -- unbounded ledgers -------------------------------------------------------------------

    def create_unbounded(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 3,
        ack_quorum: int = 2,
        *,
        password: bytes = b"",
        fragment_max_entries: int | None = None,
        digest: DigestType = DigestType.CRC32C,
        name: str | None = None,
        retention: Retention | None = None,
        retention_overrides_cursors: bool = False,
        dedup_window: float = DEFAULT_DEDUP_WINDOW,
    ) -> UnboundedLedger:
        """A new unbounded ledger at term 1, with this client as its writer.

        ``name``: a name unique in the cluster, for ``open_unbounded(name)`` and
        ``list_streams()``; StreamNameTakenError if another stream has it.
        ``retention``: the writers trim whole fragments beyond it, never above a cursor
        unless ``retention_overrides_cursors`` (docs/unbounded.md, "Retention").
        ``dedup_window``: seconds an append's ``msg_id`` is remembered, by every writer of
        the stream (0: appends take no msg_id; docs/unbounded.md, "Records").
        """
        self._check_open()
        return self._runtime.run(
            self.create_unbounded_aio(
                ensemble_size,
                write_quorum,
                ack_quorum,
                password=password,
                fragment_max_entries=fragment_max_entries,
                digest=digest,
                name=name,
                retention=retention,
                retention_overrides_cursors=retention_overrides_cursors,
                dedup_window=dedup_window,
            )
        )

    async def create_unbounded_aio(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 3,
        ack_quorum: int = 2,
        *,
        password: bytes = b"",
        fragment_max_entries: int | None = None,
        digest: DigestType = DigestType.CRC32C,
        name: str | None = None,
        retention: Retention | None = None,
        retention_overrides_cursors: bool = False,
        dedup_window: float = DEFAULT_DEDUP_WINDOW,
    ) -> UnboundedLedger:
        from embedlog.unbounded import layout
        from embedlog.unbounded.writer import TermWriter

        self._check_open()
        password = validate.password(password)
        fragment_max_entries = validate.optional_count(fragment_max_entries, "fragment_max_entries")
        if name is not None:
            name = streams.check_name(name, "name")
        if retention is not None and not isinstance(retention, Retention):
            raise TypeError(
                f"retention must be a Retention or None, not {type(retention).__name__}"
            )
        overrides = validate.flag(retention_overrides_cursors, "retention_overrides_cursors")
        window = validate.optional_seconds(dedup_window, "dedup_window")
        if window is None:
            raise TypeError("dedup_window must be a number of seconds (0: no deduplication)")
        md = await self.new_ledger_metadata(
            ensemble_size,
            write_quorum,
            ack_quorum,
            digest=digest,
            password=password,
            custom_metadata=None,
            unbounded=True,
        )
        settled = layout.with_settings(md, fragment_max_entries=fragment_max_entries)
        settled = layout.with_stream_settings(settled, dedup_window=window)
        if name is not None:
            settled = layout.with_stream_settings(settled, name=name)
        if retention is not None:
            settled = layout.with_stream_settings(
                settled, retention=retention.to_json(), retention_overrides_cursors=overrides
            )
        md = await self.ctx.meta(self.ctx.metadata.write_ledger, settled)
        if name is not None:
            await self._register_name(name, md.ledger_id)
        writer = TermWriter(
            self.ctx,
            md,
            password,
            term=md.term,
            lac=-1,
            fragment_max_entries=fragment_max_entries,
        )
        self._writers.append(writer)
        return UnboundedLedger(self._runtime, self.ctx, md, password, writer=writer, fresh=True)

    async def _register_name(self, name: str, ledger_id: int) -> None:
        store = self.ctx.metadata.store
        try:
            await self.ctx.meta(streams.register, store, name, ledger_id)
        except BaseException:
            # The name is the stream's identity: without it, the new ledger is dropped.
            await self.ctx.meta(self.ctx.metadata.delete_ledger, ledger_id)
            raise

    def open_unbounded(
        self, ledger_id: int | str, *, password: bytes = b"", takeover: bool = True
    ) -> UnboundedLedger:
        """takeover=True: become the writer in a new term (recovers, writes the no-op).

        takeover=False: a follower that reads and tails and never disturbs the writer.
        ``ledger_id`` may be the stream's name.
        """
        self._check_open()
        return self._runtime.run(
            self.open_unbounded_aio(ledger_id, password=password, takeover=takeover)
        )

    async def open_unbounded_aio(
        self, ledger_id: int | str, *, password: bytes = b"", takeover: bool = True
    ) -> UnboundedLedger:
        from embedlog.unbounded import layout
        from embedlog.unbounded.takeover import take_over
        from embedlog.unbounded.writer import TermWriter

        self._check_open()
        ledger_id = await self.stream_id_aio(ledger_id)
        password = validate.password(password)
        if validate.flag(takeover, "takeover"):
            start = await take_over(self.ctx, ledger_id, password)
            writer = TermWriter(
                self.ctx,
                start.md,
                password,
                term=start.term,
                lac=start.last_entry_id,
                fragment_max_entries=layout.fragment_max_entries(start.md),
            )
            self._writers.append(writer)
            return UnboundedLedger(self._runtime, self.ctx, start.md, password, writer=writer)
        md = await self._read_metadata(ledger_id, password)
        if not md.unbounded:
            raise ValueError(f"ledger {ledger_id} is not an unbounded ledger; use open_ledger")
        lac = await self._read_lac(md)
        # Metadata read after the LAC places every entry up to it.
        md = await self.ctx.meta(self.ctx.metadata.read_ledger, ledger_id)
        return UnboundedLedger(self._runtime, self.ctx, md, password, lac=lac)

    def stream_id(self, ledger_id_or_name: int | str) -> int:
        """The ledger id of a stream given by id or by name (NoSuchLedgerInMetadataError
        for a name no stream has)."""
        self._check_open()
        return self._runtime.run(self.stream_id_aio(ledger_id_or_name))

    async def stream_id_aio(self, ledger_id_or_name: int | str) -> int:
        """The ledger id of a stream given by id or by name."""
        if not isinstance(ledger_id_or_name, str):
            return validate.ledger_id(ledger_id_or_name)
        name = streams.check_name(ledger_id_or_name, "name")
        found = await self.ctx.meta(streams.lookup, self.ctx.metadata.store, name)
        if found is None:
            raise NoSuchLedgerInMetadataError(f"there is no stream named {name!r}")
        return found

    def list_streams(self) -> dict[str, int]:
        """Every named stream: name -> ledger id."""
        self._check_open()
        return self._runtime.run(self.ctx.meta(streams.names, self.ctx.metadata.store))

    def delete_ledger(self, ledger_id: int) -> None:
        self._check_open()
        self._runtime.run(self.delete_ledger_aio(ledger_id))

    async def delete_ledger_aio(self, ledger_id: int) -> None:
        self._check_open()
        ledger_id = validate.ledger_id(ledger_id)
        try:
            md = await self.ctx.meta(self.ctx.metadata.read_ledger, ledger_id)
            if md.state is not LedgerState.CLOSED:
                from embedlog.unbounded.deletion import fence_for_delete

                md = await fence_for_delete(self.ctx, md)
            await self.ctx.meta(self.ctx.metadata.delete_ledger, ledger_id)
        except NoSuchLedgerInMetadataError:
            # Gone before this call, or deleted meanwhile by another: a delete that dropped
            # the node and then failed leaves cursors and sink records nobody else removes.
            await self._finish_earlier_delete(ledger_id)
            raise
        if md.unbounded:
            await self._forget_stream(md)
        key = md.master_key

        async def drop(b: str) -> None:
            try:
                resp = await self.ctx.bookies.call(
                    b, OpCode.DELETE_LEDGER, ledger_id, master_key=key
                )
            except UNKNOWN_OUTCOMES:
                return  # the bookie's garbage collection drops it later (bookie/gc.py)
            if resp.status == StatusCode.EUA:
                log.warning(
                    "bookie %s kept ledger %s: it holds another key for it than the metadata "
                    "did (docs/security.md, Ledger keys)",
                    b,
                    ledger_id,
                )

        await asyncio.gather(*(drop(b) for b in sorted(md.bookies())))

    async def _finish_earlier_delete(self, ledger_id: int) -> None:
        """Remove what a delete that dropped the ledger's node and then failed left of the
        stream, if anything (``streams.forget_deleted``: never a live stream's)."""
        await self.ctx.meta(streams.forget_deleted, self.ctx.metadata.store, ledger_id)

    async def _forget_stream(self, md: LedgerMetadata) -> None:
        """After its ledger was deleted: free the stream's name, drop its cursors and
        sink records."""
        from embedlog.unbounded import layout

        store = self.ctx.metadata.store
        name = layout.name(md)
        if name is not None:
            await self.ctx.meta(streams.free, store, name, md.ledger_id)
        await self.ctx.meta(streams.forget, store, md.ledger_id)

    def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        self._check_open()
        ledger_id = validate.ledger_id(ledger_id)
        return self._runtime.run(self.ctx.meta(self.ctx.metadata.read_ledger, ledger_id))

    def list_ledgers(self) -> Iterator[int]:
        self._check_open()
        return iter(
            self._runtime.run(self.ctx.meta(lambda: list(self.ctx.metadata.list_ledgers())))
        )

    def close(self) -> None:
        """Stop this client's writers; every later call on it or its handles raises
        ClientClosedError. Closing again does nothing."""
        if self._closed:
            return
        self._closed = True
        self.ctx.closed_reason = (
            f"client {self.name} is closed: it and its ledger handles take no more calls; "
            "make a new client"
        )

        closed = ClientClosedError(
            f"client {self.name} was closed before this add was acknowledged: its outcome is "
            "unknown (it may be stored); a new client can read the ledger back"
        )

        async def stop_all() -> None:
            for w in self._writers:
                w.stop(closed)

        if not self._runtime.loop.is_closed():
            self._runtime.run(stop_all())

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
