"""The writing side of a ledger: pipelined adds, in-order acknowledgement, closing.

One LedgerWriter drives a ledger's writes on the runtime loop. Entries are sent
as soon as they are added (pipelining); entry e is acknowledged to the caller
once ack-quorum bookies of its write set hold it AND every earlier entry was
acknowledged. A bookie that fails (timeout, unreachable, error) is replaced by
an ensemble change (ensemble_change.py, a mixin of the writer): a new fragment
from the first unacknowledged entry, made durable by compare-and-swap before
anything is resent. One add on its way is a ``PendingAdd`` (pending.py); what each
bookie's answer means is answers.py (a mixin too).

Ledger recovery reuses the writer to write recovered entries back
(``recovery=True``): adds carry the recovery flag and a fixed LAC, and ensemble
changes stay in memory until recovery's closing compare-and-swap.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections import deque

from embedlog.errors import (
    BKError,
    LedgerClosedError,
    LedgerFencedError,
    MetadataVersionError,
    TlsHandshakeError,
)
from embedlog.ledger.admission import AddBudget
from embedlog.ledger.answers import AddAnswers, AnswerFor, BatchAnswerFor
from embedlog.ledger.bookie_client import UNKNOWN_OUTCOMES
from embedlog.ledger.context import ClientContext
from embedlog.ledger.ensemble_change import EnsembleChange
from embedlog.ledger.pending import Completion, PendingAdd
from embedlog.ledger.quorum import write_set
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.wire.entry import Digester, master_key
from embedlog.wire.limits import MAX_BATCH_BYTES, split_batches
from embedlog.wire.messages import (
    NO_TERM,
    AddFlags,
    OpCode,
    frame_entry,
)

log = logging.getLogger(__name__)

# What set_result raises on a future that is already done (asking done() first would take
# a concurrent future's lock once more per entry).
_ALREADY_DONE = (asyncio.InvalidStateError, concurrent.futures.InvalidStateError)

# Adds for one bookie that share a request at most (ADD_BATCH); their bytes are capped
# too (wire/limits.py MAX_BATCH_BYTES).
MAX_BATCH = 64


class LedgerWriter(AddAnswers, EnsembleChange):
    def __init__(
        self,
        ctx: ClientContext,
        md: LedgerMetadata,
        password: bytes,
        *,
        lac: int = -1,
        recovery: bool = False,
        fixed_lac: int | None = None,
        term: int = NO_TERM,
    ) -> None:
        self.ctx = ctx
        self.md = md
        self.digester = Digester(md.digest_type, password)
        self.key = master_key(password)
        self.recovery = recovery
        self.fixed_lac = fixed_lac
        self.term = term
        self.lac = lac
        self.next_entry_id = lac + 1
        self.pending: deque[PendingAdd] = deque()  # added, not yet acknowledged (in order)
        # The callers' adds in flight, from add_async until settled (admission.py).
        self.budget = AddBudget(
            ctx.max_adds_in_flight,
            ctx.max_bytes_in_flight,
            ctx.max_block_seconds,
            f"ledger {md.ledger_id}",
        )
        self._waiting: deque[PendingAdd] = deque()  # the tail of pending not yet sent
        self.error: BKError | None = None
        self._add_flags: int = AddFlags.RECOVERY if recovery else AddFlags.NONE
        self._failed: set[str] = set()  # bookies awaiting replacement
        self._retrying: set[str] = set()  # bookies with no replacement, retried after a pause
        # Members of the last fragment not readied for it (``prepare_bookies`` failed) and
        # kept for want of a replacement, each with the first id of the cut it still
        # needs: no entry whose write set holds one completes until it confirms that entry
        # itself (``_held_back``). Empty for bounded ledgers.
        self._unprepared: dict[str, int] = {}
        self._tls_refused: dict[str, TlsHandshakeError] = {}  # last failure was TLS
        self._changing: asyncio.Task[None] | None = None
        self._replacing = 0  # replacements in flight (see _complete)
        self._tasks: set[asyncio.Task[None]] = set()
        self._drained = asyncio.Event()
        self._drained.set()
        self._last_completion = 0.0
        self._lac_timer: asyncio.TimerHandle | None = None
        self._explicit_lac_sent = -1
        self._in_flight = 0  # entries sent and not yet acknowledged
        self._outbox: dict[tuple[str, int], list[PendingAdd]] = {}  # see _send
        self._outbox_due = False
        self._outbox_resends = False  # _send queued a resend since the last flush
        self._waiting_due = False
        # The write set of entry e is _write_sets[e % E] (round robin: see quorum.write_set),
        # and slot i stores the entries e with e % E in _slot_residues[i].
        size = md.ensemble_size
        self._write_sets = [write_set(start, size, md.write_quorum) for start in range(size)]
        self._slot_residues = [
            frozenset(r for r in range(size) if i in self._write_sets[r]) for i in range(size)
        ]
        # Whether acks and acknowledgements need no hook of a subclass (the unbounded
        # writer has both): the hot loops then do their work inline.
        cls = type(self)
        self._plain_acks = (
            cls._acked is LedgerWriter._acked and cls._acknowledged is LedgerWriter._acknowledged
        )

    # -- adding ------------------------------------------------------------------------------

    def add(
        self, payload: bytes, *, entry_flags: int = 0, add_flags: int = 0, cost: int = -1
    ) -> asyncio.Future[int]:
        """Queue an entry; the future resolves to its id once it is acknowledged in order."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.add_to(future, payload, entry_flags=entry_flags, add_flags=add_flags, cost=cost)
        return future

    def add_to(
        self,
        future: Completion,
        payload: bytes,
        *,
        entry_flags: int = 0,
        add_flags: int = 0,
        cost: int = -1,
    ) -> None:
        """``add`` with the caller's future (see ``Completion``); ``cost``: the payload
        bytes the caller took from ``budget`` for it (-1: none taken)."""
        if self.error is not None:
            if cost >= 0:
                self.budget.release(1, cost)
            future.set_exception(self.error)
            return
        eid = self.next_entry_id
        self.next_entry_id += 1
        lac = self.lac if self.fixed_lac is None else self.fixed_lac
        framed = self.digester.pack_framed(self.md.ledger_id, eid, lac, payload, entry_flags)
        self._queue(PendingAdd(eid, framed, future, self._add_flags | add_flags, cost))

    def add_packed(
        self, entry_id: int, packed: bytes, *, add_flags: int = 0
    ) -> asyncio.Future[int]:
        """Queue an already packed entry (recovery write-back); ids must come in order."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if self.error is not None:
            future.set_exception(self.error)
            return future
        if entry_id != self.next_entry_id:
            raise ValueError(f"entry {entry_id} out of order, expected {self.next_entry_id}")
        self.next_entry_id += 1
        framed = frame_entry(entry_id, packed)
        self._queue(PendingAdd(entry_id, framed, future, self._add_flags | add_flags))
        return future

    def _queue(self, p: PendingAdd) -> None:
        pending = self.pending
        pending.append(p)
        if len(pending) == 1:
            self._drained.clear()  # set again once pending is empty (_complete, fail)
        self._waiting.append(p)
        if not self._waiting_due:
            # Sent at the end of this loop iteration, together with every entry queued
            # meanwhile: one pass over the write sets for the whole run.
            self._waiting_due = True
            asyncio.get_running_loop().call_soon(self._send_queued)

    def _send_queued(self) -> None:
        """Send waiting entries, in order, while the window has room and no ensemble
        change is under way."""
        self._waiting_due = False
        if self._changing is not None or self.error is not None:
            return
        room = self.ctx.max_outstanding_adds - self._in_flight
        waiting = self._waiting
        run: list[PendingAdd] = []
        while room > 0 and waiting:
            if not self._may_send(waiting[0]):
                break
            run.append(waiting.popleft())
            room -= 1
        if run:
            self._send_run(run)

    def _may_send(self, p: PendingAdd) -> bool:
        """Hook: whether ``p`` may be sent now (unbounded: not past a fragment's end)."""
        return True

    async def drain(self) -> None:
        """Wait until every queued entry was acknowledged or failed."""
        while self.pending:
            await self._drained.wait()

    # -- sending -----------------------------------------------------------------------------

    def _send_run(self, run: list[PendingAdd]) -> None:
        """Send entries never sent before, in order, each to its write set. They all lie in
        the last fragment (an ensemble change starts one at the first unacknowledged
        entry), so each bookie of it takes its share of the run in one step."""
        for p in run:
            p.sent = True
        self._in_flight += len(run)
        first, ensemble = self.md.fragments[-1]
        if run[0].entry_id < first or not self.ctx.bookies.can_batch():
            for p in run:
                self._send_write_set(p)
            return
        size = len(ensemble)
        for idx, bookie in enumerate(ensemble):
            residues = self._slot_residues[idx]
            share = (
                run if len(residues) == size else [p for p in run if p.entry_id % size in residues]
            )
            if share:
                self._outbox_for(bookie, idx).extend(share)

    def _send_write_set(self, p: PendingAdd) -> None:
        """Send ``p`` to the bookies of its write set that have not acknowledged it."""
        ensemble = self.md.ensemble_for(p.entry_id)
        for idx in self._write_set(p.entry_id):
            if not p.has_ack(idx):
                self._send(p, idx, ensemble[idx])

    def _write_set(self, entry_id: int) -> list[int]:
        """Ensemble slots that store ``entry_id`` (``quorum.write_set``, precomputed)."""
        return self._write_sets[entry_id % self.md.ensemble_size]

    def _send(self, p: PendingAdd, idx: int, bookie: str) -> None:
        """Send ``p`` to ``bookie`` (slot ``idx``): adds queued for one bookie in the same
        loop iteration travel in one ADD_BATCH request (see ``_flush_outbox``)."""
        if self.ctx.bookies.can_batch():
            self._outbox_for(bookie, idx).append(p)
            self._outbox_resends = True
        elif p.framed:  # not an entry that released its bytes (see _flush_outbox)
            self._send_one(p, idx, bookie)

    def _outbox_for(self, bookie: str, idx: int) -> list[PendingAdd]:
        """The adds going to ``bookie`` (slot ``idx``) at the end of this loop iteration."""
        to = (bookie, idx)
        out = self._outbox.get(to)
        if out is None:
            out = self._outbox[to] = []
            if not self._outbox_due:
                self._outbox_due = True
                asyncio.get_running_loop().call_soon(self._flush_outbox)
        return out

    def _flush_outbox(self) -> None:
        self._outbox_due = False
        outbox, self._outbox = self._outbox, {}
        resends, self._outbox_resends = self._outbox_resends, False
        if self.error is not None:
            return  # failed meanwhile: nothing left to send for
        # Faults configured since these were queued: one request per entry after all.
        batching = self.ctx.bookies.can_batch()
        for (bookie, idx), queued in outbox.items():
            # An entry acknowledged since it was queued may have released its bytes (the
            # unbounded writer does): it is not sent again.
            items = [p for p in queued if p.framed]
            if resends:
                # A resend may have joined the entry's first send in this iteration: the
                # bookie refuses a batch holding one entry twice, which would look like a
                # failed bookie.
                items = list(dict.fromkeys(items))
            sizes = [len(p.framed) for p in items]
            for start, stop in split_batches(sizes, MAX_BATCH, MAX_BATCH_BYTES):
                run = items[start:stop]
                flags = run[0].flags
                if (
                    len(run) == 1
                    or not batching
                    or flags & AddFlags.TRUNCATE  # alone: the bookie's cut needs the slow path
                    or any(p.flags != flags for p in run)
                ):
                    for p in run:
                        self._send_one(p, idx, bookie)
                else:
                    self._send_batch(bookie, idx, run, flags)

    def _send_one(self, p: PendingAdd, idx: int, bookie: str) -> None:
        fut = self.ctx.bookies.add_nowait(
            bookie,
            self.md.ledger_id,
            p.entry_id,
            flags=p.flags,
            term=self.term,
            master_key=self.key,
            body=p.packed,
            lafr=self._lafr_for_adds(),
        )
        fut.add_done_callback(AnswerFor(self, p, idx, bookie))

    def _send_batch(self, bookie: str, idx: int, run: list[PendingAdd], flags: int) -> None:
        fut = self.ctx.bookies.add_batch_nowait(
            bookie,
            self.md.ledger_id,
            run[0].entry_id,
            b"".join([p.framed for p in run]),
            flags=flags,
            term=self.term,
            master_key=self.key,
            lafr=self._lafr_for_adds(),
        )
        fut.add_done_callback(BatchAnswerFor(self, run, idx, bookie))

    # Hooks the unbounded writer overrides (embedlog/unbounded/writer.py).

    def _lafr_for_adds(self) -> int:
        """The last add fully replicated, sent with every add (-1: not tracked)."""
        return -1

    def _counts(self, term: int) -> bool:
        """Whether an EOK answer of ``term`` counts (unbounded: only this writer's term)."""
        return True

    def _acked(self, p: PendingAdd, idx: int) -> None:
        """Bookie ``idx`` of ``p``'s ensemble acknowledged it."""
        if not p.settled:
            p.ack(idx)

    def _needed_acks(self) -> int:
        """Acks that complete an entry: AQ; unbounded recovery writes need the whole WQ."""
        return self.md.ack_quorum

    def _held_back(self, p: PendingAdd) -> bool:
        """Whether ``p`` waits for a member of its write set that was not readied for its
        fragment and has not confirmed it: that member may hold an older term's entry at
        the id, which readers asking it first would get."""
        ensemble = self.md.ensemble_for(p.entry_id)
        return any(
            ensemble[i] in self._unprepared and not p.has_ack(i)
            for i in self._write_set(p.entry_id)
        )

    def _complete(self) -> None:
        """Acknowledge, in order, every entry at the head that has enough acks.

        Nothing completes while a replacement is in flight (from the choice of the new
        fragment's first entry until the replaced bookies' acks are taken back): an ack
        counted then may come from a bookie the new fragment no longer lists for the entry,
        which would be acknowledged with fewer than AQ copies on the bookies the metadata
        names for it. BookKeeper delays acknowledgements the same way.
        """
        if self._replacing and not self.ctx.unsafe_ack_during_replacement:
            return
        need = self._needed_acks()
        pending = self.pending
        hook = not self._plain_acks
        done: list[PendingAdd] = []
        freed = freed_bytes = 0
        now = time.monotonic()
        unprepared = self._unprepared
        if unprepared:
            # Only members of the last fragment hold entries back (every entry below it
            # reached its whole write set before the fragment began); a candidate that was
            # never listed, or a member replaced since, must not keep this check running.
            members = self.md.last_fragment[1]
            for gone in [b for b in unprepared if b not in members]:
                del unprepared[gone]
        while pending and pending[0].acked >= need:
            if unprepared and self._held_back(pending[0]):
                break
            p = pending.popleft()
            self._in_flight -= 1
            self.lac = p.entry_id
            if hook:
                self._acknowledged(p)
            p.settled = True
            if p.cost >= 0:
                freed += 1
                freed_bytes += p.cost
            done.append(p)
        completed = bool(done)
        if completed:
            self.ctx.metrics.add_latency_seconds.observe_since(now, (p.created for p in done))
        if freed:
            # Before the futures complete: their done callbacks (on this thread, where
            # waiting for room is refused) find the room these adds made.
            self.budget.release(freed, freed_bytes)
        for p in done:
            try:
                p.future.set_result(p.entry_id)
            except _ALREADY_DONE:  # an asyncio caller cancelled it, or the writer failed it
                pass
        if not pending:
            self._drained.set()
        if completed:
            self.ctx.metrics.adds += len(done)
            self._progressed()
            self._last_completion = now
            self._schedule_explicit_lac()
            if self._waiting:
                self._send_queued()

    def _acknowledged(self, p: PendingAdd) -> None:
        """Hook: ``p`` was just acknowledged to its caller."""

    def _progressed(self) -> None:
        """Hook: one or more entries were just acknowledged."""

    def fail(self, error: BKError) -> None:
        """Fail every outstanding and future add with ``error``."""
        if self.error is None:
            self.error = error
        costs = [p.cost for p in self.pending if p.cost >= 0]
        if costs:
            self.budget.release(len(costs), sum(costs))  # before any callback runs
        self.ctx.metrics.adds_failed += len(self.pending)
        while self.pending:
            p = self.pending.popleft()
            p.settled = True
            if not p.future.done():
                p.future.set_exception(error)
        self._waiting.clear()
        self._in_flight = 0
        self._drained.set()
        if self._lac_timer is not None:
            self._lac_timer.cancel()

    # -- explicit LAC ------------------------------------------------------------------------

    def _schedule_explicit_lac(self) -> None:
        interval = self.ctx.explicit_lac_interval
        if interval <= 0 or self.recovery or self._lac_timer is not None:
            return
        self._lac_timer = asyncio.get_running_loop().call_later(interval, self._explicit_lac_due)

    def _explicit_lac_due(self) -> None:
        self._lac_timer = None
        if self.error is not None or self.lac <= self._explicit_lac_sent:
            return
        idle = time.monotonic() - self._last_completion
        interval = self.ctx.explicit_lac_interval
        if idle < interval:
            self._lac_timer = asyncio.get_running_loop().call_later(
                interval - idle, self._explicit_lac_due
            )
            return
        lac = self.lac
        self._explicit_lac_sent = lac
        for bookie in self.md.last_fragment[1]:
            task = asyncio.get_running_loop().create_task(self._send_lac(bookie, lac))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send_lac(self, bookie: str, lac: int) -> None:
        try:
            await self.ctx.bookies.call(
                bookie,
                OpCode.WRITE_LAC,
                self.md.ledger_id,
                lac,
                term=self.term,
                master_key=self.key,
            )
        except UNKNOWN_OUTCOMES:
            pass  # best effort: the LAC also travels with the next entry

    # -- closing -----------------------------------------------------------------------------

    async def close(self) -> LedgerMetadata:
        """Close as the writer: CLOSED with last entry = LAC, by compare-and-swap."""
        await self.drain()
        if self._lac_timer is not None:
            self._lac_timer.cancel()
            self._lac_timer = None
        md = self.md
        while True:
            if md.state is LedgerState.CLOSED:
                if md.last_entry_id == self.lac:
                    self.md = md
                    self._closed()
                    return md
                raise LedgerClosedError(
                    f"ledger {md.ledger_id} was closed at entry {md.last_entry_id} by another "
                    f"client, but this writer confirmed up to {self.lac}"
                )
            if md.state is LedgerState.IN_RECOVERY:
                raise LedgerFencedError(
                    f"ledger {md.ledger_id} is being recovered by another client; "
                    "its last entry will be decided by that recovery"
                )
            closed = md.evolve(state=LedgerState.CLOSED, last_entry_id=self.lac)
            try:
                self.md = await self.ctx.meta(self.ctx.metadata.write_ledger, closed)
                self._closed()
                return self.md
            except MetadataVersionError:
                md = await self.ctx.meta(self.ctx.metadata.read_ledger, md.ledger_id)

    def _closed(self) -> None:
        if self.error is None:
            self.error = LedgerClosedError(f"ledger {self.md.ledger_id} is closed")

    def stop(self, error: BKError | None = None) -> None:
        """Forget outstanding work. With ``error`` (the client is closing), every add not
        acknowledged yet fails with it, rather than wait for answers nobody will act on:
        its outcome is unknown (it may be stored), as after any error."""
        if error is not None and self.pending:
            self.fail(error)
        self.budget.shut(
            LedgerClosedError(
                f"ledger {self.md.ledger_id}: the client was closed; this add was not queued"
            )
        )
        for task in list(self._tasks):
            task.cancel()
        if self._lac_timer is not None:
            self._lac_timer.cancel()
