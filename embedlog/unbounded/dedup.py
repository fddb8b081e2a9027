"""Idempotent appends: which message ids a stream's writer has appended lately.

An append with a ``msg_id`` that the stream took within its deduplication window
(``create_unbounded(dedup_window=...)``, seconds) returns the entry id already there and
appends nothing. The window is measured on the writer's clock at the time of the
append, which the record keeps (its timestamp, or, when the caller set the timestamp,
the ``appended`` field: embedlog/wire/record.py).

The writer keeps the ids it appended in its term (``DedupWindow``); a writer that takes
the stream over rebuilds the window from the entries themselves before its first
append (``UnboundedLedger``: it reads back from the first entry appended within the
window), so a producer whose append had an unknown outcome (a timeout,
``InvalidTermError``) can retry through the new writer and never duplicate.

Bounds: ids live at least ``window`` seconds (plus the skew between the clocks of two writers'
hosts, which shortens the window across a takeover by that much); each costs about
250 bytes of memory plus its length (benchmarks/bench_records.py).
"""

from __future__ import annotations

from collections import OrderedDict

from attrs import define, field


@define
class DedupWindow:
    """msg_id -> (entry id, appended at), oldest first; ``prune`` drops what aged out."""

    window: float
    _ids: OrderedDict[bytes, tuple[int, float]] = field(factory=OrderedDict)

    def __len__(self) -> int:
        return len(self._ids)

    def find(self, msg_id: bytes, now: float) -> int | None:
        """The entry id ``msg_id`` was appended at within the window, or None."""
        self.prune(now)
        seen = self._ids.get(msg_id)
        return None if seen is None else seen[0]

    def record(self, msg_id: bytes, entry_id: int, appended_at: float) -> None:
        """``msg_id`` was appended at ``entry_id``; the first time it was counts."""
        if msg_id in self._ids:
            return
        self._ids[msg_id] = (entry_id, appended_at)

    def prune(self, now: float) -> None:
        # Ids are kept in the order they were recorded and pruning stops at the first one
        # still inside the window: after a clock that went back (or two writers' clocks
        # apart) an id outlives the window by at most that much, never less.
        horizon = now - self.window
        ids = self._ids
        while ids:
            msg_id, (_eid, at) = next(iter(ids.items()))
            if at >= horizon:
                return
            del ids[msg_id]
