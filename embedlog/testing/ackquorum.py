"""Invariant 4 of issue #14, ``AllCommittedEntriesReachAckQuorum`` in the TLA+ model.

Every acknowledged entry has at least AQ copies, with its payload, among the bookies of
its write set in the metadata, as each bookie's own storage says (not as a client reads
it: a read needs one copy, durability needs AQ). The model checks the entries of a
closed ledger, and exempts histories with data loss; here the exemption is per entry:
when more than AQ - 1 bookies of its write set lost their disks (a crash without the
journal, a wiped disk), nothing can promise AQ copies any more.

Streams (unbounded ledgers) drop entries on purpose: a trim takes every entry below the
first fragment it keeps, so only acknowledged ids at or above the metadata's first
fragment are held to the rule. A takeover's truncation drops only older terms'
entries that were never acknowledged, so it needs no exemption: an acknowledged entry
it took is a loss. A stored stream entry carries its term before the payload; the
reader (``entry_payload``) compares the application's payload only.

``short_of_ack_quorum`` is the rule; ``missing_copies`` applies it to a whole history.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping

from attrs import frozen

from embedlog.errors import BookieIOError, NoSuchLedgerInMetadataError
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.metadata.striping import write_set_bookies
from embedlog.unbounded import layout
from embedlog.wire.entry import FLAG_NOOP, HEADER
from embedlog.wire.record import split_record


def exempt(write_set: Collection[str], ack_quorum: int, lost_disks: Collection[str]) -> bool:
    """More than AQ - 1 bookies of the write set lost their disks: AQ copies may be gone
    for good, whatever the protocol does."""
    return len(set(write_set) & set(lost_disks)) > ack_quorum - 1


def short_of_ack_quorum(
    holders: Collection[str],
    write_set: Collection[str],
    ack_quorum: int,
    lost_disks: Collection[str],
) -> bool:
    """Whether an acknowledged entry held by ``holders`` breaks the invariant."""
    if exempt(write_set, ack_quorum, lost_disks):
        return False
    return len(set(holders) & set(write_set)) < ack_quorum


@frozen
class Shortfall:
    ledger_id: int
    entry_id: int
    write_set: tuple[str, ...]
    holders: tuple[str, ...]
    ack_quorum: int

    def __str__(self) -> str:
        return (
            f"acknowledged entry {self.ledger_id}:{self.entry_id} has "
            f"{len(self.holders)} cop{'y' if len(self.holders) == 1 else 'ies'} "
            f"({', '.join(self.holders) or 'none'}) in its write set "
            f"{list(self.write_set)}, fewer than AQ = {self.ack_quorum}"
        )


# ``stored(bookie, ledger, entry)``: the payload the bookie's storage holds for the entry,
# None when it holds none (or is not running).
Stored = Callable[[str, int, int], "bytes | None"]


def missing_copies(
    acked: Mapping[int, Mapping[int, bytes]],
    metadata: Callable[[int], LedgerMetadata],
    stored: Stored,
    lost_disks: Collection[str],
) -> list[Shortfall]:
    """Every acknowledged entry (``acked``: ledger -> entry -> payload) short of AQ copies.

    Entries above a closed ledger's end are no part of it (invariant 2 reports them)."""
    out: list[Shortfall] = []
    for lid in sorted(acked):
        try:
            md = metadata(lid)
        except NoSuchLedgerInMetadataError:
            continue  # deleted: nothing is promised of it any more
        closed_at = md.last_entry_id if md.state is LedgerState.CLOSED else None
        first = layout.first_entry(md) if md.unbounded else 0  # below: trimmed on purpose
        for eid, payload in sorted(acked[lid].items()):
            if (closed_at is not None and eid > closed_at) or eid < first:
                continue
            ws = write_set_bookies(eid, md.ensemble_for(eid), md.write_quorum)
            holders = [b for b in ws if stored(b, lid, eid) == payload]
            if short_of_ack_quorum(holders, ws, md.ack_quorum, lost_disks):
                out.append(Shortfall(lid, eid, tuple(ws), tuple(holders), md.ack_quorum))
    return out


def entry_payload(data: bytes, skip: int) -> bytes | None:
    """The application's payload of a stored entry (``skip``: its header and digest), its
    term taken off; None for a no-op, which is nobody's payload."""
    flags = HEADER.unpack_from(data)[3]
    if flags & FLAG_NOOP:
        return None
    return split_record(flags, data[skip:])[2]


def storage_reader(
    storages: Callable[[str], object | None], payload_of: Callable[[bytes], bytes | None]
) -> Stored:
    """``stored`` for ``missing_copies`` from each running bookie's ``LedgerStorage``
    (``storages(bookie)``, None when it is down): asked directly, no request involved."""

    def stored(bookie: str, lid: int, eid: int) -> bytes | None:
        storage = storages(bookie)
        if storage is None:
            return None
        try:
            data = storage.get(lid, eid)  # type: ignore[attr-defined]
        except BookieIOError:
            return None  # indexed but unreadable: no copy
        return None if data is None else payload_of(data)

    return stored


def describe(shortfalls: Iterable[Shortfall], limit: int = 5) -> list[str]:
    items = list(shortfalls)
    lines = [str(s) for s in items[:limit]]
    if len(items) > limit:
        lines.append(f"... and {len(items) - limit} more")
    return lines
