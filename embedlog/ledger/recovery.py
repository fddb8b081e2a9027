"""Ledger recovery: fence, find the true end, write it back, close.

The rules, each traced to the protocol documents and the TLA+ model:

* Fencing waits until every write set of the last fragment has quorum
  coverage (WQ - AQ + 1) of positive answers and gives up once AQ bookies of
  one write set are unknown: then that ack quorum might still accept the old
  writer's adds (``quorum.py: fencing_decision``).
* Reading forward starts at max(highest LAC seen, first entry of the last
  fragment - 1): only the last fragment is recovered (the model found invalid
  fragments otherwise, "Defect 2").
* Recovery reads carry the fence flag too, so a bookie that answered
  NoSuchEntry can never accept that entry from the old writer afterwards
  (the model's "Defect 1").
* Per entry: one positive answer recovers it; it is unrecoverable only once
  quorum coverage (WQ - AQ + 1) bookies answered an explicit negative.
  Timeouts, errors and EUNKNOWN are unknown: recovery aborts rather than guess.
* Reads go to the ensemble as it was when recovery started; write-backs carry
  the LAC frozen at the start; ensemble changes made while writing back reach
  the metadata only with the closing compare-and-swap.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from embedlog.errors import (
    BKError,
    DigestMismatchError,
    InvalidTermError,
    LedgerDeletedError,
    LedgerRecoveryError,
    MetadataVersionError,
    TlsHandshakeError,
    UnauthorizedAccessError,
)
from embedlog.ledger.answers import deleted_error
from embedlog.ledger.bookie_client import UNKNOWN_OUTCOMES
from embedlog.ledger.context import ClientContext
from embedlog.ledger.quorum import (
    Decision,
    fencing_decision,
    quorum_coverage,
    recovery_read_decision,
)
from embedlog.ledger.writer import LedgerWriter
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.metadata.striping import write_set_bookies as ws_bookies
from embedlog.wire.codes import Outcome, StatusCode, classify
from embedlog.wire.entry import Digester, master_key, split_term
from embedlog.wire.messages import NO_TERM, OpCode, ReadFlags, Response

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5

T = TypeVar("T")


def settle_later(futures: Iterable[asyncio.Future[Any]]) -> None:
    """Futures whose outcome no longer decides anything (requests still running after a
    decision, write-backs of a recovery that failed with their error): a failure they
    end with is retrieved here, not reported by asyncio as never retrieved."""
    for f in futures:
        f.add_done_callback(_outcome_dropped)


def _outcome_dropped(f: asyncio.Future[Any]) -> None:
    if f.cancelled() or (exc := f.exception()) is None:
        return
    if isinstance(exc, BKError):  # an answer (another term, a refusal) that came too late
        log.debug("a request whose outcome was no longer needed failed: %r", exc)
    else:  # not an answer at all: a bug, which must not go unseen for coming late
        log.error("a request whose outcome was no longer needed failed", exc_info=exc)


def older_leftover(entry_term: int | None, floor: int) -> bool:
    """Unbounded ledgers: an entry made by a term below that of an entry recovered at a
    lower id was never acknowledged, so recovery reads it as an explicit negative.

    A term's writer writes above its own no-op only after its takeover truncated every
    bookie of the last fragment above it, and that takeover recovered every entry that
    was acknowledged before it raised the term. So an older term's entry found above a
    newer term's entry is a leftover that an aborted takeover's no-op missed (the newer
    entry being that no-op): recovering it would leave a hole where the no-op stood.
    An entry without a term (written before entries had one) is never judged so.
    """
    return entry_term is not None and entry_term < floor


def check_password(md: LedgerMetadata, password: bytes) -> None:
    if md.password_hash and md.password_hash != master_key(password).hex():
        raise UnauthorizedAccessError(f"ledger {md.ledger_id}: wrong password")


async def until_covered(
    ensemble: tuple[str, ...],
    write_quorum: int,
    ack_quorum: int,
    ask: Callable[[str], Awaitable[T | None]],
) -> tuple[bool, list[T], int]:
    """Ask every bookie of ``ensemble`` until each write set has quorum coverage
    (WQ - AQ + 1) of yes answers, or until AQ bookies of one write set are unknown: then
    that ack quorum is not covered.

    ``ask(bookie)`` returns its yes answer, None for unknown, or raises to abort. Returns
    (covered, the yes answers counted, unknown count). Stragglers keep running after the
    decision: their request still lands.
    """

    async def answer(slot: int) -> tuple[int, T | None]:
        return slot, await ask(ensemble[slot])

    answers: list[T] = []
    positive: set[int] = set()
    unknown: set[int] = set()
    asks = [asyncio.ensure_future(answer(i)) for i in range(len(ensemble))]
    try:
        for fut in asyncio.as_completed(asks):
            slot, yes = await fut
            if yes is None:
                unknown.add(slot)
            else:
                positive.add(slot)
                answers.append(yes)
            decision = fencing_decision(len(ensemble), write_quorum, ack_quorum, positive, unknown)
            if decision is Decision.YES:
                return True, answers, len(unknown)
            if decision is Decision.STUCK:
                break
    finally:
        settle_later(asks)  # not cancelled: a straggler's fence (or term) still lands
    return False, answers, len(unknown)


async def fence(
    ctx: ClientContext,
    md: LedgerMetadata,
    ensemble: tuple[str, ...],
    key: bytes,
    *,
    term: int = NO_TERM,
    flags: int = ReadFlags.FENCE,
) -> int:
    """Fence the last fragment's ensemble; return the highest LAC the fenced bookies report.

    Bounded ledgers fence with the flag; unbounded ledgers send their new term instead.
    Stragglers keep running after coverage is reached: their fence still lands.
    """
    lid = md.ledger_id
    refusals: list[TlsHandshakeError] = []

    async def ask(bookie: str) -> int | None:
        try:
            resp = await ctx.bookies.call(
                bookie, OpCode.READ, lid, -1, flags=flags, term=term, master_key=key
            )
        except UNKNOWN_OUTCOMES as exc:
            if isinstance(exc, TlsHandshakeError):
                refusals.append(exc)
            return None
        if resp.status == StatusCode.EOK:
            return resp.lac
        if resp.status == StatusCode.EUA:
            raise UnauthorizedAccessError(f"ledger {lid}: wrong password ({bookie})")
        if resp.status == StatusCode.EINVALIDTERM:
            raise InvalidTermError(f"ledger {lid}: {bookie} has a term above {term}")
        if resp.status == StatusCode.EDELETED:
            raise deleted_error(lid, bookie)
        return None

    covered, lacs, unknown = await until_covered(ensemble, md.write_quorum, md.ack_quorum, ask)
    if covered:
        return max([-1, *lacs])
    raise LedgerRecoveryError(
        f"ledger {lid}: fenced only {len(lacs)} of {list(ensemble)} ({unknown} unknown); every "
        f"write set of {md.write_quorum} needs {quorum_coverage(md.write_quorum, md.ack_quorum)} "
        "fenced. Retry when more bookies are reachable." + (f" {refusals[0]}" if refusals else "")
    )


def recovery_read(
    ctx: ClientContext,
    md: LedgerMetadata,
    ensemble: tuple[str, ...],
    digester: Digester,
    key: bytes,
    entry_id: int,
    *,
    term: int = NO_TERM,
    flags: int = ReadFlags.FENCE | ReadFlags.RECOVERY,
    floor: int = 0,
) -> asyncio.Future[tuple[Decision, bytes | None]]:
    """Ask the entry's write set; decide recoverable (YES), unrecoverable (NO) or STUCK.

    Unbounded ledgers: an entry made by a term below ``floor`` (the highest term of an
    entry recovered below it) counts as an explicit negative (``rules.older_leftover``).

    A future, decided from the answers' callbacks as they come (no task per bookie: a
    takeover makes up to ``recovery_read_window`` of these at once, each asking a write
    set). Once decided, or cancelled, the requests still out are cancelled.
    """
    lid = md.ledger_id
    decided: asyncio.Future[tuple[Decision, bytes | None]] = (
        asyncio.get_running_loop().create_future()
    )
    counts = {Outcome.POSITIVE: 0, Outcome.NEGATIVE: 0, Outcome.UNKNOWN: 0}

    def judge(bookie: str, answer: asyncio.Future[Response]) -> tuple[Outcome, bytes | None]:
        exc = answer.exception()
        if exc is not None:
            if not isinstance(exc, UNKNOWN_OUTCOMES):
                raise exc
            # UNSAFE switch (tests only): no answer taken for "entry absent".
            return (Outcome.NEGATIVE if ctx.unsafe_unknown_as_negative else Outcome.UNKNOWN), None
        resp = answer.result()
        if resp.status == StatusCode.EUA:
            raise UnauthorizedAccessError(f"ledger {lid}: wrong password ({bookie})")
        if resp.status == StatusCode.EINVALIDTERM:
            raise InvalidTermError(f"ledger {lid}: {bookie} has a term above {term}")
        if resp.status == StatusCode.EDELETED:
            raise deleted_error(lid, bookie)
        outcome = classify(resp.status)
        if outcome is Outcome.UNKNOWN and ctx.unsafe_unknown_as_negative:
            outcome = Outcome.NEGATIVE  # UNSAFE switch (tests only): an error answer too
        if outcome is Outcome.POSITIVE:
            try:
                header, payload = digester.unpack(resp.body, lid, entry_id)
            except DigestMismatchError:
                log.warning("recovery read %s:%s from %s failed its digest", lid, entry_id, bookie)
                return Outcome.UNKNOWN, None
            if floor and older_leftover(split_term(header.flags, payload)[0], floor):
                return Outcome.NEGATIVE, None
            return outcome, resp.body
        return outcome, None

    def answered(bookie: str, answer: asyncio.Future[Response]) -> None:
        if answer.cancelled():
            return
        if decided.done():
            answer.exception()  # retrieved: one may fail just as another answer decided
            return
        try:
            outcome, body = judge(bookie, answer)
        except Exception as exc:
            decided.set_exception(exc)
            return
        counts[outcome] += 1
        decision = recovery_read_decision(
            md.write_quorum,
            md.ack_quorum,
            counts[Outcome.POSITIVE],
            counts[Outcome.NEGATIVE],
            counts[Outcome.UNKNOWN],
        )
        if decision is not Decision.PENDING:
            decided.set_result((decision, body))

    asks = [
        ctx.bookies.call_nowait(
            bookie,
            OpCode.READ,
            lid,
            entry_id,
            flags=flags,
            term=term,
            master_key=key,
            then=functools.partial(answered, bookie),
        )
        for bookie in ws_bookies(entry_id, ensemble, md.write_quorum)
    ]

    def done(_: asyncio.Future[tuple[Decision, bytes | None]]) -> None:
        for ask in asks:
            ask.cancel()

    decided.add_done_callback(done)
    return decided


async def read_forward(
    ctx: ClientContext,
    md: LedgerMetadata,
    ensemble: tuple[str, ...],
    digester: Digester,
    key: bytes,
    writer: LedgerWriter,
    writes: list[asyncio.Future[int]],
    *,
    start: int,
    lac: int,
    term: int = NO_TERM,
    flags: int,
    aborted: str,
    last_held: int | None = None,
) -> int:
    """Recovery's read phase: from ``start + 1`` on, write every recoverable entry back
    (stamped with ``lac``) through ``writer`` and return the first unrecoverable id.

    Up to ``ctx.recovery_read_window`` reads run ahead; given ``last_held``, the highest
    entry held that the bookies answering the fence or term read report, only up to it,
    and one at a time past it. It is a hint, never a bound on what is recovered: reading
    ahead past it mostly asks every write set for entries nobody has (a stream's
    takeover, which reads from the LAFR and finds the end most times, would send WQ times
    the window in reads past it). Each write's future is appended to ``writes`` as it is
    made, so the caller sees them even when this raises. An entry
    whose existence cannot be told aborts with LedgerRecoveryError (``aborted`` says what
    that leaves behind).
    """
    lid = md.ledger_id
    window = max(1, ctx.recovery_read_window)
    reads: dict[int, asyncio.Future[tuple[Decision, bytes | None]]] = {}
    eid = start + 1
    floor = 0  # the highest term of an entry recovered so far (unbounded ledgers)

    def ask(entry_id: int) -> asyncio.Future[tuple[Decision, bytes | None]]:
        return recovery_read(
            ctx, md, ensemble, digester, key, entry_id, term=term, flags=flags, floor=floor
        )

    try:
        while True:
            ahead_to = eid + window - 1
            if last_held is not None:
                ahead_to = max(eid, min(ahead_to, last_held))
            for ahead in range(eid, ahead_to + 1):
                if ahead not in reads:
                    reads[ahead] = ask(ahead)
            decision, body = await reads.pop(eid)
            if decision is Decision.YES:
                assert body is not None
                header, payload = digester.unpack(body, lid, eid)
                entry_term = split_term(header.flags, payload)[0]
                if older_leftover(entry_term, floor):
                    # Read ahead before the floor rose to where it is now: ask again.
                    reads[eid] = ask(eid)
                    continue
                if not ctx.unsafe_recovery_ignores_term:  # UNSAFE switch (tests only)
                    floor = max(floor, entry_term or 0)
                writes.append(
                    writer.add_packed(eid, digester.pack(lid, eid, lac, payload, header.flags))
                )
                eid += 1
            elif decision is Decision.NO:
                return eid
            else:
                who = f"ledger {lid}" if term == NO_TERM else f"ledger {lid} term {term}"
                raise LedgerRecoveryError(
                    f"{who}: cannot tell whether entry {eid} exists (too many bookies of its "
                    f"write set unknown); {aborted}"
                )
    finally:
        for t in reads.values():
            t.cancel()
        settle_later(reads.values())  # reads ahead of the end (or of the abort) may have failed


async def recover_ledger(ctx: ClientContext, ledger_id: int, password: bytes) -> LedgerMetadata:
    """Recover and close ``ledger_id``; returns its CLOSED metadata."""
    for _attempt in range(MAX_ATTEMPTS):
        md = await ctx.meta(ctx.metadata.read_ledger, ledger_id)
        check_password(md, password)
        if md.state is LedgerState.CLOSED:
            return md
        if md.state is LedgerState.OPEN:
            try:
                md = await ctx.meta(
                    ctx.metadata.write_ledger, md.evolve(state=LedgerState.IN_RECOVERY)
                )
            except MetadataVersionError:
                continue
        closed = await _recover_once(ctx, md, password)
        if closed is not None:
            ctx.metrics.recoveries += 1
            return closed
    raise LedgerRecoveryError(
        f"ledger {ledger_id}: metadata kept changing under recovery; try again"
    )


async def _recover_once(
    ctx: ClientContext, md: LedgerMetadata, password: bytes
) -> LedgerMetadata | None:
    lid = md.ledger_id
    first, ensemble = md.last_fragment
    key = master_key(password)
    digester = Digester(md.digest_type, password)
    lac = await fence(ctx, md, ensemble, key)
    start = lac if ctx.unsafe_recovery_from_minus_one else max(lac, first - 1)
    read_flags = ReadFlags.RECOVERY
    if not ctx.unsafe_recovery_reads_without_fence:
        read_flags |= ReadFlags.FENCE
    log.info("ledger %s: fenced; LAC %s, reading forward from %s", lid, lac, start + 1)

    writer = LedgerWriter(ctx, md, password, lac=start, recovery=True, fixed_lac=lac)
    writes: list[asyncio.Future[int]] = []
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
            lac=lac,
            flags=read_flags,
            aborted="recovery aborted, the ledger stays recoverable",
        )
        await writer.drain()
        if isinstance(writer.error, LedgerDeletedError):
            raise writer.error
        if writer.error is not None:
            raise LedgerRecoveryError(
                f"ledger {lid}: writing recovered entries back failed: {writer.error}"
            ) from writer.error
        await asyncio.gather(*writes)
    except BaseException:
        writer.stop()
        settle_later(writes)  # their error is the one raised here
        raise
    last = eid - 1
    closed = writer.md.evolve(state=LedgerState.CLOSED, last_entry_id=last)
    try:
        closed = await ctx.meta(ctx.metadata.write_ledger, closed)
    except MetadataVersionError:
        fresh = await ctx.meta(ctx.metadata.read_ledger, lid)
        if fresh.state is LedgerState.CLOSED:
            return fresh  # another recovery closed it first: converge on its end
        return None
    log.info("ledger %s: recovered and closed at entry %s", lid, last)
    return closed
