"""Retention: the writer trims whole fragments that lie beyond a stream's limits.

``Retention(max_entries, max_bytes, max_age)`` is kept in the ledger's metadata (settings
key ``retention``), so every term's writer applies it. Like Kafka's retention, a fragment
goes once it lies beyond *any* limit: its newest entry written more than ``max_age``
seconds ago, or while what stays without it still holds at least ``max_entries`` entries
readers see and ``max_bytes`` payload bytes (never less than the limit). Only whole
fragments go (the last one never); to keep the overshoot small the writer also rolls over
to a new fragment by size and age, by default at a quarter of each limit, so a quiet
stream's entries still age out.

Trims never pass a cursor (a consumer's committed position) unless the stream was
created with ``retention_overrides_cursors=True``: the decision is made against the
cursors on the stream's trim point node (``trim.py``, ``metadata/streams.py``).

What each sealed stretch of the stream holds is recorded at every rollover in the same
compare-and-swap that starts the new fragment, as marks ``[end, bytes, sealed_at,
entries]``: the entries below ``end`` (since the previous mark) hold ``bytes`` payload
bytes and ``entries`` entries readers see (no-ops left out), all written by
``sealed_at`` (unix seconds: the newest one's write as far as the writer knows, see
``SegmentCounter``). A writer that took over counts and dates the stretch it inherited
from the entries themselves (``retaining.StreamRetention.count_inherited``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from attrs import frozen

from embedlog import validate
from embedlog.clock import SYSTEM_CLOCK, Clock

# (end entry id, exclusive; payload bytes; sealed at; entries readers see). Marks stored
# before entries were counted have only the first three.
Mark = tuple[int, int, float, int] | tuple[int, int, float]
ROLLOVER_SHARE = 4  # a fragment rolls over at 1/4 of each limit


@frozen
class Retention:
    """How much of a stream to keep (None: no limit of that kind)."""

    max_entries: int | None = None
    max_bytes: int | None = None
    max_age: float | None = None  # seconds

    def __attrs_post_init__(self) -> None:
        validate.optional_count(self.max_entries, "max_entries")
        validate.optional_count(self.max_bytes, "max_bytes")
        age = validate.optional_seconds(self.max_age, "max_age")
        if age is not None and age <= 0:
            raise ValueError(f"max_age must be > 0 seconds, got {age}")

    def to_json(self) -> dict[str, Any]:
        return {
            "max_entries": self.max_entries,
            "max_bytes": self.max_bytes,
            "max_age": self.max_age,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Retention:
        return cls(doc.get("max_entries"), doc.get("max_bytes"), doc.get("max_age"))


@frozen
class Rollover:
    """When the writer starts a new fragment (None: not for that reason)."""

    entries: int | None = None
    bytes: int | None = None
    age: float | None = None


def rollover_for(retention: Retention | None, fragment_max_entries: int | None) -> Rollover:
    """The rollover limits: fragment_max_entries if given, else a share of each limit."""

    def share(limit: float | None) -> Any:
        return None if limit is None else max(1, limit // ROLLOVER_SHARE)

    if retention is None:
        return Rollover(fragment_max_entries)
    entries = fragment_max_entries or share(retention.max_entries)
    return Rollover(entries, share(retention.max_bytes), share(retention.max_age))


def _stretches(marks: Sequence[Mark], first_kept: int) -> list[tuple[int, int, float, int]]:
    """Each sealed stretch still stored, oldest first: (end, payload bytes, sealed at,
    entries readers see). A mark written before marks counted entries gives its id span
    (no-op ids included: an over-count, so such a stretch may go a little early)."""
    out = []
    start = first_kept
    for mark in marks:
        end, size, sealed = mark[0], mark[1], mark[2]
        if end <= first_kept:
            continue
        count = mark[3] if len(mark) > 3 else end - max(start, first_kept)  # type: ignore[misc]
        out.append((end, size, sealed, count))
        start = end
    return out


def limit_point(
    retention: Retention,
    marks: Sequence[Mark],
    first_kept: int,
    open_bytes: int,
    open_entries: int,
    now: float,
) -> int:
    """The entry id below which the limits alone would drop everything (0: nothing).

    A sealed stretch goes once it is older than ``max_age`` (its mark's time more than
    that ago: every entry in it was written by then), or while what stays without it
    still holds at least ``max_entries`` entries and ``max_bytes`` payload bytes
    (Kafka's ``retention.bytes`` rule: never keep less than the limit). ``open_bytes``
    and ``open_entries``: what the open stretch (since the last mark) holds.
    """
    stretches = _stretches(marks, first_kept)
    before = 0
    if retention.max_age is not None:
        for end, _, sealed, _ in stretches:
            if sealed < now - retention.max_age:
                before = max(before, end)
    for limit, index, open_part in (
        (retention.max_bytes, 1, open_bytes),
        (retention.max_entries, 3, open_entries),
    ):
        if limit is None:
            continue
        total = open_part + sum(int(st[index]) for st in stretches)
        for st in stretches:
            size = int(st[index])
            if total - size < limit:
                break
            total -= size
            before = max(before, st[0])
    return before


def trim_point(
    retention: Retention,
    marks: Sequence[Mark],
    first_kept: int,
    open_bytes: int,
    open_entries: int,
    now: float,
    cursor_floor: int | None,
) -> int:
    """The entry id below which retention drops everything (0: nothing): the limits'
    point, never above ``cursor_floor`` (the lowest committed cursor position + 1; None:
    no cursors, or they do not hold retention back)."""
    before = limit_point(retention, marks, first_kept, open_bytes, open_entries, now)
    if cursor_floor is not None:
        before = min(before, cursor_floor)
    return max(0, before)


def held_back(
    marks: Sequence[Mark], first_kept: int, trim_at: int, limits_at: int
) -> tuple[int, int]:
    """(entries, payload bytes) kept only because a cursor holds retention back: the
    sealed stretches between where the trim stops (``trim_at``) and where the limits
    alone would trim (``limits_at``)."""
    entries = size = 0
    for end, nbytes, _, count in _stretches(marks, first_kept):
        if trim_at < end <= limits_at:
            entries += count
            size += nbytes
    return entries, size


def prune(marks: Sequence[Mark], first_kept: int) -> list[Mark]:
    """Marks still describing stored entries after a trim to ``first_kept``."""
    return [m for m in marks if m[0] > first_kept]


class SegmentCounter:
    """What the writer counts for rollover and retention since the last mark.

    ``inherited``: the open stretch holds entries of an earlier term (after a takeover)
    that this writer did not count; ``started`` is then when that stretch began (the
    last seal, or the stream's creation), so a quiet stream still rolls over by age and
    its entries age out with no append from the new writer.

    A mark's time is when the stretch's newest entry was written, as far as the writer
    knows: its own last append's acknowledgement; for a stretch that holds only earlier
    terms' entries (a quiet takeover), the time the last one's record keeps of its
    writer's clock (``written``); else the seal's own time. So a quiet stream's entries
    go ``max_age`` after they were written, not after the tick that sealed them, and
    entries already older than ``max_age`` when a takeover came go at its first age
    tick, not ``max_age`` after it.
    """

    def __init__(
        self,
        rollover: Rollover,
        *,
        started: float | None = None,
        inherited: bool = False,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.rollover = rollover
        self._clock = clock
        self.bytes = 0
        self.entries = 0
        self.started = clock.time() if started is None else started
        self.inherited = inherited
        self._own_at: float | None = None  # this writer's last append's acknowledgement
        self._written: float | None = None  # the last earlier-term entry's record time

    def count(
        self, payload_bytes: int, *, earlier: bool = False, written_at: float | None = None
    ) -> None:
        """One entry readers will see (not a no-op), of this many payload bytes: this
        writer's append, or an ``earlier`` term's entry (written at ``written_at`` when
        its record says)."""
        self.bytes += payload_bytes
        self.entries += 1
        if earlier:
            self.written(written_at)
        else:
            self._own_at = self._clock.time()

    def written(self, at: float | None) -> None:
        """An earlier-term entry of the stretch, read in id order, was written at ``at``
        (None: its record does not say, and the stretch counts as written now unless a
        later entry says). The newest time read counts: producers whose appends waited
        for room may have packed them a little out of id order."""
        if at is None or self._written is None:
            self._written = at
        else:
            self._written = max(self._written, at)

    def stamp(self) -> float:
        """The time a mark sealing the stretch now records (see the class)."""
        now = self._clock.time()
        if self._own_at is not None:
            return self._own_at
        if self._written is None:
            return now
        return min(now, self._written)

    def due(self) -> bool:
        """Whether the open stretch reached a size or age limit."""
        r = self.rollover
        if r.bytes is not None and self.bytes >= r.bytes:
            return True
        holds = self.entries > 0 or self.inherited
        return r.age is not None and holds and self._clock.time() - self.started >= r.age

    def seal(self, end: int) -> Mark:
        mark = (end, self.bytes, self.stamp(), self.entries)
        self.bytes = self.entries = 0
        self.inherited = False
        self._own_at = self._written = None
        self.started = self._clock.time()
        return mark


__all__ = [
    "Retention",
    "Rollover",
    "SegmentCounter",
    "held_back",
    "limit_point",
    "prune",
    "rollover_for",
    "trim_point",
]
