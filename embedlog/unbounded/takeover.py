"""Taking an unbounded ledger over: a new term, recovery of the last fragment, the no-op.

The steps, as the model (``ProtocolUnboundedLedgersAndGWQ.tla``) checked them:

1. ``ClientStartsNewTerm``: compare-and-swap the metadata to term + 1, IN_RECOVERY.
2. LAFR reads carrying the new term (no fence flag) to the last fragment's ensemble.
   A bookie raises its stored term and answers with its LAFR and LAC; a bookie with a
   higher term answers InvalidTerm and the takeover yields (``InvalidTermError``).
   Answers of another term are discarded. Recovery may read once every write set has
   quorum coverage (WQ - AQ + 1) that raised their term: no ack quorum of the old term
   is left.
3. Recovery reads, with the new term, forward from max(LAFR, first entry of the last
   fragment - 1) + 1, to the ensemble as it was when recovery started. One positive
   recovers an entry; quorum coverage of explicit negatives ends the read phase;
   anything else aborts (the ledger stays IN_RECOVERY; the next takeover starts over).
4. Write-back with guaranteed write quorum: each recovered entry, and then the no-op
   with the truncate flag at the first unrecoverable id, must be confirmed by the
   entry's whole write set. A bookie that does not answer is replaced (in memory) or
   retried; the takeover fails loudly after ``add_entry_quorum_timeout``, never
   completes with a bookie of the last fragment that did not truncate.
5. ``ClientChangesTermToOpen``: compare-and-swap to OPEN with the fragments the
   write-back ended with, at the version step 1 wrote (else another term won).
6. The new term's end goes to the last fragment's bookies as their LAC and LAFR, in
   the background (``announce_end``); the model has no such step: there the new term's
   first add carries its LAFR.
"""

from __future__ import annotations

import asyncio
import logging

from attrs import frozen

from embedlog.errors import (
    InvalidTermError,
    LedgerClosedError,
    LedgerDeletedError,
    LedgerRecoveryError,
    MetadataVersionError,
    UnauthorizedAccessError,
)
from embedlog.ledger.answers import deleted_error
from embedlog.ledger.bookie_client import UNKNOWN_OUTCOMES
from embedlog.ledger.context import ClientContext
from embedlog.ledger.recovery import check_password, read_forward, settle_later, until_covered
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.unbounded import follow, rules
from embedlog.unbounded.writer import TermWriter
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import FLAG_NOOP, Digester, master_key
from embedlog.wire.messages import AddFlags, OpCode, ReadFlags

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5


@frozen
class TermStart:
    """What a completed takeover hands to the writer of the new term."""

    md: LedgerMetadata  # OPEN, at the new term
    term: int
    last_entry_id: int  # the no-op's id (or the last recovered entry without the no-op)
    noop_id: int  # -1 when the no-op was switched off (unsafe)


async def read_lafr_with_term(
    ctx: ClientContext, md: LedgerMetadata, ensemble: tuple[str, ...], key: bytes, term: int
) -> tuple[int, int, int]:
    """Raise the term on the last fragment's bookies; the highest LAFR, LAC and last entry
    held that they report.

    The last entry held is a hint for how far recovery reads ahead (``read_forward``):
    mostly every entry is on a bookie that answered, but a limbo bookie (it lost entries
    in a crash without the journal) answers with what it kept, so an acknowledged entry
    may lie past the hint; recovery then finds it one read at a time."""
    lid = md.ledger_id

    async def ask(bookie: str) -> tuple[int, int, int] | None:
        try:
            resp = await ctx.bookies.call(
                bookie, OpCode.READ, lid, -1, flags=ReadFlags.NONE, term=term, master_key=key
            )
        except UNKNOWN_OUTCOMES:
            return None
        if resp.status == StatusCode.EOK and rules.response_counts(term, resp.term):
            return resp.lafr, resp.lac, resp.last_entry_id
        if resp.status == StatusCode.EINVALIDTERM:
            if rules.deleted_by_term(resp.term):
                raise LedgerDeletedError(
                    f"stream (ledger) {lid} is being deleted ({bookie} was fenced by the "
                    "delete): it cannot be taken over; create it again to go on"
                )
            raise InvalidTermError(f"ledger {lid}: {bookie} has term {resp.term} > {term}")
        if resp.status == StatusCode.EUA:
            raise UnauthorizedAccessError(f"ledger {lid}: wrong password ({bookie})")
        if resp.status == StatusCode.EDELETED:
            raise deleted_error(lid, bookie)
        return None  # unknown, or an answer of another term (discarded)

    covered, raised, unknown = await until_covered(ensemble, md.write_quorum, md.ack_quorum, ask)
    if covered:
        lafrs, lacs, held = zip(*raised, strict=True) if raised else ((), (), ())
        return max([-1, *lafrs]), max([-1, *lacs]), max([-1, *held])
    raise LedgerRecoveryError(
        f"ledger {lid}: term {term} reached only {len(raised)} of {list(ensemble)} ({unknown} "
        f"unknown); every write set of {md.write_quorum} needs "
        f"{md.write_quorum - md.ack_quorum + 1}. Take over again when more bookies are reachable."
    )


