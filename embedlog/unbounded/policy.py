"""A stream term writer's add policy: the guaranteed-write-quorum model's rules.

What the add pipeline (embedlog/ledger/pipeline.py) does differently for one term of
an unbounded ledger than for a bounded ledger (embedlog/ledger/policy.py):

* an answer counts only if it carries this writer's term (the model's response term);
* an acknowledged entry stays tracked, bytes and all, until its whole write set has it:
  the LAFR (last add fully replicated) then passes it, and every add carries the LAFR;
* with ``gwq`` (a takeover's recovery writes) an entry completes only once its whole
  write set confirmed it;
* a replacement fragment starts above the LAFR, never replaces a bookie whose ack
  counted for an acknowledged entry it would move (pinned), avoids bookies that failed
  lately, and a takeover never picks a bookie the stored last fragment lists;
* a full fragment (by entries, or retention's size and age) rolls over before the next
  entry is sent.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable

from embedlog.errors import BKError, InvalidTermError, LedgerFencedError
from embedlog.ledger.pending import PendingAdd
from embedlog.ledger.policy import Hold
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.unbounded import retention as retention_rules
from embedlog.unbounded import rules
from embedlog.wire.messages import NO_TERM

# Acknowledged entries kept (with their bytes, to be resent) until their whole write set
# confirmed them; past this many, or this many bytes (a bookie that never answers and
# cannot be replaced), the oldest are dropped: the LAFR then waits until they lie below
# the last fragment, and a replacement fragment starts above them.
MAX_TRACKED = 10_000
MAX_TRACKED_BYTES = 64 * 1024 * 1024


class StreamPolicy:
    tracks_settled = True

    def __init__(
        self,
        *,
        term: int,
        lafr: int,
        gwq: bool,
        recovery: bool,
        segment: retention_rules.SegmentCounter,
        fragment_max_entries: int | None,
        listed_at_start: frozenset[str],
        suspect_seconds: float,
    ) -> None:
        self.term = term
        self.lafr = lafr
        self.lafr_published = lafr  # what the metadata already places (see rules)
        self.gwq = gwq
        self.recovery = recovery
        self.segment = segment
        self.fragment_max_entries = fragment_max_entries
        # A takeover keeps its replacements in memory until its end stores them
        # (takeover.open_term): until then the stored metadata lists these bookies for
        # the entries they acknowledged, even those the takeover replaced.
        self.listed_at_start = listed_at_start
        self.suspect_seconds = suspect_seconds
        self.replicating: deque[PendingAdd] = deque()  # acked, write set not yet complete
        self.replicating_bytes = 0
        self.lafr_hold = -1  # the highest entry dropped from tracking
        self.roll_at: int | None = None  # a new fragment starts here (under way)
        self.suspects: dict[str, float] = {}  # bookie -> when it last failed this writer

    # -- which acks count, and when an entry completes -------------------------------------

    def counts(self, term: int) -> bool:
        return self.term == NO_TERM or rules.response_counts(self.term, term)

    def needed_acks(self, md: LedgerMetadata) -> int:
        return md.write_quorum if self.gwq else md.ack_quorum

    def acked_settled(self, p: PendingAdd, md: LedgerMetadata, frozen: bool) -> None:
        self.advance_lafr(md, frozen)  # acks after the ack quorum move the LAFR

    def acknowledged(self, p: PendingAdd) -> None:
        if p.cost >= 0:
            # Retention counts what readers will see: appends once acknowledged (a no-op
            # or write-back costs nothing; an entry sent but never acknowledged may be cut
            # by the next takeover and must not count towards what is kept).
            self.segment.count(p.cost)
        if self.gwq:
            self.lafr = p.entry_id
        else:
            # Kept, bytes and all, until its whole write set has it (the model's pending
            # add op): a bookie that fails before confirming it is replaced from the LAFR
            # on, and the entry is resent to the replacement.
            self.replicating.append(p)
            self.replicating_bytes += len(p.framed)

    def progressed(self, md: LedgerMetadata, frozen: bool) -> None:
        self.advance_lafr(md, frozen)

    def advance_lafr(self, md: LedgerMetadata, frozen: bool) -> None:
        if frozen:
            # Frozen while a replacement is in flight, like the LAC: an ack counted now
            # may be from a bookie the new fragment no longer lists for the entry.
            return
        rep = self.replicating
        while rep and (len(rep) > MAX_TRACKED or self.replicating_bytes > MAX_TRACKED_BYTES):
            dropped = self._release(rep.popleft())
            self.lafr_hold = max(self.lafr_hold, dropped.entry_id)
        first, wq, hold = md.last_fragment[0], md.write_quorum, self.lafr_hold
        while rep and rules.lafr_passes(rep[0].entry_id, rep[0].acked, wq, first, hold):
            self.lafr = self._release(rep.popleft()).entry_id

    def _release(self, p: PendingAdd) -> PendingAdd:
        """``p`` is no longer tracked: nobody will need its bytes again."""
        self.replicating_bytes -= len(p.framed)
        p.framed = b""
        return p

    # -- replacing bookies (the model's ChangeEnsemble) ---------------------------------------

    def fragment_start(self, pending: deque[PendingAdd], next_entry_id: int) -> int:
        if self.term == NO_TERM:
            return pending[0].entry_id if pending else next_entry_id
        # LAFR + 1: every entry the failed bookie may not have confirmed moves to the new
        # fragment and is resent to its replacement. Entries dropped from tracking (no
        # bytes left to resend) stay where they are.
        return max(self.lafr, self.lafr_hold) + 1

    def unconfirmed(self, pending: deque[PendingAdd]) -> Iterable[PendingAdd]:
        return itertools.chain(self.replicating, pending)

    def pinned(self, idx: int, first: int) -> bool:
        # The model's BookiePinned: replacing a bookie whose ack counted for an entry
        # already acknowledged from ``first`` on would leave that entry with fewer than AQ
        # copies on the bookies the metadata lists for it. It is retried instead until
        # the entry reaches its whole write set (the LAFR passes it).
        return any(p.entry_id >= first and p.has_ack(idx) for p in self.replicating)

    def avoid(self, now: float) -> set[str]:
        # Bookies that failed this writer lately: new fragments and replacements avoid
        # them while others are available (each would cost a request timeout first).
        return {b for b, t in self.suspects.items() if now - t < self.suspect_seconds}

    def never_replacements(self) -> frozenset[str]:
        # A takeover never picks a bookie of the last fragment as it is stored, even one
        # it replaced itself: readying it (TRIM ABOVE) would drop the acknowledged
        # entries it holds for its stored slot, and a takeover that fails before storing
        # its ensemble leaves the metadata listing it for them (found by the simulator:
        # seed 3105 of ``unbounded-nojournal``).
        return self.listed_at_start

    def suspect(self, bookie: str, now: float) -> None:
        self.suspects[bookie] = now

    # -- sending -------------------------------------------------------------------------------

    def hold(self, p: PendingAdd, md: LedgerMetadata) -> Hold:
        if self.roll_at is not None and p.entry_id >= self.roll_at:
            return Hold.WAIT  # waits for the new fragment
        first = md.last_fragment[0]
        if rules.rollover_due(p.entry_id, first, self.fragment_max_entries) or (
            p.entry_id > first and self.segment.due()
        ):
            self.roll_at = p.entry_id
            return Hold.ROLL
        return Hold.SEND

    def lafr_for_adds(self) -> int:
        return rules.lafr_to_send(self.lafr, self.lafr_published, recovery=self.recovery)

    def error_for(self, error: BKError) -> BKError:
        # An unbounded ledger is IN_RECOVERY only while a higher term takes over.
        if isinstance(error, LedgerFencedError):
            return InvalidTermError(f"{error}; a client with a higher term took over")
        return error
