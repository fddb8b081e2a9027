"""The add path: ADD and ADD_BATCH admitted (every check), stored (write cache and
journal) and answered once durable; and an unbounded ledger's truncation, which a
truncating add (a takeover's no-op) and TRIM ABOVE make.

The hot path of a bookie: a plain add or a batch from ``Bookie.handle_nowait`` runs
without a task of its own and is answered from the journal's group commit. A part of
the Bookie (embedlog/bookie/base.py): it gets the ledger table, the refusals, the
flusher's early flush, the metrics and the config, and reads the bookie's storage,
journal, mode and state through ``Served``.
"""

from __future__ import annotations

import asyncio
import enum
from typing import Protocol

from embedlog.bookie.base import BookieState, Served
from embedlog.bookie.config import BookieConfig
from embedlog.bookie.index import LedgerInfo
from embedlog.bookie.journal import Durable
from embedlog.bookie.ledgers import LedgerTable
from embedlog.bookie.records import add_prefix, batch_prefix, state_record, truncate_record
from embedlog.bookie.refusals import Refusals
from embedlog.bookie.terms import bookie_accepts_term
from embedlog.bookie.truncation import digest_len_of_noop, dropped_by_truncation
from embedlog.bookie.verdicts import Verdict, add_refused_as_sent, ledger_admits_add
from embedlog.errors import BookieIOError
from embedlog.metrics import BookieMetrics
from embedlog.runtime import settle
from embedlog.transport.server import BookieGoneError, Reply
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import FRAMED_HEADER, HEADER
from embedlog.wire.limits import MAX_PACKED_ENTRY, oversized
from embedlog.wire.messages import (
    ENTRY_FRAME,
    NO_TERM,
    AddFlags,
    FrameError,
    Request,
    Response,
    pack_entries,
    pack_results,
)

# What parse_batch gives: the entries accepted, each one's verdict (None: all EOK), max LAC.
Batch = tuple[dict[int, bytes], list[int] | None, int]


class Cut(enum.Enum):
    """What ``Adds.truncate`` did with a truncating request."""

    MADE = "made"  # the cut and the term raise it carries, durable
    MADE_BEFORE = "made before"  # this term's cut was made already: nothing to do
    STALE = "stale"  # a newer term took over while the request waited for the lock
    DROPPED = "dropped"  # the ledger was dropped (deleted) while it waited


class _AddPlan:
    """What admitting an add (or an ADD_BATCH) decided, carried to storing and answering it.

    On the no-task path (``answer_by``) it is also the journal's callback that answers
    once durable. One small object rather than a closure per request: adds in flight
    live long enough for the garbage collector to move them to its oldest generation,
    and a closure is several tracked objects (function, cells, tuple).
    """

    __slots__ = (
        "adds",
        "batch",
        "changed",
        "entries",
        "info",
        "lac",
        "old_lac",
        "reply",
        "req",
        "statuses",
        "term_changed",
    )

    def __init__(
        self,
        info: LedgerInfo,
        entries: dict[int, bytes],
        lac: int,
        changed: bool,
        term_changed: bool,
    ) -> None:
        self.info = info
        self.entries = entries  # {entry id: entry} to store, in the order they came
        self.lac = lac  # the highest LAC in the headers of the entries stored
        self.changed = changed
        self.term_changed = term_changed
        self.old_lac = -1
        self.batch = False  # an ADD_BATCH (answered with a verdict per entry)
        # ADD_BATCH with an entry refused for its header: each entry's verdict, in batch
        # order (EOK for those stored); None when all were accepted.
        self.statuses: list[int] | None = None

    def answer_by(self, adds: Adds, req: Request, reply: Reply) -> _AddPlan:
        self.adds, self.req, self.reply = adds, req, reply
        return self

    def __call__(self, exc: BaseException | None) -> None:
        if exc is None:
            self.reply(self.adds.added(self.req, self))
        else:
            self.adds.refusals.answer_failure(self.req, exc, self.reply)


