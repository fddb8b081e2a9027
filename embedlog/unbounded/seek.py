"""Finding a stream's entry by time (``UnboundedLedger.entry_id_at``).

A binary search over entry ids that reads a few entries per step (``read`` is injected:
it gives each entry's id and time, from the handle's reads or from a list in tests), so
finding a time in a stream of N entries costs about log2(N) small reads, never a scan of
the stream.

What it finds: an entry whose timestamp is at or after ``t`` and whose previous entry
(readers' view: no-ops left out, within the kept range) has a timestamp before ``t`` or
is the first kept; LAC + 1 when the last entry's timestamp is before ``t``. While
timestamps never go backwards (the writer's own clock: the default), that is the first
entry at or after ``t``. Callers that set timestamps that go backwards get one such
boundary, not necessarily the first: a sorted view of a stream that is not sorted does
not exist without reading it all. Entries without a timestamp (written before records
existed) count as older than any time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

# Entries read per step: a no-op (every takeover writes one) or a run of them must not
# end the search, and a batch of 8 costs about what one entry does.
PROBE = 8

# (first, last) -> (entry id, its time or None) of the entries readers see among them.
ReadTimes = Callable[[int, int], Awaitable[list[tuple[int, float | None]]]]


async def entry_id_at(read: ReadTimes, first: int, lac: int, t: float) -> int:
    """The id of an entry at or after ``t`` (see the module's docstring), searching the
    ids ``first``..``lac``; ``lac + 1`` when none is."""
    lo, hi = first, lac + 1  # the answer lies in lo..hi; hi is an entry at/after t or LAC+1
    answer = lac + 1
    while lo < hi:
        mid = (lo + hi) // 2
        found = await _first_visible(read, mid, hi - 1)
        if found is None:
            hi = mid  # mid..hi-1 are all no-ops: nothing to find there
        elif found[1] is not None and found[1] >= t:
            answer = hi = found[0]
        else:
            lo = found[0] + 1
    return answer


async def _first_visible(read: ReadTimes, first: int, last: int) -> tuple[int, float | None] | None:
    while first <= last:
        batch = await read(first, min(first + PROBE - 1, last))
        if batch:
            return batch[0]
        first += PROBE
    return None
