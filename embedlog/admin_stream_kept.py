"""What a stream keeps, as ``embedlog stream list`` and ``stream show`` count it: the
entries readers see (no-op ids of takeovers are not entries) and their payload bytes.

Retention's marks (embedlog/unbounded/retention.py) record, for each sealed stretch, its
payload bytes and the entries readers see in it. A mark vouches for its stretch only when
its count is the stretch's whole id span: a stretch with a takeover holds a no-op (and
entries of the earlier term the new writer may not have counted: it counts them only
for a max_entries or max_bytes limit, and a failed count leaves them out), a mark stored
before marks counted entries has no count, and the first stretch kept may have been
partly trimmed (a trim stops at any fragment boundary, an ensemble change's too). Every
id a mark does not vouch for is read: the open stretch, and the whole stream when it has
no retention. ``plan`` decides which (a pure function); ``count`` reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from attrs import frozen

from embedlog.errors import NoSuchEntryError
from embedlog.unbounded import layout
from embedlog.unbounded.retention import Mark

if TYPE_CHECKING:
    from embedlog.unbounded.ledger import UnboundedLedger

ATTEMPTS = 3  # a trim that lands while the stream is counted: count again


@frozen
class Plan:
    """What the marks vouch for, and the id ranges (first, last) to read for the rest."""

    entries: int
    bytes: int
    to_read: tuple[tuple[int, int], ...]


@frozen
class Kept:
    """What a stream keeps: entries readers see, their payload bytes, and how many of those
    entries were read to count them (the rest came from retention's marks)."""

    first_kept: int
    lac: int
    entries: int
    bytes: int
    read: int


def plan(marks: Sequence[Mark], first_kept: int, lac: int) -> Plan:
    """Which kept ids the marks vouch for (stretches first_kept..lac): module docstring."""
    entries = size = 0
    ranges: list[tuple[int, int]] = []

    def read(first: int, last: int) -> None:
        if first > last:
            return
        if ranges and ranges[-1][1] + 1 == first:
            ranges[-1] = (ranges[-1][0], last)
        else:
            ranges.append((first, last))

    # Where the first stretch kept began: the end of the mark before it, if that mark is
    # still stored; at 0 when nothing was ever trimmed (no mark was pruned); else unknown.
    start: int | None = 0 if first_kept == 0 else None
    at = first_kept  # the first id not yet accounted for
    for mark in marks:
        end = mark[0]
        if end <= first_kept:
            start = end
            continue
        if at > lac:
            break
        whole = start is not None and start >= first_kept and end <= lac + 1
        if whole and len(mark) > 3 and mark[3] == end - at:  # type: ignore[misc]
            entries += mark[3]  # type: ignore[misc]
            size += mark[1]
        else:
            read(at, min(end - 1, lac))
        at = start = end
    read(at, lac)
    return Plan(entries, size, tuple(ranges))


def count(ul: UnboundedLedger) -> Kept:
    """What the stream of follower ``ul`` keeps: the marks' figures, the rest read."""
    for _attempt in range(ATTEMPTS - 1):
        try:
            return _count(ul)
        except NoSuchEntryError:
            continue  # trimmed while read: count again from the new first kept entry
    return _count(ul)


def _count(ul: UnboundedLedger) -> Kept:
    ul.first_entry_id()  # rereads the metadata and the LAC
    md, lac = ul.metadata, ul.last_add_confirmed
    first = min(layout.first_entry(md), lac + 1)
    p = plan(layout.marks(md), first, lac)
    read = size = 0
    for lo, hi in p.to_read:
        for entry in ul.entries(lo, hi):
            read += 1
            size += len(entry.data)
    return Kept(first, lac, p.entries + read, p.bytes + size, read)


__all__ = ["Kept", "Plan", "count", "plan"]