def parse_batch(ledger_id: int, body: bytes) -> tuple[dict[int, bytes], list[int] | None, int]:
    """An ADD_BATCH body, parsed and each entry checked against its header in one pass:
    the entries accepted ({entry id: entry}, in batch order), every entry's verdict
    (None when all are EOK; else EOK or EBADREQ each) and the highest LAC their headers
    carry. FrameError if the body is not whole or repeats an entry id.

    The hot path of a bookie: no object per entry but the entry's own bytes (the dict is
    what the write cache takes as it is), and no verdict list unless one is refused.
    """
    accepted: dict[int, bytes] = {}
    statuses: list[int] | None = None
    refused: list[int] = []  # ids of entries refused for their header
    lac = -1
    frame_size, header_size = ENTRY_FRAME.size, HEADER.size
    # An entry's frame and header read at once: the common case costs one unpack.
    framed, framed_size = FRAMED_HEADER.unpack_from, FRAMED_HEADER.size
    frame = ENTRY_FRAME.unpack_from
    pos, end, count = 0, len(body), 0
    while pos < end:
        if pos + framed_size <= end:
            entry_id, n, h_ledger, h_entry, h_lac, _flags = framed(body, pos)
            good = n >= header_size and h_ledger == ledger_id and h_entry == entry_id
        elif pos + frame_size <= end:  # too short for a header: refused, if whole
            entry_id, n = frame(body, pos)
            good = False
        else:
            raise FrameError("batch body truncated inside an entry's id and length")
        pos += frame_size
        stop = pos + n
        if stop > end:
            raise FrameError("batch body truncated inside an entry")
        if good:
            accepted[entry_id] = body[pos:stop]
            if h_lac > lac:
                lac = h_lac
            if statuses is not None:
                statuses.append(StatusCode.EOK)
        else:
            if statuses is None:
                statuses = [StatusCode.EOK] * count
            statuses.append(StatusCode.EBADREQ)
            refused.append(entry_id)
        count += 1
        pos = stop
    if len(accepted) + len(set(refused)) != count or not accepted.keys().isdisjoint(refused):
        raise FrameError("batch repeats an entry id")
    return accepted, statuses, lac


class EarlyFlush(Protocol):
    """What an add asks of the flushes (flushing.py's Flusher)."""

    def maybe_early(self, cache_bytes: int) -> None: ...


