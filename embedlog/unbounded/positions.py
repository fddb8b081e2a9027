"""Positions in a stream as one handle sees them: the first entry still kept, the entry
at a time, where a tail starts, and the consumer cursors kept in the metadata store.

Each is a coroutine over the handle's narrow ``Positioned`` protocol (UnboundedLedger
implements it); the handle's blocking methods validate their arguments and run these
on the runtime loop.
"""

from __future__ import annotations

from typing import Protocol

from embedlog.errors import InvalidTermError, NoSuchEntryError
from embedlog.ledger.context import ClientContext
from embedlog.ledger.entries import Entry
from embedlog.metadata import streams
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.unbounded import layout, seek
from embedlog.unbounded import trim as trimming
from embedlog.unbounded.writer import TermWriter


class Positioned(Protocol):
    """What the positions ask of a stream handle (embedlog/unbounded/ledger.py)."""

    @property
    def ledger_id(self) -> int: ...

    @property
    def ctx(self) -> ClientContext: ...

    @property
    def writer(self) -> TermWriter | None:
        """This handle's writer of its term (None: a follower)."""
        ...

    async def view(self) -> tuple[LedgerMetadata, int]:
        """The metadata and LAC the handle knows, asking nobody."""
        ...

    async def refresh_aio(self) -> tuple[LedgerMetadata, int]:
        """The metadata and LAC, a follower's LAC read from the bookies first."""
        ...

    async def reread_metadata(self) -> LedgerMetadata: ...

    async def read_aio(self, first: int, last: int) -> list[Entry]: ...


async def first_entry_id(h: Positioned) -> int:
    """The first entry id still kept; LAC + 1 when the stream keeps no entry."""
    md = await h.reread_metadata()
    _, lac = await h.refresh_aio()
    return min(layout.first_entry(md), lac + 1)


async def entry_id_at(h: Positioned, timestamp: float) -> int:
    """The first entry whose timestamp is at or after ``timestamp`` (seek.py)."""

    async def times(first: int, last: int) -> list[tuple[int, float | None]]:
        return [(e.entry_id, e.timestamp) for e in await h.read_aio(first, last)]

    for _attempt in range(3):
        first = await first_entry_id(h)
        _, lac = await h.refresh_aio()
        try:
            return await seek.entry_id_at(times, first, lac, timestamp)
        except NoSuchEntryError:
            continue  # a trim moved the first entry kept under the search: search again
    return await seek.entry_id_at(times, await first_entry_id(h), lac, timestamp)


async def start_position(h: Positioned, word: str) -> int:
    """Where ``tail(start=word)`` starts: the first entry still kept, or LAC + 1."""
    if word == "earliest":
        return await first_entry_id(h)
    _, lac = await h.refresh_aio()
    return lac + 1


async def cursor_start(h: Positioned, cursor: str) -> int:
    """Where a tail of ``cursor`` starts: after its committed position, or at the trim
    point if it has none (what lies below is then no skip)."""
    ctx = h.ctx
    committed = (await ctx.meta(streams.cursors, ctx.metadata.store, h.ledger_id)).get(cursor)
    if committed is not None:
        return committed + 1
    md, _ = await h.view()
    return layout.first_entry(md)


async def commit(h: Positioned, key: bytes, cursor: str, entry_id: int, force: bool) -> None:
    """Store ``entry_id`` as ``cursor``'s position (UnboundedLedger.commit says the rules);
    ``key``: the stream's master key, for a trim this commit applies."""
    _, lac = await h.view()
    if entry_id > lac:
        _, lac = await h.refresh_aio()
    if entry_id > lac:
        await _check_not_displaced(h, cursor, entry_id)
        raise ValueError(
            f"ledger {h.ledger_id}: cannot commit cursor {cursor!r} at {entry_id}, "
            f"past the last add confirmed {lac}"
        )
    ctx = h.ctx
    store = ctx.metadata.store
    decided = await ctx.meta(streams.commit, store, h.ledger_id, cursor, entry_id, force)
    md, _ = await h.view()
    if entry_id + 1 < decided and layout.first_entry(md) < decided:
        # A trim decided before this commit took effect and not applied yet: apply it
        # now, so that what this commit returns to already shows it (the consumer then
        # resumes at the trim point, as after any trim that passed its position).
        await trimming.apply(ctx, h.ledger_id, decided, key)


async def _check_not_displaced(h: Positioned, cursor: str, entry_id: int) -> None:
    """A writer whose term was taken over knows only its own LAC: an entry above it
    may be one the new term acknowledged. Say so, rather than "past the LAC"."""
    writer = h.writer
    if writer is None:
        return
    md = await h.reread_metadata()
    if md.term != writer.term:
        raise InvalidTermError(
            f"ledger {h.ledger_id}: cannot commit cursor {cursor!r} at {entry_id}: "
            f"this handle wrote in term {writer.term}, and another client took the "
            f"stream over (term {md.term}); this handle knows entries up to "
            f"{writer.lac} only. Commit through a follower "
            "(open_unbounded(..., takeover=False)) or the new writer's handle"
        )