async def take_over(ctx: ClientContext, ledger_id: int, password: bytes) -> TermStart:
    """Become the writer of ``ledger_id`` in a new term (steps 1-5 above)."""
    for _attempt in range(MAX_ATTEMPTS):
        md = await ctx.meta(ctx.metadata.read_ledger, ledger_id)
        check_password(md, password)
        if not md.unbounded:
            raise ValueError(f"ledger {ledger_id} is not an unbounded ledger; use open_ledger")
        if md.state is LedgerState.CLOSED:
            raise LedgerClosedError(f"unbounded ledger {ledger_id} was closed")
        if rules.deleted_by_term(md.term):
            raise LedgerDeletedError(
                f"stream (ledger) {ledger_id} is being deleted: it cannot be taken over; "
                "create the stream again to go on"
            )
        try:
            md = await ctx.meta(
                ctx.metadata.write_ledger,
                md.evolve(term=md.term + 1, state=LedgerState.IN_RECOVERY),
            )
        except MetadataVersionError:
            continue  # another client moved first: read again and go one term higher
        return await recover_term(ctx, md, password)
    raise LedgerRecoveryError(f"ledger {ledger_id}: the metadata kept changing; try again")


async def recover_term(ctx: ClientContext, md: LedgerMetadata, password: bytes) -> TermStart:
    lid, term = md.ledger_id, md.term
    first, ensemble = md.last_fragment
    key = master_key(password)
    digester = Digester(md.digest_type, password)
    lafr, lac, last_held = await read_lafr_with_term(ctx, md, ensemble, key, term)
    start = rules.recovery_start(lafr, first)
    fixed_lac = max(start, lac)
    log.info(
        "ledger %s term %s: LAFR %s, LAC %s, recovering from %s", lid, term, lafr, lac, start + 1
    )

    writer = TermWriter(
        ctx,
        md,
        password,
        term=term,
        lac=start,
        recovery=True,
        fixed_lac=fixed_lac,
        guaranteed_write_quorum=True,
    )
    writes: list[asyncio.Future[int]] = []
    noop_id = -1
    try:
        eid = await read_forward(
            ctx,
            md,
            ensemble,
            digester,
            key,
            writer,
            writes,
            start=start,
            lac=fixed_lac,
            term=term,
            flags=ReadFlags.RECOVERY,
            aborted="take over again later",
            last_held=last_held,
        )
        if not ctx.unsafe_takeover_without_noop:
            # The last write of the recovery: an empty no-op that makes every bookie of the
            # last fragment drop whatever the old terms left above it.
            noop_id = eid
            writes.append(
                writer.add(b"", entry_flags=FLAG_NOOP, add_flags=AddFlags.TRUNCATE | AddFlags.NOOP)
            )
        await writer.drain()
        if writer.error is None and noop_id >= 0 and not ctx.unsafe_skip_clear_last_fragment:
            await writer.clear_last_fragment(noop_id)
        if writer.error is not None:
            if isinstance(writer.error, (InvalidTermError, LedgerDeletedError)):
                raise writer.error
            raise LedgerRecoveryError(
                f"ledger {lid} term {term}: the recovery writes did not reach every bookie: "
                f"{writer.error}"
            ) from writer.error
        await asyncio.gather(*writes)
    except BaseException:
        writer.stop()
        settle_later(writes)  # their error is the one raised here
        raise
    last = noop_id if noop_id >= 0 else eid - 1
    opened = await open_term(ctx, md, writer.md)
    log.info("ledger %s: term %s open after entry %s (no-op %s)", lid, term, last, noop_id)
    announce_end(ctx, opened, last, key)
    return TermStart(opened, term, last, noop_id)


def announce_end(ctx: ClientContext, opened: LedgerMetadata, last: int, key: bytes) -> None:
    """Step 6: tell the last fragment's bookies, in the background, that every entry up to
    ``last`` is committed and on its whole write set: a WRITE_LAC carrying ``last`` as both
    LAC and LAFR. Followers see the recovered entries now rather than with the next
    append, and the next takeover reads forward from here, instead of reading and writing
    back once more everything this one recovered (a stream nobody writes to between
    takeovers, one a bookie's repair takes over on every boot, would otherwise redo it
    each time). Only now, with the metadata OPEN: until then the write sets the
    write-back filled were in this takeover's memory only (``rules.lafr_to_send``)."""
    if last < 0:
        return
    settle_later(
        asyncio.ensure_future(
            ctx.bookies.call(
                bookie,
                OpCode.WRITE_LAC,
                opened.ledger_id,
                last,
                term=opened.term,
                master_key=key,
                lafr=last,
            )
        )
        for bookie in opened.last_fragment[1]
    )


async def open_term(
    ctx: ClientContext, at_start: LedgerMetadata, ours: LedgerMetadata
) -> LedgerMetadata:
    """``ClientChangesTermToOpen``: OPEN, with the fragments the write-back ended with.

    A compare-and-swap lost to a trim (it drops fragments below the last one while the
    ledger is IN_RECOVERY in this term) is rebased on the trimmed metadata and tried
    again; anything else means another term won (InvalidTermError).
    """
    lid, term = at_start.ledger_id, at_start.term
    want = ours.evolve(state=LedgerState.OPEN)
    for _attempt in range(MAX_ATTEMPTS):
        try:
            return await ctx.meta(ctx.metadata.write_ledger, want)
        except MetadataVersionError:
            fresh = await follow.current_metadata(ctx, lid)  # LedgerDeletedError if deleted
        fragments = rules.rebase_fragments(ours.fragments, at_start.fragments, fresh.fragments)
        if fresh.term != term or fresh.state is not LedgerState.IN_RECOVERY or fragments is None:
            raise InvalidTermError(
                f"ledger {lid}: term {fresh.term} ({fresh.state.value}) took over while term "
                f"{term} was recovering"
            )
        want = fresh.evolve(state=LedgerState.OPEN, fragments=fragments)
    raise LedgerRecoveryError(f"ledger {lid}: the metadata kept changing; take over again")