class Adds:
    def __init__(
        self,
        bookie: Served,
        ledgers: LedgerTable,
        refusals: Refusals,
        flusher: EarlyFlush,
        metrics: BookieMetrics,
        config: BookieConfig,
    ) -> None:
        self.bookie = bookie
        self.ledgers = ledgers
        self.refusals = refusals
        self.flusher = flusher
        self.metrics = metrics
        self.config = config

    async def add(self, req: Request) -> Response:
        if req.flags & AddFlags.TRUNCATE:
            # The cut (and the term raise it carries) first, decided under the truncation
            # lock against the state as it is then; the add is admitted after it, against
            # the state the cut left. Admitted now and stored after the wait, it would
            # store a state read before another request made or changed it.
            refused = self._refused(req)
            if refused is not None:
                return refused
            cut = await self.truncate(
                req.ledger_id,
                req.master_key.hex(),
                req.entry_id,
                req.term,
                digest_len_of_noop(req.body),
            )
            if cut is not Cut.MADE and cut is not Cut.MADE_BEFORE:
                return self.cut_refused(req, cut)
        plan = self._admit_add(req)
        if isinstance(plan, Response):
            return plan
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._store_add(req, plan, settle(fut))
        await fut
        return self.added(req, plan)

    # An add in three steps, so that the hot path (handle_nowait) and ``add`` share them:
    # admit (every check, and the state changes the add implies), store (write cache and
    # journal; the callback fires once it is durable), answer.

    def _admit_add(self, req: Request, batch: Batch | None = None) -> Response | _AddPlan:
        """A refusal, or the plan for the add (or ADD_BATCH, ``parse_batch``'s ``batch``)
        that passed every check; a batch's entries whose header does not match are refused
        alone."""
        judged = self._judge(req, batch)
        if isinstance(judged, Response):
            return judged
        verdict, info, accepted, statuses, lac = judged
        storage = self.bookie.storage
        assert storage is not None
        lid = req.ledger_id
        changed = verdict.creates
        if info is None:
            info = LedgerInfo(master_key=req.master_key.hex())
        term_changed = verdict.raises_term
        if term_changed:
            info.term = req.term
        if req.lafr > info.lafr:
            # Not journaled (like the explicit LAC): a LAFR forgotten in a crash only makes
            # a takeover read forward from further back, never skip an entry.
            info.lafr = req.lafr
            if not changed:
                storage.set_info(lid, info)
        plan = _AddPlan(info, accepted, lac, changed, term_changed)
        plan.batch = batch is not None
        plan.statuses = statuses
        return plan

    def _refused(self, req: Request) -> Response | None:
        """The refusal of a plain add, or None if it passes every check; changes nothing."""
        judged = self._judge(req, None)
        return judged if isinstance(judged, Response) else None

    def _judge(
        self, req: Request, batch: Batch | None
    ) -> Response | tuple[Verdict, LedgerInfo | None, dict[int, bytes], list[int] | None, int]:
        """Every check of an add, changing nothing: its refusal, or (the verdict, the
        ledger's state, the entries to store, each entry's status, the highest LAC)."""
        bookie = self.bookie
        storage = bookie.storage
        assert storage is not None
        lid = req.ledger_id
        statuses: list[int] | None = None
        if batch is None:  # a plain add
            body = req.body
            lac = -1
            well_formed = HEADER.size <= len(body) <= MAX_PACKED_ENTRY
            if well_formed:
                h_ledger, h_entry, lac, _flags = HEADER.unpack_from(body)
                well_formed = h_ledger == lid and h_entry == req.entry_id
            accepted = {req.entry_id: body}
        else:
            accepted, statuses, lac = batch
            # Only a body above the limit can hold an entry above it: no cost per entry.
            well_formed = bool(accepted) and not (
                len(req.body) > MAX_PACKED_ENTRY and oversized(accepted)
            )
        verdict = add_refused_as_sent(bookie.mode, well_formed)
        if verdict is None:  # the ledger's state decides (verdicts.add_verdict)
            info = storage.info(lid)
            tombstone = None if info is not None else storage.tombstones.key(lid)
            verdict = ledger_admits_add(req, info, tombstone)
        else:
            info = None
        if not verdict.admitted:
            if verdict.dropped:
                return self.refusals.dropped_answer(req, verdict.status, statuses)
            return self.refusals.refusal(req, verdict.status, statuses, verdict.term)
        return verdict, info, accepted, statuses, lac

    def _store_add(self, req: Request, plan: _AddPlan, on_durable: Durable) -> None:
        bookie = self.bookie
        storage, journal = bookie.storage, bookie.journal
        assert storage is not None and journal is not None
        lid, info, entries = req.ledger_id, plan.info, plan.entries
        state_waits = plan.term_changed
        # A takeover's no-op is journaled even when adds skip the journal: its cut left an
        # older term's entry at its id (the cut is above it), which the cut's own flush may
        # have made durable; a crash that lost the no-op from the write cache brought that
        # entry back, never acknowledged and truncated (simulator seed 7142 of
        # ``unbounded-corrupt``: readers then disagreed on the stream). One small record
        # per takeover.
        journaled = self.config.journal_write_data or bool(req.flags & AddFlags.TRUNCATE)
        if plan.changed or plan.term_changed:
            storage.set_info(lid, info)
            # With the adds journaled behind it, their fsync covers the state record.
            self.ledgers.append_state(
                journal,
                lid,
                state_record(lid, info),
                on_durable if state_waits and not journaled else None,
            )
        plan.old_lac = info.known_lac
        metrics = self.metrics
        metrics.add_requests += 1
        if plan.batch:
            storage.put_many(lid, entries, lac=plan.lac)
            metrics.entries_added += len(entries)
        else:
            storage.put(lid, req.entry_id, req.body, lac=plan.lac)
            metrics.entries_added += 1
        if (
            self.config.unsafe_limbo_clears_at_first_resend
            and info.limbo
            and not req.flags & AddFlags.RECOVERY
        ):
            self.ledgers.first_live.setdefault(lid, min(entries))
        if not journaled:
            if not state_waits:
                on_durable(None)  # acknowledged from the write cache (BP-46)
        elif not plan.batch:
            journal.append_then(req.body, on_durable, prefix=add_prefix(lid, req.entry_id))
        else:  # one record for the batch: its body as it came, unless some entry was refused
            body = req.body if plan.statuses is None else pack_entries(list(entries.items()))
            journal.append_then(body, on_durable, prefix=batch_prefix(lid))

    def added(self, req: Request, plan: _AddPlan) -> Response:
        if plan.info.known_lac > plan.old_lac:
            self.ledgers.lac_moved(req.ledger_id)
        storage = self.bookie.storage
        assert storage is not None
        self.flusher.maybe_early(storage.cache_bytes)
        # The request's term (the model's response term): the client discards answers of
        # another term, and a takeover that raced this add must not make its ack look stale.
        term = req.term if req.term != NO_TERM else plan.info.term
        if not plan.batch:
            return Response.to(req, StatusCode.EOK, entry_id=req.entry_id, term=term)
        statuses = plan.statuses
        if statuses is None:  # every entry stored
            body = pack_results([(StatusCode.EOK, term)]) * len(plan.entries)
            return Response.to(req, StatusCode.EOK, entry_id=req.entry_id, body=body)
        results = [(status, term) for status in statuses]
        failed = next(s for s in statuses if s != StatusCode.EOK)
        return Response.to(req, failed, entry_id=req.entry_id, body=pack_results(results))

    def add_nowait(self, req: Request, reply: Reply, batch: Batch | None = None) -> None:
        """A plain add (or an ADD_BATCH, ``parse_batch``'s ``batch``) without a task:
        refused at once, or answered once durable."""
        state = self.bookie.state
        if state is not BookieState.SERVING:
            reply(BookieGoneError(f"bookie {self.bookie.bookie_id} is {state.value}"))
            return
        try:
            plan = self._admit_add(req, batch)
            if isinstance(plan, Response):
                reply(plan)
                return
            self._store_add(req, plan, plan.answer_by(self, req, reply))
        except (BookieIOError, OSError) as exc:
            self.refusals.answer_failure(req, exc, reply)

    def add_batch(self, req: Request, reply: Reply) -> None:
        """ADD_BATCH: one writer's entries of one ledger, each a plain add of its own
        (header checked and cached one by one, journaled together in one record), with
        one answer carrying a verdict per entry once that record is durable.

        The ledger's checks (fence, term, password) are made once for the whole batch:
        the batch is admitted and stored in one step of the loop, so no fence or takeover
        can come between its entries, and each entry would have met the same verdict.
        """
        if req.flags & AddFlags.TRUNCATE:  # never batched: their cut needs the slow path
            reply(self.refusals.refusal(req, StatusCode.EBADREQ))
            return
        try:
            batch = parse_batch(req.ledger_id, req.body)
        except FrameError:
            batch = None
        if batch is None or (not batch[0] and batch[1] is None):  # undecodable or empty
            reply(self.refusals.refusal(req, StatusCode.EBADREQ))
            return
        self.add_nowait(req, reply, batch)

    async def truncate(
        self, lid: int, master_key: str, at: int, term: int, digest_len: int | None
    ) -> Cut:
        """Drop the older terms' entries above ``at``, once per ``term``
        (``truncated_term``), raising the ledger's term to ``term`` with the cut.

        Only older terms' entries (``truncation.dropped_by_truncation``, told apart by the
        ledger's ``digest_len``): this term's own may have come first (a resend, a TRIM
        ABOVE that was slow), and they may be acknowledged.

        Once per term: a delayed duplicate of the request (its sender retried) must not
        delete what the new term stored after the first one was answered. So the flag
        and the cut become durable together: one journal record carries both (replay
        redoes the cut), and the cut's index batch carries the flag; a crash between
        the two halves can never leave a flag that makes the retry skip a cut not made.

        Decided under the lock, against the ledger's state as it is then (created here
        if there is none): a duplicate that comes while the first one is cutting waits
        for that cut to be durable rather than being answered before it, and a cut that
        waited while another request created the state or raised the term applies the
        term rule to that state, never to what the caller saw before the wait (the
        simulator's ``unbounded-corrupt`` seed 224: two takeovers' TRIM ABOVEs at a
        bookie with no state of the stream; the later term's raise was lost to the
        state the earlier one created, and answered as made).
        """
        storage, journal = self.bookie.storage, self.bookie.journal
        assert storage is not None and journal is not None
        async with storage.exclusive():
            if storage.dropped(lid):
                return Cut.DROPPED  # its state set again here would bring it back
            info = storage.info(lid) or LedgerInfo(master_key=master_key)
            if term != NO_TERM and not bookie_accepts_term(info.term, term):
                return Cut.STALE  # a newer term took over while this waited
            if term != NO_TERM and term <= info.truncated_term:
                return Cut.MADE_BEFORE
            only = None
            if term != NO_TERM and digest_len is not None:
                only = frozenset(
                    eid
                    for eid in storage.entry_ids(lid)
                    if eid > at and self._dropped(lid, eid, term, digest_len)
                )
            before = (info.term, info.truncated_term)
            if term != NO_TERM:
                info.term = max(info.term, term)
            info.truncated_term = term
            storage.set_info(lid, info)
            storage.drop_cached(lid, "above", at, only)
            try:
                await self.ledgers.append_state(journal, lid, truncate_record(lid, at, info, only))
                await storage.cut_locked(lid, "above", at, journal.lsn, only)
            except BaseException:
                # Nothing of the cut reached the index: a retry must cut. (If the record
                # is durable, replay would redo it; a flush that moves the checkpoint past
                # it writes this state instead. Either way flag and cut go together.)
                info.term, info.truncated_term = before
                raise
            await storage.collect_locked(lid)
        return Cut.MADE

    def cut_refused(self, req: Request, cut: Cut) -> Response:
        """The answer to a truncating request whose cut ``truncate`` did not make."""
        refusals = self.refusals
        if cut is Cut.DROPPED:  # dropped while the truncation waited
            return refusals.tombstone_answer(req) or refusals.refusal(req, StatusCode.EDELETED)
        storage = self.bookie.storage
        info = storage.info(req.ledger_id) if storage is not None else None
        stored = info.term if info is not None else NO_TERM
        return refusals.refusal(req, StatusCode.EINVALIDTERM, term=stored)

    def _dropped(self, lid: int, eid: int, term: int, digest_len: int) -> bool:
        storage = self.bookie.storage
        assert storage is not None
        entry = storage.get(lid, eid)  # BookieIOError if unreadable: the cut fails
        return entry is not None and dropped_by_truncation(entry, term, digest_len)
