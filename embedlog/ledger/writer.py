"""The writing side of a ledger: the asyncio driver of its add pipeline, and closing.

One LedgerWriter drives a ledger's writes on the runtime loop. What the adds' state
means (pending adds, ack counting, in-order acknowledgement, replacing a bookie that
failed) is the add pipeline's (pipeline.py), which does no I/O; this writer feeds it
the callers' adds and the bookies' answers, and carries out what it asks for: it sends
frames (sending.py: the adds for one bookie in one loop turn share an ADD_BATCH request),
completes and fails the callers' futures, runs ensemble changes (ensemble_change.py:
the bookies available, readying, the metadata compare-and-swap) and the pauses of
retried bookies. A quiet writer tells the bookies its LAC (explicit_lac.py). How a
stream's term writer counts and replaces differs by the policy it gives the pipeline
(policy.py; embedlog/unbounded/policy.py).

Ledger recovery reuses the writer to write recovered entries back
(``recovery=True``): adds carry the recovery flag and a fixed LAC, and ensemble
changes stay in memory until recovery's closing compare-and-swap.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections import deque
from collections.abc import Coroutine
from typing import Any

from embedlog.errors import (
    BKError,
    LedgerClosedError,
    LedgerDeletedError,
    NoSuchLedgerInMetadataError,
    NotEnoughBookiesError,
)
from embedlog.ledger.admission import AddBudget
from embedlog.ledger.answers import batch_verdicts
from embedlog.ledger.closing import close_as_writer
from embedlog.ledger.context import ClientContext
from embedlog.ledger.ensemble_change import Replaced, replace_bookies
from embedlog.ledger.explicit_lac import ExplicitLac
from embedlog.ledger.pending import Completion, PendingAdd
from embedlog.ledger.pipeline import AddPipeline
from embedlog.ledger.policy import AddPolicy, BoundedPolicy
from embedlog.ledger.sending import Sender
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import Digester, master_key
from embedlog.wire.messages import NO_TERM, AddFlags, FrameError, Response, frame_entry

log = logging.getLogger(__name__)

# What set_result raises on a future that is already done (asking done() first would take
# a concurrent future's lock once more per entry).
_ALREADY_DONE = (asyncio.InvalidStateError, concurrent.futures.InvalidStateError)


class LedgerWriter:
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
        policy: AddPolicy | None = None,
    ) -> None:
        self.ctx = ctx
        self._now = ctx.clock.monotonic  # read per add: bound once
        self.digester = Digester(md.digest_type, password)
        self.key = master_key(password)
        self.recovery = recovery
        self.fixed_lac = fixed_lac
        self.term = term
        self.policy: AddPolicy = BoundedPolicy() if policy is None else policy
        self.pl = AddPipeline(
            md,
            self.policy,
            term=term,
            lac=lac,
            max_outstanding=ctx.max_outstanding_adds,
            can_batch=ctx.bookies.can_batch,
            quorum_timeout=ctx.add_entry_quorum_timeout,
            unsafe_ack_during_replacement=ctx.unsafe_ack_during_replacement,
            unsafe_ack_from_replaced_bookie=ctx.unsafe_ack_from_replaced_bookie,
        )
        # The callers' adds in flight, from add_async until settled (admission.py).
        self.budget = AddBudget(
            ctx.max_adds_in_flight,
            ctx.max_bytes_in_flight,
            ctx.max_block_seconds,
            f"ledger {md.ledger_id}",
        )
        self._add_flags: int = AddFlags.RECOVERY if recovery else AddFlags.NONE
        # The task of the change under way (the pipeline's phase says it is not OPEN).
        self._changing: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._drained = asyncio.Event()
        self._drained.set()
        self.explicit_lac = ExplicitLac(
            ctx,
            self.pl,
            term,
            self.key,
            self._spawn,
            self.policy.lafr_for_adds,
            enabled=not recovery,
        )
        # The loop callbacks that send this turn's outbox and queued adds, once scheduled
        # (send_now runs them early and cancels them).
        self._outbox_due: asyncio.Handle | None = None
        self._waiting_due: asyncio.Handle | None = None
        self._sender = Sender(ctx, md.ledger_id, term, self.key, self.policy.lafr_for_adds, self)

    # The pipeline's state that callers read.

    @property
    def md(self) -> LedgerMetadata:
        return self.pl.md

    @md.setter
    def md(self, md: LedgerMetadata) -> None:
        self.pl.md = md

    @property
    def lac(self) -> int:
        return self.pl.lac

    @property
    def next_entry_id(self) -> int:
        return self.pl.next_entry_id

    @property
    def pending(self) -> deque[PendingAdd]:
        """Added, not yet acknowledged (in order)."""
        return self.pl.pending

    @property
    def error(self) -> BKError | None:
        return self.pl.error

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
        pl = self.pl
        if pl.error is not None:
            if cost >= 0:
                self.budget.release(1, cost)
            future.set_exception(pl.error)
            return
        eid = pl.next_entry_id
        pl.next_entry_id += 1
        lac = pl.lac if self.fixed_lac is None else self.fixed_lac
        framed = self.digester.pack_framed(pl.md.ledger_id, eid, lac, payload, entry_flags)
        self._queue(PendingAdd(eid, framed, future, self._add_flags | add_flags, cost, self._now()))

    def add_packed(
        self, entry_id: int, packed: bytes, *, add_flags: int = 0
    ) -> asyncio.Future[int]:
        """Queue an already packed entry (recovery write-back); ids must come in order."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        pl = self.pl
        if pl.error is not None:
            future.set_exception(pl.error)
            return future
        if entry_id != pl.next_entry_id:
            raise ValueError(f"entry {entry_id} out of order, expected {pl.next_entry_id}")
        pl.next_entry_id += 1
        framed = frame_entry(entry_id, packed)
        flags = self._add_flags | add_flags
        self._queue(PendingAdd(entry_id, framed, future, flags, -1, self._now()))
        return future

    def _queue(self, p: PendingAdd) -> None:
        pl = self.pl
        pending = pl.pending
        if not pending:
            self._drained.clear()  # set again once pending is empty (_settle, _fail_out)
        # AddPipeline.queue, inlined: this is per entry.
        pending.append(p)
        pl.waiting.append(p)
        if self._waiting_due is None:
            # Sent at the end of this loop iteration, together with every entry queued
            # meanwhile: one pass over the write sets for the whole run.
            self._waiting_due = asyncio.get_running_loop().call_soon(self._send_queued)

    def _send_queued(self) -> None:
        self._waiting_due = None
        self.pl.send_queued()
        self._carry_out()

    async def drain(self) -> None:
        """Wait until every queued entry was acknowledged or failed."""
        while self.pl.pending:
            await self._drained.wait()

    # -- carrying out the pipeline's effects --------------------------------------------------

    def _carry_out(self) -> None:
        """Carry out what the pipeline's last event asked for: sends first, as they were
        decided, then changes and retries, then completions and failures (whose callbacks
        may add more)."""
        pl = self.pl
        if pl.direct:
            direct, pl.direct = pl.direct, []
            for p, idx, bookie in direct:
                self._send_one(p, idx, bookie)
        if pl.outbox and self._outbox_due is None:
            self._outbox_due = asyncio.get_running_loop().call_soon(self._flush_outbox)
        if pl.start_change:
            pl.start_change = False
            self._changing = asyncio.get_running_loop().create_task(self._change_ensemble())
        if pl.retries:
            retries, pl.retries = pl.retries, []
            for bookie in retries:
                self._spawn(self._retry(bookie))
        if pl.done:
            self._settle()
        if pl.failures:
            self._fail_out()
        if pl.rollover is not None:
            at, pl.rollover = pl.rollover, None
            self._start_rollover(at)

    def _settle(self) -> None:
        """Complete the futures of the adds the pipeline acknowledged, in order."""
        pl = self.pl
        done, pl.done = pl.done, []
        now = self._now()
        self.ctx.metrics.add_latency_seconds.observe_since(now, (p.created for p in done))
        if pl.freed:
            # Before the futures complete: their done callbacks (on this thread, where
            # waiting for room is refused) find the room these adds made.
            self.budget.release(pl.freed, pl.freed_bytes)
            pl.freed = pl.freed_bytes = 0
        for p in done:
            try:
                p.future.set_result(p.entry_id)
            except _ALREADY_DONE:  # an asyncio caller cancelled it, or the writer failed it
                pass
        if not pl.pending:
            self._drained.set()
        self.ctx.metrics.adds += len(done)
        pl.progressed()
        self._progressed()
        self.explicit_lac.completed(now)
        if pl.waiting:
            self._send_queued()

    def _progressed(self) -> None:
        """Entries were just acknowledged (the stream writer's LAC prompts follow)."""

    def _fail_out(self) -> None:
        pl = self.pl
        failures, pl.failures = pl.failures, []
        for error, failed in failures:
            costs = [p.cost for p in failed if p.cost >= 0]
            if costs:
                self.budget.release(len(costs), sum(costs))  # before any callback runs
            self.ctx.metrics.adds_failed += len(failed)
            for p in failed:
                if not p.future.done():
                    p.future.set_exception(error)
        self._drained.set()
        self.explicit_lac.cancel()
        self._failed_out()

    def _failed_out(self) -> None:
        """The writer failed (the stream writer wakes what waits for its progress)."""

    def fail(self, error: BKError) -> None:
        """Fail every outstanding and future add with ``error``."""
        if isinstance(error, NoSuchLedgerInMetadataError):
            # The ledger was there when this writer opened it: a rollover, ensemble change
            # or close that finds its node gone raced a delete that finished first.
            error = LedgerDeletedError(
                f"ledger {self.md.ledger_id} was deleted while this writer changed its "
                "metadata: nothing more can be added to it; create a new ledger (or the "
                "stream again) to go on"
            )
        self.pl.fail(error)
        self._carry_out()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _start_rollover(self, at: int) -> None:
        """A new fragment must start at ``at`` (only a stream's policy asks for one)."""
        raise NotImplementedError(f"ledger {self.md.ledger_id}: no rollover for this writer")

    # -- sending -----------------------------------------------------------------------------

    def _send(self, p: PendingAdd, idx: int, bookie: str) -> None:
        """Send ``p`` to ``bookie`` (slot ``idx``) in this loop turn's batch for it."""
        self.pl.send(p, idx, bookie)
        self._carry_out()

    def _outbox_for(self, bookie: str, idx: int) -> list[PendingAdd]:
        """The adds going to ``bookie`` (slot ``idx``) at the end of this loop iteration."""
        out = self.pl.outbox.setdefault((bookie, idx), [])
        self._carry_out()
        return out

    def send_now(self) -> None:
        """Send what was queued in this loop turn now, not at its end (the add inbox took
        all it had: inbox.py)."""
        if self._waiting_due is not None:
            self._waiting_due.cancel()
            self._send_queued()
        if self._outbox_due is not None:
            self._outbox_due.cancel()
            self._flush_outbox()

    def _flush_outbox(self) -> None:
        self._outbox_due = None
        pl = self.pl
        outbox, pl.outbox = pl.outbox, {}
        resends, pl.outbox_resends = pl.outbox_resends, False
        if pl.error is not None:
            return  # failed meanwhile: nothing left to send for
        self._sender.flush(outbox, resends)

    def _send_one(self, p: PendingAdd, idx: int, bookie: str) -> None:
        self._sender.one(p, idx, bookie)

    # -- answers -----------------------------------------------------------------------------

    def _on_add_answer(
        self, fut: asyncio.Future[Response], p: PendingAdd, idx: int, bookie: str
    ) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            self.pl.no_answer(exc, p, bookie, self._now())
        else:
            resp = fut.result()
            status = resp.status
            # The time matters only to a refusal (the bookie is suspected from then on).
            now = 0.0 if status == StatusCode.EOK else self._now()
            self.pl.on_results([p], idx, bookie, [(status, resp.term)], now)
        self._carry_out()

    def _on_batch_answer(
        self, fut: asyncio.Future[Response], run: list[PendingAdd], idx: int, bookie: str
    ) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        pl = self.pl
        if exc is None:
            try:
                verdicts = batch_verdicts(fut.result().body, len(run))
            except FrameError as bad:
                exc = bad
            else:
                if isinstance(verdicts, int):
                    pl.on_all_ok(run, idx, bookie, verdicts)
                else:
                    pl.on_results(run, idx, bookie, verdicts, self._now())
        if exc is not None:
            pl.no_answer(exc, run[0], bookie, self._now())
        self._carry_out()

    def _bookie_failed(self, bookie: str) -> None:
        self.pl.bookie_failed(bookie, self._now())
        self._carry_out()

    # -- replacing bookies -------------------------------------------------------------------

    async def _change_ensemble(self) -> None:
        try:
            while self.pl.failed and self.pl.error is None:
                await self._replace_failed()
        except BKError as exc:
            self.fail(exc)
        except Exception as exc:  # a bug must not leave adds hanging forever
            log.exception("ensemble change of ledger %s failed", self.md.ledger_id)
            self.fail(NotEnoughBookiesError(f"ensemble change failed: {exc}"))
        finally:
            self._changing = None
            self.pl.end_change()
            self._send_queued()

    async def _replace_failed(self) -> None:
        pl = self.pl
        plan = pl.plan_replacement()
        self._carry_out()  # (pinned bookies are retried)
        if plan is None:
            return
        try:
            outcome = await replace_bookies(
                self.ctx,
                plan,
                lambda: pl.exclusions(plan, self._now()),
                self.prepare_bookies,
                recovery=self.recovery,
                term=self.term,
            )
        except BaseException:
            # Nothing completes on the old ensemble then. The compare-and-swap may have
            # been applied though its answer was lost (a ZooKeeper ConnectionLoss), and
            # then the metadata lists replacements for acks that still count here. The
            # writer fails (its callers learn an unknown outcome), as BookKeeper's does.
            pl.replacement_aborted()
            raise
        if isinstance(outcome, Replaced):
            if outcome.md is not None:
                self.ctx.metrics.ensemble_changes += 1
            pl.replaced(plan, outcome.md, outcome.replaced, outcome.ready)
        else:
            pl.replacement_lost(plan, outcome)
        self._carry_out()
        if pl.error is None:
            pl.resumed()
            self._carry_out()

    async def prepare_bookies(self, bookies: set[str], first: int) -> set[str]:
        """Ready new members of a fragment starting at ``first``; returns those that are.

        Nothing to do for bounded ledgers (a stream's term writer clears what older terms
        left, see ``embedlog/unbounded/writer.py``).
        """
        return bookies

    async def _retry(self, bookie: str) -> None:
        """No replacement for ``bookie``: its missing entries are resent after a pause."""
        pl = self.pl
        try:
            await asyncio.sleep(min(self.ctx.bookies.request_timeout, 0.5))
        except asyncio.CancelledError:
            pl.retrying.discard(bookie)
            raise
        retry = pl.retry_due(bookie, self._now())
        self._carry_out()
        if retry is None:
            return
        try:
            ready = await self.prepare_bookies({bookie}, retry.cut)
        except BKError as exc:  # another term took over, or the key was refused
            self.fail(exc)
            return
        pl.retry_readied(retry, ready)
        self._carry_out()

    # -- closing -----------------------------------------------------------------------------

    async def close(self) -> LedgerMetadata:
        """Close as the writer: CLOSED with last entry = LAC, by compare-and-swap."""
        await self.drain()
        self.explicit_lac.cancel_and_forget()
        self.md = await close_as_writer(self.ctx, self.md, self.lac)
        self._closed()
        return self.md

    def _closed(self) -> None:
        if self.pl.error is None:
            self.pl.error = LedgerClosedError(f"ledger {self.md.ledger_id} is closed")

    def stop(self, error: BKError | None = None) -> None:
        """Forget outstanding work. With ``error`` (the client is closing), every add not
        acknowledged yet fails with it, rather than wait for answers nobody will act on:
        its outcome is unknown (it may be stored), as after any error."""
        if error is not None and self.pl.pending:
            self.fail(error)
        self.budget.shut(
            LedgerClosedError(
                f"ledger {self.md.ledger_id}: the client was closed; this add was not queued"
            )
        )
        for task in list(self._tasks):
            task.cancel()
        self.explicit_lac.cancel()
