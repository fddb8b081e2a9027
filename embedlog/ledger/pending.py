"""One add on its way: the entry's bytes, its acks and its outcome, until acknowledged."""

from __future__ import annotations

import asyncio
import concurrent.futures

from embedlog.errors import BKError, LedgerClosedError, LedgerDeletedError, LedgerFencedError
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.wire.messages import DELETED_TERM, ENTRY_FRAME

# Where an add's outcome goes: an asyncio future (callers on the loop), or the blocking
# API's concurrent future, completed directly (no asyncio future and callback between).
# A concurrent future must already be RUNNING (set_running_or_notify_cancel), so that the
# caller can no longer cancel it under the writer.
Completion = asyncio.Future[int] | concurrent.futures.Future[int]


class PendingAdd:
    __slots__ = (
        "acked",
        "acks",
        "cost",
        "created",
        "entry_id",
        "flags",
        "framed",
        "future",
        "sent",
        "settled",
    )

    def __init__(
        self,
        entry_id: int,
        framed: bytes,
        future: Completion,
        flags: int,
        cost: int = -1,
        created: float = 0.0,
    ) -> None:
        self.entry_id = entry_id
        self.flags = flags
        # The payload bytes this add holds of the writer's AddBudget until it settles; -1
        # for adds the budget does not count (recovery's write-back, a takeover's no-op).
        self.cost = cost
        # The packed entry as an ADD_BATCH body frames it (``frame_entry``): batches join
        # these as they are, a plain ADD sends ``packed``.
        self.framed = framed
        self.future = future
        # Ensemble indexes that acknowledged, as bits (a set would be one more object per
        # entry for the garbage collector to scan), and how many there are.
        self.acks = 0
        self.acked = 0
        self.sent = False
        # Acknowledged to the caller, or failed. Kept here rather than asked of the future:
        # a concurrent future's done() takes a lock, and answers ask it for every ack.
        self.settled = False
        # When it was added (the client's clock): add latency, and how long it waited for
        # its ack quorum.
        self.created = created

    def ack(self, idx: int) -> None:
        bit = 1 << idx
        if not self.acks & bit:
            self.acks |= bit
            self.acked += 1

    def unack(self, idx: int) -> None:
        bit = 1 << idx
        if self.acks & bit:
            self.acks &= ~bit
            self.acked -= 1

    def has_ack(self, idx: int) -> bool:
        return bool(self.acks >> idx & 1)

    @property
    def packed(self) -> bytes:
        """The entry as a plain ADD carries it (``framed`` without its frame)."""
        return self.framed[ENTRY_FRAME.size :]


def error_for_state(md: LedgerMetadata, what: str) -> BKError:
    """The error a writer raises once the ledger is no longer its to write."""
    if md.state is LedgerState.CLOSED:
        return LedgerClosedError(f"{what}: ledger {md.ledger_id} was closed")
    if md.term >= DELETED_TERM:
        return LedgerDeletedError(
            f"{what}: stream (ledger) {md.ledger_id} is being deleted; create it again to go on"
        )
    return LedgerFencedError(f"{what}: ledger {md.ledger_id} is being recovered by another client")
