"""The I/O of one replacement of failed bookies: who is available, readying, the CAS.

The add pipeline (pipeline.py) decides what to replace and from which entry (a
``Replacement``), and what the outcome means for the adds; ``replace_bookies`` does
the part between, for the writer (writer.py): it picks replacements from the writable
bookies (the placement policy), readies them (a stream's new members drop what older
terms left, ``prepare``), and makes the new fragment durable by compare-and-swap
before anything is resent (a recovery keeps it in memory until its closing CAS).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from attrs import frozen

from embedlog.errors import (
    InvalidTermError,
    LedgerDeletedError,
    MetadataVersionError,
    NoSuchLedgerInMetadataError,
    NotEnoughBookiesError,
)
from embedlog.ledger.context import ClientContext
from embedlog.ledger.pending import error_for_state
from embedlog.ledger.phase import Replacement
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.wire.messages import NO_TERM

log = logging.getLogger(__name__)


@frozen
class Replaced:
    """The new fragment (``md``; None: no replacement was found or readied), the slots
    it replaced with their new bookies, and which of those were readied."""

    md: LedgerMetadata | None
    replaced: dict[int, str]
    ready: set[str]


async def replace_bookies(
    ctx: ClientContext,
    plan: Replacement,
    exclusions: Callable[[], set[str]],
    prepare: Callable[[set[str], int], Awaitable[set[str]]],
    *,
    recovery: bool,
    term: int,
) -> Replaced | LedgerMetadata:
    """Carry out ``plan``: what was replaced, or the fresh metadata when another client's
    change came first (the pipeline tries again against it). ``exclusions``: bookies
    never to pick, asked once the available bookies are known."""
    md = plan.md
    ensemble = list(plan.ensemble)
    available = await ctx.writable_bookies()
    exclude = exclusions()
    replaced: dict[int, str] = {}
    for idx, b in enumerate(ensemble):
        if b in plan.failed:
            try:
                nb = ctx.placement.replace_bookie(
                    ensemble, idx, md.write_quorum, available, exclude=exclude
                )
            except NotEnoughBookiesError:
                continue
            ensemble[idx] = nb
            replaced[idx] = nb
    if not replaced:
        return Replaced(None, {}, set())
    # Readied before the metadata lists them: an entry already acknowledged moves to its
    # replacement with this change, and a replacement still holding an older term's entry
    # at its id would serve readers that payload.
    ready = await prepare(set(replaced.values()), plan.first)
    for idx in [i for i, nb in replaced.items() if nb not in ready]:
        ensemble[idx] = plan.ensemble[idx]
        del replaced[idx]
    if not replaced:
        return Replaced(None, {}, ready)
    new_md = md.with_ensemble(plan.first, tuple(ensemble))
    if not recovery:
        try:
            new_md = await ctx.meta(ctx.metadata.write_ledger, new_md)
        except MetadataVersionError:
            return await _fresh(ctx, md, term)
    log.info(
        "ledger %s: ensemble change at entry %s: %s -> %s",
        md.ledger_id,
        plan.first,
        list(plan.ensemble),
        ensemble,
    )
    return Replaced(new_md, replaced, ready)


async def _fresh(ctx: ClientContext, md: LedgerMetadata, term: int) -> LedgerMetadata:
    """The metadata another client changed, if this writer may still write to it."""
    try:
        fresh = await ctx.meta(ctx.metadata.read_ledger, md.ledger_id)
    except NoSuchLedgerInMetadataError:
        raise LedgerDeletedError(
            f"ensemble change: ledger {md.ledger_id} was deleted; create a new one to go on"
        ) from None
    if fresh.state is not LedgerState.OPEN:
        raise error_for_state(fresh, "ensemble change")
    if fresh.term != term and term != NO_TERM:
        raise InvalidTermError(f"ledger {md.ledger_id}: term {fresh.term} took over from {term}")
    return fresh
