"""A stream writer's retention: what it counts of the open stretch, the marks a rollover
seals, and the background rounds that trim the whole fragments beyond the stream's limits.

The rules (where the limits put the trim point, what a mark records) are retention.py;
the trim's compare-and-swap against the cursors is trim.py. This part holds what one
writer keeps for them, and reaches the writer only through ``RetainedWriter``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from embedlog.errors import BKError
from embedlog.ledger.bookie_client import UNKNOWN_OUTCOMES
from embedlog.ledger.context import ClientContext
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.unbounded import follow, layout
from embedlog.unbounded import retention as retention_rules
from embedlog.unbounded import trim as trimming
from embedlog.wire.entry import Digester

log = logging.getLogger(__name__)

# At most one warning per stream and writer in this many seconds that a cursor holds
# retention back.
HELD_WARNING_EVERY = 3600.0
# With max_age alone, a writer that took over reads this many of the last entries of the
# stretch it inherited for when the newest was written (no-ops and bare entries have no
# time: none found, the stretch counts as written at its seal).
INHERITED_TIME_READ = 16


class RetainedWriter(Protocol):
    """What retention needs of the stream writer it serves."""

    ctx: ClientContext
    key: bytes
    digester: Digester
    md: LedgerMetadata

    @property
    def lac(self) -> int: ...

    @property
    def error(self) -> BKError | None: ...


class StreamRetention:
    """One writer's share of a stream's retention (``limits`` None: the stream keeps all)."""

    def __init__(
        self,
        writer: RetainedWriter,
        limits: retention_rules.Retention | None,
        segment: retention_rules.SegmentCounter,
    ) -> None:
        self._writer = writer
        self.limits = limits
        self._segment = segment
        self._held_warned = -HELD_WARNING_EVERY  # when a cursor holding retention was logged
        self.counting: asyncio.Task[None] | None = None  # set by the writer (its task)

    def needs_counts(self) -> bool:
        kept = self.limits
        return kept is not None and (kept.max_entries is not None or kept.max_bytes is not None)

    def reads_inherited(self) -> bool:
        """Whether a writer that took over reads back the open stretch earlier terms
        wrote: to count it (``needs_counts``), or, with ``max_age`` only, its newest
        entries' times."""
        return self.needs_counts() or (self.limits is not None and self.limits.max_age is not None)

    async def count_inherited(self) -> None:
        """Count the entries and payload bytes of the open stretch that earlier terms
        wrote (bounded by the rollover limits: a stretch is sealed at a quarter of each
        limit), and learn when its newest entry was written; with ``max_age`` alone, read
        only its last entries for that. A read that fails leaves them uncounted: retention
        then keeps more."""
        w = self._writer
        md = w.md
        marks = layout.marks(md)
        first = max(marks[-1][0] if marks else 0, layout.first_entry(md))
        last = w.lac
        counting = self.needs_counts()
        if not counting:
            first = max(first, last - INHERITED_TIME_READ + 1)
        seg = self._segment
        try:
            for lo in range(first, last + 1, 512):
                follow.check_stored(md, lo)
                rows = await follow.read_records(w.ctx, md, w.digester, lo, min(lo + 511, last))
                for _eid, rec, data in rows:
                    if counting:
                        seg.count(len(data), earlier=True, written_at=rec.appended_at)
                    else:
                        seg.written(rec.appended_at)
        except (BKError, *UNKNOWN_OUTCOMES) as exc:
            log.warning(
                "ledger %s: could not count the entries %s..%s of earlier terms for "
                "retention (%s); they count as none, so retention keeps more",
                md.ledger_id,
                first,
                last,
                exc,
            )

    async def with_sealed_stretch(
        self, md: LedgerMetadata, nxt: LedgerMetadata, at: int
    ) -> LedgerMetadata:
        """``nxt`` (a rollover's new fragment at ``at``) with the stretch it seals recorded
        as a mark, in the same compare-and-swap; ``nxt`` as it is without limits."""
        if self.limits is None:
            return nxt
        if self.counting is not None:
            await asyncio.shield(self.counting)  # the earlier terms' part counts too
        seg = self._segment
        sealed = (at, seg.bytes, seg.stamp(), seg.entries)
        kept = retention_rules.prune(layout.marks(md), layout.first_entry(md))
        return layout.with_stream_settings(nxt, marks=[*kept, sealed])

    async def retain(self) -> None:
        """``apply`` as the writer runs it in the background: a round that fails (the
        metadata store unreachable, a lost compare-and-swap) is skipped with a warning and
        the next rollover or age tick tries again; retention is never worth failing the
        writer or ending its age ticks for."""
        try:
            await self.apply()
        except (BKError, *UNKNOWN_OUTCOMES) as exc:
            log.warning(
                "ledger %s: retention not applied this round (%s); the next rollover or "
                "age tick tries again",
                self._writer.md.ledger_id,
                exc,
            )

    async def apply(self) -> None:
        """Trim the whole fragments beyond the stream's retention limits (retention.py)."""
        w = self._writer
        kept = self.limits
        if kept is None or w.error is not None:
            return
        md = w.md
        marks, first = layout.marks(md), layout.first_entry(md)
        seg = self._segment
        limits_at = retention_rules.limit_point(
            kept, marks, first, seg.bytes, seg.entries, w.ctx.clock.time()
        )
        overrides = layout.retention_overrides_cursors(md)
        cursor_floor: list[int | None] = [None]

        def wanted(_decided: int, positions: dict[str, int]) -> int:
            # Decided from cursor positions read after the trim point's version: a commit
            # that landed since makes this decision's compare-and-swap fail (trim.py).
            floor = None if overrides or not positions else min(positions.values()) + 1
            cursor_floor[0] = floor
            return limits_at if floor is None else min(limits_at, floor)

        if limits_at <= first:
            w.ctx.metrics.retention_held(md.ledger_id, 0, 0)  # nothing beyond the limits
            return
        decided = await trimming.decide(w.ctx, md, wanted)
        self._report_held(marks, first, decided, limits_at, cursor_floor[0])
        if decided <= first:
            return
        old, new = await trimming.apply(w.ctx, md.ledger_id, decided, w.key)
        if w.md.version == old.version and new is not old:
            w.md = new  # else the writer's next CAS fails and re-reads it

    def _report_held(
        self,
        marks: list[retention_rules.Mark],
        first: int,
        decided: int,
        limits_at: int,
        floor: int | None,
    ) -> None:
        """Retention a cursor holds back: a gauge per stream, and a warning at most
        once an hour (a consumer that stopped keeps the stream growing)."""
        w = self._writer
        held_entries, held_bytes = retention_rules.held_back(
            marks, first, max(decided, first), limits_at
        )
        w.ctx.metrics.retention_held(w.md.ledger_id, held_entries, held_bytes)
        now = w.ctx.clock.monotonic()
        if held_entries and floor is not None and now - self._held_warned >= HELD_WARNING_EVERY:
            self._held_warned = now
            log.warning(
                "ledger %s: a cursor at %s holds back retention: %s entries (%s payload "
                "bytes) beyond the stream's limits are kept; commit that consumer's cursor "
                "or delete it (ul.delete_cursor) to let retention trim them",
                w.md.ledger_id,
                floor - 1,
                held_entries,
                held_bytes,
            )
