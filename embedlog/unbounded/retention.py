"""Retention: the writer trims whole fragments that lie beyond a stream's limits.

``Retention(max_entries, max_bytes, max_age)`` is kept in the ledger's metadata (settings
key ``retention``), so every term's writer applies it. Like Kafka's retention, a fragment
goes once it lies beyond *any* limit: older than ``max_age`` seconds, below the newest
``max_entries`` entries, or below the newest ``max_bytes`` payload bytes. Only whole
fragments go (the last one never), so a stream keeps a little more than its limits; to
keep that overshoot small the writer also rolls over to a new fragment by size and age,
by default at a quarter of each limit, so a quiet stream's entries still age out.

Trims never pass a cursor (a consumer's committed position) unless the stream was
created with ``retention_overrides_cursors=True``.

What each sealed stretch of the stream holds is recorded at every rollover in the same
compare-and-swap that starts the new fragment, as marks ``[end, bytes, sealed_at]``: the
entries below ``end`` (since the previous mark) hold ``bytes`` payload bytes and were
all written before ``sealed_at`` (unix seconds). Bytes are counted by the writer that
sealed the stretch: a stretch that a takeover continued counts only the new term's part.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from attrs import frozen

from embedlog import validate

Mark = tuple[int, int, float]  # (end entry id, exclusive; payload bytes; sealed at)
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


def trim_point(
    retention: Retention,
    marks: Sequence[Mark],
    lac: int,
    open_bytes: int,
    now: float,
    cursor_floor: int | None,
) -> int:
    """The entry id below which retention drops everything (0: nothing).

    ``marks`` in order of ``end``; ``open_bytes``: payload bytes written since the last
    mark; ``cursor_floor``: the lowest committed cursor position + 1 (None: no cursors, or
    they do not hold retention back).
    """
    before = 0
    if retention.max_entries is not None:
        before = max(before, lac + 1 - retention.max_entries)
    if retention.max_age is not None:
        for end, _, sealed in marks:
            if sealed < now - retention.max_age:
                before = max(before, end)
    if retention.max_bytes is not None:
        kept = open_bytes
        for end, size, _ in reversed(marks):
            if kept + size > retention.max_bytes:
                before = max(before, end)
                break
            kept += size
    if cursor_floor is not None:
        before = min(before, cursor_floor)
    return max(0, before)


def prune(marks: Sequence[Mark], first_kept: int) -> list[Mark]:
    """Marks still describing stored entries after a trim to ``first_kept``."""
    return [m for m in marks if m[0] > first_kept]


class SegmentCounter:
    """What the writer counts for rollover and retention since the last mark."""

    def __init__(self, rollover: Rollover) -> None:
        self.rollover = rollover
        self.bytes = 0
        self.started = time.time()

    def due(self) -> bool:
        """Whether the open stretch reached a size or age limit."""
        r = self.rollover
        if r.bytes is not None and self.bytes >= r.bytes:
            return True
        return r.age is not None and self.bytes > 0 and time.time() - self.started >= r.age

    def seal(self, end: int) -> Mark:
        mark = (end, self.bytes, time.time())
        self.bytes = 0
        self.started = time.time()
        return mark


__all__ = ["Retention", "Rollover", "SegmentCounter", "prune", "rollover_for", "trim_point"]
