"""Reading entries: one bookie of the write set at a time, failing over on any trouble.

A read fails over on errors, timeouts and digest mismatches (a tampered
replica must not stop a read). It is negative (NoSuchEntryError) only when
every bookie of the write set answered an explicit negative; otherwise the
outcome is unknown and the error says so.
"""

from __future__ import annotations

import asyncio

from embedlog.errors import (
    BKError,
    BKTimeoutError,
    DigestMismatchError,
    NoSuchEntryError,
    TlsHandshakeError,
    UnauthorizedAccessError,
    error_for_status,
)
from embedlog.ledger.bookie_client import UNKNOWN_OUTCOMES
from embedlog.ledger.context import ClientContext
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.metadata.striping import write_set_bookies
from embedlog.wire.codes import Outcome, StatusCode, classify
from embedlog.wire.entry import Digester, EntryHeader
from embedlog.wire.messages import OpCode

READ_WINDOW = 64  # entries read concurrently, one READ each, by ``read_window``


async def read_entry(
    ctx: ClientContext,
    md: LedgerMetadata,
    digester: Digester,
    entry_id: int,
    last_resort: str | None = None,
) -> tuple[EntryHeader, bytes]:
    """One entry from the bookies of its write set, in order; ``last_resort`` (a bookie
    that just gave nothing for it) is asked last, but still asked: its answer counts."""
    lid = md.ledger_id
    bookies = write_set_bookies(entry_id, md.ensemble_for(entry_id), md.write_quorum)
    if last_resort in bookies:
        bookies.remove(last_resort)
        bookies.append(last_resort)
    negatives = 0
    errors: list[BKError] = []
    for bookie in bookies:
        try:
            resp = await ctx.bookies.call(bookie, OpCode.READ, lid, entry_id)
        except UNKNOWN_OUTCOMES as exc:
            errors.append(exc)
            continue
        outcome = classify(resp.status)
        if outcome is Outcome.POSITIVE:
            try:
                return digester.unpack(resp.body, lid, entry_id)
            except DigestMismatchError as exc:
                errors.append(DigestMismatchError(f"{exc} (from {bookie})"))
                continue
        if outcome is Outcome.NEGATIVE:
            negatives += 1
        elif resp.status == StatusCode.EUA:
            raise UnauthorizedAccessError(f"ledger {lid}: wrong password")
        else:
            errors.append(error_for_status(resp.status, f"read {lid}:{entry_id} from {bookie}"))
    if negatives == len(bookies):
        raise NoSuchEntryError(f"entry {lid}:{entry_id}: no bookie of {bookies} has it")
    # A TLS refusal speaks for the others: it is what the caller must fix.
    first = next((e for e in errors if isinstance(e, TlsHandshakeError)), errors[0])
    if all(isinstance(e, DigestMismatchError) for e in errors) and not negatives:
        raise first
    detail = "; ".join(str(e) for e in errors)
    err: BKError = first if isinstance(first, BKTimeoutError) else type(first)(detail)
    if type(first) is BKError:
        err = BKTimeoutError(detail)
    raise err


async def read_window(
    ctx: ClientContext,
    md: LedgerMetadata,
    digester: Digester,
    ids: range,
    last_resort: str | None = None,
) -> list[tuple[int, EntryHeader, bytes]]:
    """Entries ``ids`` in order, one READ each, READ_WINDOW of them in flight at a time."""
    out: list[tuple[int, EntryHeader, bytes]] = []
    for at in range(0, len(ids), READ_WINDOW):
        window = ids[at : at + READ_WINDOW]
        results = await asyncio.gather(
            *(read_entry(ctx, md, digester, e, last_resort) for e in window)
        )
        out.extend((e, hdr, payload) for e, (hdr, payload) in zip(window, results, strict=True))
    return out


async def read_lac(
    ctx: ClientContext, md: LedgerMetadata, *, timeout_ms: int = 0, previous: int = -1
) -> int:
    """The highest LAC any bookie of the last fragment reports (a lower bound of the truth).

    With ``timeout_ms`` it is a long poll: bookies answer once their LAC passes
    ``previous`` or the time is up.
    """
    lid = md.ledger_id
    bookies = md.last_fragment[1]
    wait = ctx.bookies.request_timeout + timeout_ms / 1000.0
    refusals: list[TlsHandshakeError] = []

    async def one(b: str) -> int | None:
        try:
            resp = await ctx.bookies.call(
                b, OpCode.READ_LAC, lid, previous, timeout_ms=timeout_ms, timeout=wait
            )
        except UNKNOWN_OUTCOMES as exc:
            if isinstance(exc, TlsHandshakeError):
                refusals.append(exc)
            return None
        return resp.lac if resp.status == StatusCode.EOK else None

    if timeout_ms:
        # Long poll: the first bookie that sees progress answers; no need to wait for all.
        tasks = [asyncio.ensure_future(one(b)) for b in bookies]
        best = previous
        try:
            for fut in asyncio.as_completed(tasks):
                got = await fut
                if got is not None and got > best:
                    return got
        finally:
            for t in tasks:
                t.cancel()
        return best
    answers = [a for a in await asyncio.gather(*(one(b) for b in bookies)) if a is not None]
    if not answers:
        if refusals:  # a configuration error, not a wait for bookies to come back
            raise TlsHandshakeError(f"ledger {lid}: no bookie answered a LAC read: {refusals[0]}")
        raise BKTimeoutError(f"ledger {lid}: no bookie of {list(bookies)} answered a LAC read")
    return max(answers)
