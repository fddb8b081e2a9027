"""The request handler: every request a bookie serves, answered with BookKeeper's
status codes; the adds go to the add path (embedlog/bookie/adds.py), the rest are here:
reads (fencing and term-raising ones too), READ_BATCH, READ_LAC (long poll), WRITE_LAC,
LIST_ENTRIES, DELETE_LEDGER and TRIM (below, and above for unbounded ledgers).

A request that would change a ledger's state must prove the ledger's master key
(embedlog/bookie/keys.py); refused with EUA, it changes nothing. Nor may it change a
ledger the bookie dropped (deleted, or garbage collected): EDELETED (tombstones.py).
How a request is refused or fails, and the negatives a bookie must not give, are in
refusals.py. A limbo ledger (BP-46) answers EUNKNOWN to the auditor's LIST_ENTRIES: a
list is a negative for every id it leaves out. A part of the Bookie
(embedlog/bookie/base.py): it gets the add path, the refusals, the ledger table, the
metrics, the config and the clock, and reads the rest through ``Served``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from embedlog.bookie.adds import Adds, Cut
from embedlog.bookie.base import BookieState, Served, journal_state
from embedlog.bookie.config import BookieConfig
from embedlog.bookie.index import LedgerInfo
from embedlog.bookie.ledgers import LedgerTable
from embedlog.bookie.refusals import Refusals
from embedlog.bookie.terms import lafr_recorded
from embedlog.bookie.truncation import digest_len_of_trim
from embedlog.bookie.verdicts import (
    Verdict,
    change_verdict,
    listing_verdict,
    read_batch_verdict,
    read_verdict,
    trim_above_verdict,
)
from embedlog.clock import Clock
from embedlog.metrics import BookieMetrics
from embedlog.runtime import settle
from embedlog.transport.server import BookieGoneError, Reply, handle_as_task
from embedlog.wire.availability import AvailabilityOfEntries
from embedlog.wire.codes import StatusCode
from embedlog.wire.limits import read_batch_bounds
from embedlog.wire.messages import (
    NO_TERM,
    AddFlags,
    FrameError,
    OpCode,
    Request,
    Response,
    TrimFlags,
    pack_entries,
    unpack_read_ask,
)

LAST_ID = 2**63 - 1  # the highest entry id a frame (and the index) can hold

# Requests answered without waiting for anything (``Requests._at_once``).
_AT_ONCE = frozenset((OpCode.READ_BATCH, OpCode.WRITE_LAC, OpCode.LIST_ENTRIES))


class Requests:
    def __init__(
        self,
        bookie: Served,
        adds: Adds,
        refusals: Refusals,
        ledgers: LedgerTable,
        metrics: BookieMetrics,
        config: BookieConfig,
        clock: Clock,
    ) -> None:
        self.bookie = bookie
        self.adds = adds
        # Bound once: handle_nowait hands every add and batch to one of these.
        self._add_nowait = adds.add_nowait
        self._add_batch = adds.add_batch
        self.refusals = refusals
        self.ledgers = ledgers
        self.metrics = metrics
        self.config = config
        self.clock = clock

    async def handle(self, req: Request) -> Response:
        state = self.bookie.state
        if state is not BookieState.SERVING:
            raise BookieGoneError(f"bookie {self.bookie.bookie_id} is {state.value}")
        try:
            if req.op == OpCode.ADD:
                return await self.adds.add(req)
            if req.op == OpCode.ADD_BATCH:
                answer: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
                self.adds.add_batch(req, settle(answer))
                return await answer
            if req.op == OpCode.READ:
                self.metrics.read_requests += 1
                return await self._read(req)
            if req.op in _AT_ONCE:
                return self._at_once(req)
            if req.op == OpCode.READ_LAC:
                return await self._read_lac(req)
            if req.op in (OpCode.DELETE_LEDGER, OpCode.TRIM):
                return await self._cut(req)
            return self.refusals.refusal(req, StatusCode.EBADREQ)
        except Exception as exc:
            return self.refusals.failed(req, exc)

    def handle_nowait(self, req: Request, reply: Reply) -> asyncio.Task[Response] | None:
        """``handle`` for transports that take a callback: ``reply`` gets the answer or the
        exception ``handle`` would raise.

        A plain add, the hot path, runs here without a task of its own and is answered
        from the journal's group commit; a read, READ_BATCH, WRITE_LAC and LIST_ENTRIES
        are answered at once (a read that must wait for a journal record excepted);
        anything else runs ``handle`` as a task, which is returned so the transport can
        cancel it on shutdown.
        """
        op = req.op
        if op == OpCode.ADD_BATCH:
            self._add_batch(req, reply)
            return None
        if op == OpCode.READ:
            return self._read_nowait(req, reply)
        if op in _AT_ONCE and self.bookie.state is BookieState.SERVING:
            try:
                answer = self._at_once(req)
            except Exception as exc:
                self.refusals.answer_failure(req, exc, reply)
            else:
                reply(answer)
            return None
        if op != OpCode.ADD or req.flags & AddFlags.TRUNCATE:
            return handle_as_task(self.handle(req), reply)
        self._add_nowait(req, reply)
        return None

    def _at_once(self, req: Request) -> Response:
        """The answer to a request that changes nothing durable, or nothing a later
        answer relies on (``_AT_ONCE``): given at once, on the transport's turn."""
        if req.op == OpCode.READ_BATCH:
            self.metrics.read_requests += 1
            return self._read_batch(req)
        if req.op == OpCode.WRITE_LAC:
            return self._write_lac(req)
        return self._list_entries(req)

    def _read_nowait(self, req: Request, reply: Reply) -> asyncio.Task[Response] | None:
        """A READ answered at once, without a task, unless its answer must wait for a
        journal record (the fence or term it sets, or one still on its way to disk).

        Half of a bookie's requests are reads, recoveries' mostly; a task each cost a
        stream scenario of the simulator 6% of its time (tests/bookie/test_read_nowait.py
        checks the two paths answer alike)."""
        if self.bookie.state is not BookieState.SERVING:
            return handle_as_task(self.handle(req), reply)  # refused there, as ever
        self.metrics.read_requests += 1
        try:
            begun = self._read_begin(req)
        except Exception as exc:
            self.refusals.answer_failure(req, exc, reply)
            return None
        if isinstance(begun, Response):
            reply(begun)
            return None
        return handle_as_task(self._read_after(req, *begun), reply)

    async def _read(self, req: Request) -> Response:
        begun = self._read_begin(req)
        if isinstance(begun, Response):
            return begun
        return await self._read_after(req, *begun)

    async def _read_after(
        self, req: Request, record: asyncio.Future[None], info: LedgerInfo
    ) -> Response:
        """The rest of a READ that waits for a journal record (from ``_read`` or, as a
        task, ``_read_nowait``)."""
        try:
            await record
            return self._read_answer(req, info)
        except Exception as exc:
            return self.refusals.failed(req, exc)

    def _read_begin(self, req: Request) -> Response | tuple[asyncio.Future[None], LedgerInfo]:
        """A READ's answer, or the journal record it must wait for first and the ledger's
        state to answer from then."""
        storage = self.bookie.storage
        assert storage is not None
        lid, eid = req.ledger_id, req.entry_id
        info = storage.info(lid)
        verdict = read_verdict(req, info, self.refusals.tombstone(req, info))
        if not verdict.admitted:
            if verdict.dropped:
                return self.refusals.dropped_answer(req, verdict.status)
            return Response.to(req, verdict.status, entry_id=eid, term=verdict.term)
        if verdict.relies_on_state:  # a fence or a term: state to change, or to rely on
            changed = verdict.creates or verdict.raises_term or verdict.fences
            if info is None:
                info = LedgerInfo(master_key=req.master_key.hex())
            if verdict.raises_term:
                info.term = req.term
            if verdict.fences:
                info.fenced = True
            if changed:
                # Durable before we answer: a fence that a crash forgets lets the old writer
                # reach its ack quorum after recovery closed the ledger (BP-46 scenario 1).
                return journal_state(self.bookie, self.ledgers, lid, info), info
            # Another request's change of it may still be on its way to disk: the answer
            # relies on it, so it waits for that record too (LedgerTable.durable).
            waiting = self.ledgers.durable_wait(lid)
            if waiting is not None:
                return waiting, info
        return self._read_answer(req, info)

    def _read_answer(self, req: Request, info: LedgerInfo | None) -> Response:
        storage = self.bookie.storage
        assert storage is not None
        lid, eid = req.ledger_id, req.entry_id
        if info is None:
            return self.refusals.missing(req, None, StatusCode.ENOLEDGER)
        term = req.term if req.term != NO_TERM else info.term
        if eid < 0:
            return Response.to(
                req,
                StatusCode.EOK,
                entry_id=eid,
                lac=info.known_lac,
                last_entry_id=storage.last_entry(lid),
                term=term,
                lafr=info.lafr,
            )
        data = storage.get(lid, eid)
        if data is None:
            return self.refusals.missing(req, info, StatusCode.ENOENTRY)
        return Response.to(
            req, StatusCode.EOK, entry_id=eid, lac=info.known_lac, term=term, body=data
        )

    def _read_batch(self, req: Request) -> Response:
        """READ_BATCH: the run of the asked entries this bookie holds, within its bounds
        (embedlog/wire/limits.py). What it leaves out, the client reads with READ, so an
        absent entry or ledger is never a negative here (EOK, fewer entries or none), and
        it changes nothing: no fence, no term, no key."""
        storage = self.bookie.storage
        assert storage is not None
        lid, first = req.ledger_id, req.entry_id
        try:
            count, stride, max_bytes = unpack_read_ask(req.body)
        except FrameError:
            count = stride = max_bytes = 0
            well_formed = False
        else:
            well_formed = True
        verdict = read_batch_verdict(req, well_formed)
        if not verdict.admitted:
            return self.refusals.refusal(req, verdict.status)
        info = storage.info(lid)
        if info is None:
            return Response.to(req, StatusCode.EOK, entry_id=first)
        count, max_bytes = read_batch_bounds(count, max_bytes)
        count = min(count, (LAST_ID - first) // stride + 1)  # ids stay 64-bit
        run = storage.get_run(lid, first, stride, count, max_bytes)
        return Response.to(
            req, StatusCode.EOK, entry_id=first, lac=info.known_lac, body=pack_entries(run)
        )

    async def _read_lac(self, req: Request) -> Response:
        storage = self.bookie.storage
        assert storage is not None
        lid = req.ledger_id
        info = storage.info(lid)
        if info is None:
            return self.refusals.missing(req, None, StatusCode.ENOLEDGER)
        if req.timeout_ms > 0 and info.known_lac <= req.entry_id:
            wait = min(req.timeout_ms / 1000.0, self.config.long_poll_max)
            deadline = self.clock.monotonic() + wait
            loop = asyncio.get_running_loop()
            while info.known_lac <= req.entry_id and self.bookie.state is BookieState.SERVING:
                remaining = deadline - self.clock.monotonic()
                if remaining <= 0:
                    break
                moved = self.ledgers.lac_waiter(lid)
                timer = loop.call_later(remaining, _time_up, moved)
                try:
                    if not await moved:
                        break
                finally:
                    timer.cancel()
                    self.ledgers.forget_waiter(lid, moved)
                info = storage.info(lid) or info
        state = self.bookie.state
        if state is not BookieState.SERVING:
            raise BookieGoneError(f"bookie {self.bookie.bookie_id} is {state.value}")
        return Response.to(
            req,
            StatusCode.EOK,
            lac=info.known_lac,
            last_entry_id=storage.last_entry(lid),
            term=info.term,
            lafr=info.lafr,
        )

    def _write_lac(self, req: Request) -> Response:
        storage = self.bookie.storage
        assert storage is not None
        info = storage.info(req.ledger_id)
        verdict = change_verdict(req, info, self.refusals.tombstone(req, info))
        if not verdict.admitted:
            return self._change_refused(req, verdict, info)
        assert info is not None
        # Neither is journaled: a LAC forgotten in a crash only makes readers wait for the
        # next; a LAFR (a quiet writer's, or a takeover's end) only makes a takeover read
        # forward from further back, as with adds (adds.py).
        lac_moved = req.entry_id > info.explicit_lac
        lafr_moved = req.term != NO_TERM and lafr_recorded(info.term, req.term, req.lafr, info.lafr)
        if lac_moved:
            info.explicit_lac = req.entry_id
        if lafr_moved:
            info.lafr = req.lafr
        if lac_moved or lafr_moved:
            storage.set_info(req.ledger_id, info)
        if lac_moved:
            self.ledgers.lac_moved(req.ledger_id)
        return Response.to(req, StatusCode.EOK, lac=info.known_lac)

    def _list_entries(self, req: Request) -> Response:
        storage = self.bookie.storage
        assert storage is not None
        info = storage.info(req.ledger_id)
        verdict = listing_verdict(info, self.bookie.mode)
        if not verdict.admitted:
            if info is None:
                return self.refusals.missing(req, None, verdict.status)
            return Response.to(req, verdict.status)
        body = AvailabilityOfEntries.encode(storage.entry_ids(req.ledger_id))
        return Response.to(req, StatusCode.EOK, body=body)

    async def drop_ledgers(self, lids: Collection[int]) -> None:
        """Drop everything this bookie holds of each ledger, durably: a DELETE_LEDGER that
        proved the key, or garbage collection once the metadata is gone (gc.py).

        Returns once every add admitted before the drop has been answered too (they are
        journaled ahead of the sync below): the bookie answers nothing for a ledger after
        it said the ledger is dropped, since its tombstone admits no add from the start."""
        storage, journal = self.bookie.storage, self.bookie.journal
        assert storage is not None and journal is not None
        await storage.drop_ledgers(lids, journal.lsn)
        await journal.sync()

    async def _cut(self, req: Request) -> Response:
        storage, journal = self.bookie.storage, self.bookie.journal
        assert storage is not None and journal is not None
        lid = req.ledger_id
        if req.op == OpCode.TRIM and req.flags & TrimFlags.ABOVE:
            return await self._clean_above(req)
        info = storage.info(lid)
        verdict = change_verdict(req, info, self.refusals.tombstone(req, info))
        if not verdict.admitted:
            if (
                verdict.dropped
                and verdict.status == StatusCode.EOK
                and lid in storage.tombstones.pending
            ):
                # Asked again while the first drop runs (or after it failed): answered
                # once the tombstone is durable, by this drop or the first one.
                await self.drop_ledgers([lid])
            return self._change_refused(req, verdict, info)
        if req.op == OpCode.DELETE_LEDGER:
            await self.drop_ledgers([lid])
        else:
            await storage.cut(lid, "below", req.entry_id, journal.lsn)
        return Response.to(req, StatusCode.EOK)

    def _change_refused(self, req: Request, verdict: Verdict, info: LedgerInfo | None) -> Response:
        """The answer to a WRITE_LAC, DELETE_LEDGER or TRIM that ``change_verdict`` refused."""
        if verdict.dropped:
            return self.refusals.dropped_answer(req, verdict.status)
        if verdict.status == StatusCode.ENOLEDGER:
            return self.refusals.missing(req, info, verdict.status)
        return Response.to(req, verdict.status)

    async def _clean_above(self, req: Request) -> Response:
        """Unbounded ledgers: drop entries above req.entry_id, once per term (TrimFlags)."""
        storage, journal = self.bookie.storage, self.bookie.journal
        assert storage is not None and journal is not None
        lid = req.ledger_id
        # A TRIM ABOVE without a term reads no state (trim_above_verdict refuses it first).
        info = None if req.term == NO_TERM else storage.info(lid)
        digest_len = digest_len_of_trim(req.body)
        tombstone = None if req.term == NO_TERM else self.refusals.tombstone(req, info)
        verdict = trim_above_verdict(req, info, tombstone, digest_len is not None)
        if not verdict.admitted:
            if verdict.dropped:
                return self.refusals.dropped_answer(req, verdict.status)
            return Response.to(req, verdict.status, term=verdict.term)
        assert digest_len is not None
        # The term raise goes with the cut, decided under the truncation lock against the
        # state as it is then (Adds.truncate): not here, before the wait.
        cut = await self.adds.truncate(
            lid, req.master_key.hex(), req.entry_id, req.term, digest_len
        )
        if cut is Cut.MADE_BEFORE:
            await self.ledgers.durable(lid)  # that cut's record, if it is not yet
        elif cut is not Cut.MADE:
            return self.adds.cut_refused(req, cut)
        return Response.to(req, StatusCode.EOK, term=req.term)


def _time_up(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)
