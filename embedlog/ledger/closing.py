"""A writer's close: the ledger CLOSED at its LAC, by compare-and-swap."""

from __future__ import annotations

from embedlog.errors import LedgerClosedError, LedgerFencedError, MetadataVersionError
from embedlog.ledger.context import ClientContext
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState


async def close_as_writer(ctx: ClientContext, md: LedgerMetadata, lac: int) -> LedgerMetadata:
    """The metadata with the ledger CLOSED at ``lac`` (the writer's last acknowledged
    entry); raises if another client closed it elsewhere or is recovering it."""
    while True:
        if md.state is LedgerState.CLOSED:
            if md.last_entry_id == lac:
                return md
            raise LedgerClosedError(
                f"ledger {md.ledger_id} was closed at entry {md.last_entry_id} by another "
                f"client, but this writer confirmed up to {lac}"
            )
        if md.state is LedgerState.IN_RECOVERY:
            raise LedgerFencedError(
                f"ledger {md.ledger_id} is being recovered by another client; "
                "its last entry will be decided by that recovery"
            )
        closed = md.evolve(state=LedgerState.CLOSED, last_entry_id=lac)
        try:
            return await ctx.meta(ctx.metadata.write_ledger, closed)
        except MetadataVersionError:
            md = await ctx.meta(ctx.metadata.read_ledger, md.ledger_id)
