"""Deleting a stream: fence every writer before anything is deleted.

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

from embedlog.errors import LedgerDeletedError, LedgerRecoveryError, MetadataVersionError
from embedlog.ledger.context import ClientContext
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.unbounded import rules
from embedlog.unbounded.takeover import read_lafr_with_term

MAX_ATTEMPTS = 5


async def fence_for_delete(ctx: ClientContext, md: LedgerMetadata) -> LedgerMetadata:
    """Raise ``md``'s stream to the deleted term in the metadata and on its bookies;
    the metadata as fenced."""
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
            raise LedgerRecoveryError(
                f"ledger {md.ledger_id} was not deleted: its writer could not be fenced "
                f"first ({exc}). Nothing was deleted and no writer can append to it any "
                "more; delete it again when more of its bookies are reachable"
            ) from None
        return md
    raise LedgerRecoveryError(
        f"ledger {md.ledger_id} was not deleted: its metadata kept changing; try again"
    )


def deleted_error(ledger_id: int, what: str) -> LedgerDeletedError:
    return LedgerDeletedError(
        f"stream (ledger) {ledger_id} was deleted: {what}; create the stream again (a "
        "new ledger) to go on"
    )
