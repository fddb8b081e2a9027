"""Trimming: delete whole fragments below an entry id, in the metadata and on the bookies.

The metadata goes first (compare-and-swap dropping the fragments' pairs; readers then
see the new low-water mark and never ask for the trimmed entries), then each bookie of
a dropped fragment is told to delete the ledger's entries below the first kept entry
(TRIM). A bookie that cannot be reached keeps its copies until it is trimmed again (the
next trim repeats the TRIM for every bookie of the fragments it drops; entries of
already-dropped fragments are garbage the auditor can find). The last fragment is never
dropped, and only whole fragments are: entries of a partly trimmed fragment stay readable.
Bookies free the disk space by deleting the entry log files that only held trimmed
entries (``bookie/storage.py``).
"""

from __future__ import annotations

import asyncio

from embedlog.errors import MetadataVersionError
from embedlog.ledger.bookie_client import UNKNOWN_OUTCOMES
from embedlog.ledger.context import ClientContext
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.unbounded import rules
from embedlog.wire.messages import OpCode


async def trim(
    ctx: ClientContext, ledger_id: int, before: int, key: bytes
) -> tuple[LedgerMetadata, LedgerMetadata]:
    """Drop the fragments wholly below ``before``; (metadata before, metadata after)."""
    while True:
        md = await ctx.meta(ctx.metadata.read_ledger, ledger_id)
        kept, dropped, first_kept = rules.trim_plan(md.fragments, before)
        if not dropped:
            return md, md
        try:
            new = await ctx.meta(ctx.metadata.write_ledger, md.evolve(fragments=kept))
            break
        except MetadataVersionError:
            continue  # the writer changed fragments meanwhile: plan again
    bookies = sorted({b for _, ens in dropped for b in ens})

    async def cut(bookie: str) -> None:
        try:
            await ctx.bookies.call(bookie, OpCode.TRIM, ledger_id, first_kept, master_key=key)
        except UNKNOWN_OUTCOMES:
            pass

    await asyncio.gather(*(cut(b) for b in bookies))
    return md, new
