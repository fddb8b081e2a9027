"""Reading an unbounded ledger: no-op entries are skipped, ids stay as written.

Readers never look at terms (normal reads carry none). They read only up to a LAC
some bookie reported, and with metadata read after that LAC was seen: an entry's
fragment never changes once the entry is acknowledged, so that metadata places it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from embedlog.errors import (
    BKError,
    LedgerDeletedError,
    NoSuchEntryError,
    NoSuchLedgerInMetadataError,
)
from embedlog.ledger.batch_reads import Row, read_range
from embedlog.ledger.bookie_client import UNKNOWN_OUTCOMES
from embedlog.ledger.context import ClientContext
from embedlog.ledger.entries import Entry
from embedlog.ledger.reader import read_lac
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.unbounded import layout, rules
from embedlog.wire.entry import Digester, split_term
from embedlog.wire.record import Record, split_record

# A long poll that sees no progress for this long re-reads the metadata (the writer may
# have moved to a new fragment, whose bookies are the ones that learn the LAC).
POLL_SLICE = 0.5


def check_stored(md: LedgerMetadata, first: int) -> None:
    low = layout.first_entry(md)
    if first < low:
        raise NoSuchEntryError(
            f"ledger {md.ledger_id}: entries below {low} were trimmed (asked for {first})"
        )


async def read_visible(
    ctx: ClientContext, md: LedgerMetadata, digester: Digester, first: int, last: int
) -> list[Entry]:
    """Entries first..last that are not no-ops, in id order."""
    check_stored(md, first)
    return visible(md, await read_range(ctx, md, digester, first, last))


async def read_records(
    ctx: ClientContext, md: LedgerMetadata, digester: Digester, first: int, last: int
) -> list[tuple[int, Record, bytes]]:
    """(entry id, record fields, payload) of the entries first..last that are not no-ops:
    what a writer reads back of earlier terms (dedup ids, retention's counts and times)."""
    return list(visible_records(await read_range(ctx, md, digester, first, last)))


def visible_records(rows: list[Row]) -> Iterator[tuple[int, Record, bytes]]:
    """(entry id, record fields, payload) of the stored ``rows`` that are not no-ops: the
    term stripped and the record's envelope (embedlog/wire/record.py) read."""
    for eid, header, payload in rows:
        if rules.visible(header.is_noop):
            _term, rec, data = split_record(header.flags, payload)
            yield eid, rec, data


def visible(md: LedgerMetadata, rows: list[Row]) -> list[Entry]:
    """What a reader gets of the stored ``rows``: no no-ops, terms stripped, the record's
    fields in the Entry's."""
    lid = md.ledger_id
    return [
        Entry(lid, eid, bytes(data), rec.timestamp, rec.key, rec.headers, rec.msg_id)
        for eid, rec, data in visible_records(rows)
    ]


async def current_metadata(ctx: ClientContext, ledger_id: int) -> LedgerMetadata:
    """The stream's metadata as stored now; LedgerDeletedError once it was deleted (a
    follower must hear that, not that no bookie has the entries it asks for)."""
    try:
        md = await ctx.meta(ctx.metadata.read_ledger, ledger_id)
    except NoSuchLedgerInMetadataError:
        md = None
    if md is None or rules.deleted_by_term(md.term):
        raise LedgerDeletedError(
            f"stream (ledger) {ledger_id} was deleted; create it again (a new ledger) to go on"
        )
    return md


async def wait_for_lac(
    ctx: ClientContext, md: LedgerMetadata, previous: int, wait: float
) -> tuple[int, LedgerMetadata]:
    """Long-poll the last fragment for a LAC above ``previous``; (LAC, fresh metadata).

    The metadata is re-read after every poll: after progress so that the new entries are
    placed by metadata newer than their LAC, and after a quiet poll so that a new fragment
    (rollover, ensemble change, takeover) is followed.
    """
    lac, fresh, _rows = await wait_and_read(ctx, md, None, previous, wait, 0)
    return lac, fresh


async def wait_and_read(
    ctx: ClientContext,
    md: LedgerMetadata,
    digester: Digester | None,
    previous: int,
    wait: float,
    batch: int,
) -> tuple[int, LedgerMetadata, list[Row] | None]:
    """``wait_for_lac``, and once the LAC passed ``previous``, the stored entries from
    ``previous + 1`` (at most ``batch``), read while the metadata is re-read: (LAC, fresh
    metadata, the entries or None).

    The entries are read by ``md``, the metadata known before the LAC was seen, and kept
    only if the re-read finds that same version: they were then placed by metadata read
    after their LAC, as every read of a follower must be. Otherwise (the stream moved to
    a new fragment, or the read failed) None: the caller reads them by the fresh
    metadata. A follower thus learns of new entries and has them in one wait, the
    metadata's round trip and the entries' one side by side instead of one after the
    other.
    """
    started = ctx.clock.monotonic()
    try:
        lac = await read_lac(ctx, md, timeout_ms=max(1, int(wait * 1000)), previous=previous)
    except UNKNOWN_OUTCOMES:
        lac = previous
    if lac <= previous or digester is None or batch <= 0:
        fresh = await current_metadata(ctx, md.ledger_id)
        if lac <= previous:
            spent = ctx.clock.monotonic() - started
            if spent < wait / 2:  # every bookie failed at once: do not spin
                await asyncio.sleep(min(wait / 2, 0.1))
        return max(lac, previous), fresh, None
    reading = asyncio.ensure_future(
        _read_or_none(ctx, md, digester, previous + 1, min(lac, previous + batch))
    )
    try:
        fresh = await current_metadata(ctx, md.ledger_id)
    except BaseException:
        reading.cancel()
        raise
    if fresh.version != md.version:
        reading.cancel()
        return lac, fresh, None
    return lac, fresh, await reading


async def _read_or_none(
    ctx: ClientContext, md: LedgerMetadata, digester: Digester, first: int, last: int
) -> list[Row] | None:
    try:
        check_stored(md, first)
        return await read_range(ctx, md, digester, first, last)
    except BKError:  # trimmed, deleted, unreachable: the caller's own read says which
        return None


async def read_terms(
    ctx: ClientContext, md: LedgerMetadata, digester: Digester, first: int, last: int
) -> list[tuple[int, int | None]]:
    """(entry id, term of the writer that made it) of the visible entries first..last.

    For writers that must learn how much of what they appended survived a crash: after
    a takeover, the entries of one term form a prefix of what that term's writer sent.
    """
    check_stored(md, first)
    rows = await read_range(ctx, md, digester, first, last)
    return [
        (eid, split_term(header.flags, payload)[0])
        for eid, header, payload in rows
        if rules.visible(header.is_noop)
    ]
