"""Trimming: delete whole fragments below an entry id, in the metadata and on the bookies.

A trim has two steps. First it is *decided*: the stream's trim point (``first_kept``,
kept in the metadata store beside its cursors: ``metadata/streams.py``) is raised by
compare-and-swap, from cursor positions read after that node's version, so a trim never
passes a cursor committed before it was decided (docs/unbounded.md, "Why a trim never
passes a committed cursor"). Then it is *applied*: a compare-and-swap drops the
fragments wholly below the trim point from the ledger's node (readers then see the new
low-water mark and never ask for the trimmed entries), and each bookie of a dropped
fragment is told to delete the ledger's entries below it (TRIM). Whoever finds a decided
trim point not applied yet may apply it (a writer that crashed between the steps, a
commit that landed below a trim decided first); applying is idempotent.

A bookie that cannot be reached keeps its copies until it is trimmed again (entries of
already-dropped fragments are garbage the auditor can find). The last fragment is never
dropped, and only whole fragments are: entries of a partly trimmed fragment stay
readable. Bookies free the disk space by deleting the entry log files that only held
trimmed entries (``bookie/storage.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from embedlog.errors import MetadataVersionError
from embedlog.ledger.bookie_client import UNKNOWN_OUTCOMES
from embedlog.ledger.context import ClientContext
from embedlog.metadata import streams
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.unbounded import rules
from embedlog.wire.messages import OpCode

# (the decided trim point, the cursors read after it) -> the entry id to trim below
Wanted = Callable[[int, dict[str, int]], int]


async def decide(ctx: ClientContext, md: LedgerMetadata, wanted: Wanted) -> int:
    """Raise the stream's decided trim point to what ``wanted`` asks (rounded down to a
    fragment boundary of ``md``); returns the trim point decided now."""

    def boundary(first_kept: int, positions: dict[str, int]) -> int:
        return rules.trim_plan(md.fragments, wanted(first_kept, positions))[2]

    store = ctx.metadata.store
    return await ctx.meta(streams.raise_trim_point, store, md.ledger_id, boundary)


async def apply(
    ctx: ClientContext, ledger_id: int, first_kept: int, key: bytes
) -> tuple[LedgerMetadata, LedgerMetadata]:
    """Drop the fragments wholly below the decided ``first_kept``; (the metadata this
    compare-and-swap replaced, the metadata after; the same twice if nothing was left to
    drop). The bookies of every fragment seen below it are told to trim, also
    when another client's compare-and-swap dropped the fragment first."""
    bookies: set[str] = set()
    while True:
        md = await ctx.meta(ctx.metadata.read_ledger, ledger_id)
        kept, dropped, _ = rules.trim_plan(md.fragments, first_kept)
        bookies |= {b for _, ens in dropped for b in ens}
        if not dropped:
            new = md
            break
        try:
            new = await ctx.meta(ctx.metadata.write_ledger, md.evolve(fragments=kept))
            break
        except MetadataVersionError:
            continue  # the writer changed fragments meanwhile: plan again

    async def cut(bookie: str) -> None:
        try:
            await ctx.bookies.call(bookie, OpCode.TRIM, ledger_id, first_kept, master_key=key)
        except UNKNOWN_OUTCOMES:
            pass

    await asyncio.gather(*(cut(b) for b in sorted(bookies)))
    return md, new


async def trim(
    ctx: ClientContext, ledger_id: int, before: int, key: bytes
) -> tuple[LedgerMetadata, LedgerMetadata]:
    """``ul.trim(before)``: decide and apply a trim below ``before`` whatever the cursors
    say; (metadata before, metadata after)."""
    md = await ctx.meta(ctx.metadata.read_ledger, ledger_id)
    first_kept = await decide(ctx, md, lambda _decided, _cursors: before)
    return await apply(ctx, ledger_id, first_kept, key)
