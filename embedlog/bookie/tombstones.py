"""Tombstones: what a bookie keeps of a ledger it dropped, and what it answers for one.

A bookie drops a ledger on a DELETE_LEDGER that proved the ledger's key, or in garbage
collection once the ledger's metadata is gone (gc.py). Without a trace of it, the
ledger's old writer could bring it back: its next add would find a ledger the bookie
knows nothing of, bind the writer's key to it and be acknowledged, and the writer would
be told an entry is safe that no reader can ever find (the metadata is gone). So the
bookie keeps a tombstone: the ledger's id and master key, written in the synced index
batch that deletes the ledger's state and entries (storage.py), so that no crash keeps
one without the other, and taking effect in memory before the drop starts, so that no
add arriving while the drop runs is admitted.

While it holds a tombstone, the bookie refuses every request that would create or
change the ledger's state (``tombstone_verdict``): the writer learns from EDELETED that
its ledger was deleted (LedgerDeletedError). Requests that change nothing (plain
reads, READ_LAC, READ_BATCH, LIST_ENTRIES) are answered as for a ledger the bookie never
held: NoSuchLedger. That is the one case where a bookie says NoSuchLedger for entries
it acknowledged, and it is no loss: the ledger was deleted on purpose, its metadata
went first, and no reader can find its entries any more (docs/bp46.md).

The key: a request must prove the key the tombstone keeps, as it had to prove the key
the ledger's state kept, or it is refused with EUA. So a tombstone gives a request
without the key nothing it could not do before: neither an EOK nor the news that the
ledger was deleted. A ledger whose state held no key (a BP-46 record that never got
one) keeps an empty key, which no request matches.

Tombstones are kept for the bookie's life (until its index disk is wiped): ledger ids
are never reused (the metadata store allocates them from a counter), so a tombstone
never stands in a new ledger's way, and expiring one would open the window again for a
writer that was partitioned for longer than the expiry. The cost is one index key per
ledger the bookie dropped (its id and key: about 33 bytes on disk, nothing in memory
once written); BP-46 boots neither protect nor repair a ledger it holds a tombstone
of, and journal replay never brings one back.
"""

from __future__ import annotations

import hmac

from embedlog.bookie.index import LedgerIndex
from embedlog.bookie.keys import MASTER_KEY_SIZE, needs_key
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import OpCode, Request


def tombstone_verdict(req: Request, key: bytes) -> StatusCode | None:
    """The answer to ``req`` for a ledger the bookie holds a tombstone of (``key``: the
    master key the ledger had when it was dropped); None for a request that changes
    nothing, which is served as for a ledger the bookie never held.

    A request that would change the ledger must prove ``key`` (EUA otherwise, whatever
    it asks); then a repeated DELETE_LEDGER is done already (EOK), and anything else
    (adds, WRITE_LAC, fencing and term-carrying reads, TRIM of either kind) is refused
    with EDELETED.
    """
    if not needs_key(req):
        return None
    sent = req.master_key
    # In constant time, as keys.key_verdict: a refusal must not tell how much of a guess
    # matched. An empty key (a record that never held one) matches nothing.
    if len(sent) != MASTER_KEY_SIZE or not key or not hmac.compare_digest(key, sent):
        return StatusCode.EUA
    if req.op == OpCode.DELETE_LEDGER:
        return StatusCode.EOK
    return StatusCode.EDELETED


class Tombstones:
    """A bookie's tombstones: those its index holds, and those of drops under way, kept
    in memory from the moment the drop starts until the flush that writes them is synced
    (``pending``, handed to that flush by ``LedgerStorage``)."""

    def __init__(self, index: LedgerIndex, *, keep: bool = True) -> None:
        """``keep=False`` (the bookie setting ``unsafe_forget_deletions``, tests only)
        keeps none: a dropped ledger is forgotten, as if it never was."""
        self._index = index
        self._keep = keep
        self.pending: dict[int, bytes] = {}  # ledger -> key, not yet in the index

    def key(self, ledger_id: int) -> bytes | None:
        """The master key kept with the ledger's tombstone; None if there is none."""
        key = self.pending.get(ledger_id)
        return key if key is not None else self._index.tombstone(ledger_id)

    def bury(self, ledger_id: int, key: bytes) -> None:
        """The ledger is being dropped: refused from now on; durable with the next flush."""
        if self._keep:
            self.pending[ledger_id] = self.key(ledger_id) or key

    def written(self, flushed: dict[int, bytes]) -> None:
        """``flushed`` (a snapshot of ``pending``) is in the index now."""
        for lid, key in flushed.items():
            if self.pending.get(lid) == key:
                del self.pending[lid]
