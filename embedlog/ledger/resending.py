"""Which adds in flight a bookie gets again: after its slot was replaced, or after a pause.

An ensemble change hands a failed bookie's slots to replacements from the new fragment's
first entry on: the old bookie's acks of those entries count no more, and each readied
replacement gets the entries its slots store that it has not confirmed (``take_back``).
A bookie retried after a pause for want of a replacement gets the entries of its slot it
has not confirmed (``missing``). Both keep the adds' order, so the sends do too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from embedlog.ledger.pending import PendingAdd

# The ensemble slots that store an entry (AddPipeline.write_set).
WriteSet = Callable[[int], Sequence[int]]


def take_back(
    adds: Iterable[PendingAdd],
    first: int,
    replaced: dict[int, str],
    ready: set[str],
    write_set: WriteSet,
    *,
    keep_acks: bool = False,
) -> list[tuple[PendingAdd, int, str]]:
    """Unack the ``replaced`` slots of the sent ``adds`` from ``first`` on (unless
    ``keep_acks``, the unsafe switch), and return the sends (add, slot, bookie) to the
    replacements in ``ready``, in order."""
    moved = [p for p in adds if p.entry_id >= first and p.sent]
    if not keep_acks:
        for p in moved:
            ws = write_set(p.entry_id)
            for idx in replaced:
                if idx in ws:
                    p.unack(idx)
    sends = []
    for p in moved:
        ws = write_set(p.entry_id)
        for idx, bookie in replaced.items():
            if idx in ws and bookie in ready and not p.has_ack(idx):
                sends.append((p, idx, bookie))
    return sends


def missing(
    adds: Iterable[PendingAdd], idx: int, first: int, write_set: WriteSet
) -> list[PendingAdd]:
    """The sent ``adds`` from ``first`` on that slot ``idx`` stores and has not confirmed."""
    return [
        p
        for p in adds
        if p.sent and p.entry_id >= first and idx in write_set(p.entry_id) and not p.has_ack(idx)
    ]
