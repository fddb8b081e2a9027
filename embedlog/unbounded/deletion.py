"""Deleting a ledger or a stream: fence every writer before anything is deleted.

A bounded ledger that is not closed is fenced as recovery fences it (quorum coverage of
fenced bookies in every write set of its last fragment), so no add of an old handle can
gather an ack quorum once the delete returned. For a stream:

A writer that still holds a stream must never be told an append is acknowledged once
the delete returned (nobody could read it). Before the metadata goes, the delete raises
the stream's term to ``rules.DELETED_TERM``, first in the metadata (compare-and-swap,
IN_RECOVERY: a writer's next metadata change fails, no takeover starts) and then on the
last fragment's bookies until every write set has quorum coverage (WQ - AQ + 1) that
raised it, as a takeover does (``takeover.read_lafr_with_term``): no write set keeps an
ack quorum for any writer, and each refusal carries the deleted term, so the writer
fails with LedgerDeletedError rather than InvalidTermError. Only the last fragment takes
adds, so it is the only one to fence. Then the metadata, the stream's name, cursors
and sink records go, and every bookie drops the ledger and keeps a tombstone of it
(``bookie/``), which refuses any later write.

Short of coverage (too many bookies of a write set unreachable) the delete fails with
LedgerRecoveryError and deletes nothing; the stream stays fenced (no writer can append)
and the delete can be tried again.
"""

from __future__ import annotations

from embedlog.errors import LedgerRecoveryError, MetadataVersionError
from embedlog.ledger.context import ClientContext
from embedlog.ledger.recovery import fence
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.unbounded import rules
from embedlog.unbounded.takeover import read_lafr_with_term

MAX_ATTEMPTS = 5


async def fence_for_delete(ctx: ClientContext, md: LedgerMetadata) -> LedgerMetadata:
    """Fence every writer of ``md`` (not CLOSED) before it is deleted: a stream at the
    deleted term, a bounded ledger as recovery fences it (every write set of its last
    fragment with quorum coverage of fenced bookies); the metadata as it is then."""
    if not md.unbounded:
        try:
            await fence(ctx, md, md.last_fragment[1], md.master_key)
        except LedgerRecoveryError as exc:
            raise _not_deleted(md, exc) from None
        return md
    for _attempt in range(MAX_ATTEMPTS):
        if md.term != rules.DELETED_TERM:
            try:
                md = await ctx.meta(
                    ctx.metadata.write_ledger,
                    md.evolve(term=rules.DELETED_TERM, state=LedgerState.IN_RECOVERY),
                )
            except MetadataVersionError:
                md = await ctx.meta(ctx.metadata.read_ledger, md.ledger_id)
                continue  # a writer's change or a takeover moved first: fence that
        try:
            await read_lafr_with_term(
                ctx, md, md.last_fragment[1], md.master_key, rules.DELETED_TERM
            )
        except LedgerRecoveryError as exc:
            raise _not_deleted(md, exc) from None
        return md
    raise LedgerRecoveryError(
        f"ledger {md.ledger_id} was not deleted: its metadata kept changing; try again"
    )


def _not_deleted(md: LedgerMetadata, why: LedgerRecoveryError) -> LedgerRecoveryError:
    return LedgerRecoveryError(
        f"ledger {md.ledger_id} was not deleted: its writer could not be fenced first "
        f"({why}). Nothing was deleted, and the bookies that were fenced refuse its "
        "writer; delete it again when more of its bookies are reachable"
    )
