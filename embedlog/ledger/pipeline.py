"""A ledger writer's adds without I/O: pending adds, acks, in-order completion, replacements.

``AddPipeline`` takes events and leaves effects for its driver (the asyncio writer,
writer.py) to carry out, as etcd's raft core leaves a ``Ready``:

* events: an add queued (``queue``), the queue's turn to be sent (``send_queued``), a
  bookie's answer (``on_results``, ``on_all_ok``: one verdict for a whole batch), no
  answer (``no_answer``), a replacement chosen, committed or lost (``plan_replacement``,
  ``replaced``, ``replacement_lost``, ``replacement_aborted``), new members readied
  (``readied``), a retry's pause over (``retry_due``), a failure (``fail``);
* effects, in fields the driver drains after each event: ``outbox`` (adds per bookie
  for this loop turn, sent in batches), ``direct`` (single sends), ``done`` (adds to
  complete, in order, and the budget they free: ``freed``), ``failures`` (adds to fail,
  with the error), ``start_change`` (run an ensemble change), ``retries`` (bookies to
  retry after a pause), ``rollover`` (start a new fragment at this entry).

Entry e is acknowledged once the policy's needed acks (AQ; a stream's recovery writes:
WQ) of its write set hold it and every earlier entry was acknowledged. A bookie that
fails is replaced by a new fragment from the policy's first entry (policy.py);
nothing completes while a replacement is in flight (``Phase.REPLACING``): an ack
counted then may be from a bookie the new fragment no longer lists for the entry.
Which adds a bookie gets again is resending.py's rule; when a retry gives up, giving_up.py's.

Nothing here awaits, opens a socket, calls the metadata store or reads the time: events
that need the time carry ``now``.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

from embedlog.errors import BKError, TlsHandshakeError
from embedlog.ledger.answers import Refused, refusal_outcome
from embedlog.ledger.bookie_client import UNKNOWN_OUTCOMES
from embedlog.ledger.giving_up import gives_up
from embedlog.ledger.pending import PendingAdd
from embedlog.ledger.phase import TRANSITIONS, Phase, PhaseError, Replacement, Retry
from embedlog.ledger.policy import AddPolicy, Hold
from embedlog.ledger.resending import missing, take_back
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.metadata.striping import write_set
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import NO_TERM

log = logging.getLogger(__name__)


class AddPipeline:
    def __init__(
        self,
        md: LedgerMetadata,
        policy: AddPolicy,
        *,
        term: int = NO_TERM,
        lac: int = -1,
        max_outstanding: int = 1000,
        can_batch: Callable[[], bool] = lambda: True,
        quorum_timeout: float = 60.0,
        unsafe_ack_during_replacement: bool = False,
        unsafe_ack_from_replaced_bookie: bool = False,
    ) -> None:
        self.md = md
        self.policy = policy
        self.term = term
        self.lac = lac
        self.next_entry_id = lac + 1
        self.max_outstanding = max_outstanding
        self.can_batch = can_batch
        self.quorum_timeout = quorum_timeout
        self.unsafe_ack_during_replacement = unsafe_ack_during_replacement
        self.unsafe_ack_from_replaced_bookie = unsafe_ack_from_replaced_bookie
        self.pending: deque[PendingAdd] = deque()  # added, not yet acknowledged (in order)
        self.waiting: deque[PendingAdd] = deque()  # the tail of pending not yet sent
        self.in_flight = 0  # entries sent and not yet acknowledged
        self.error: BKError | None = None
        self.phase = Phase.OPEN
        self.failed: set[str] = set()  # bookies awaiting replacement
        self.retrying: set[str] = set()  # bookies with no replacement, retried after a pause
        # Members of the last fragment not readied for it and kept for want of a
        # replacement, each with the first id of the cut it still needs: no entry whose
        # write set holds one completes until it confirms that entry itself
        # (``held_back``). Empty for bounded ledgers.
        self.unprepared: dict[str, int] = {}
        self.tls_refused: dict[str, TlsHandshakeError] = {}  # last failure was TLS
        # The write set of entry e is write_sets[e % E] (round robin: striping.write_set),
        # and slot i stores the entries e with e % E in slot_residues[i].
        size = md.ensemble_size
        self.write_sets = [write_set(start, size, md.write_quorum) for start in range(size)]
        self.slot_residues = [
            frozenset(r for r in range(size) if i in self.write_sets[r]) for i in range(size)
        ]
        self.plain = not policy.tracks_settled
        # Effects, drained by the driver after each event.
        self.outbox: dict[tuple[str, int], list[PendingAdd]] = {}
        self.outbox_resends = False  # a resend joined the outbox since it was last taken
        self.direct: list[tuple[PendingAdd, int, str]] = []
        self.done: list[PendingAdd] = []
        # What the adds in ``done`` held of the caller's budget (admission.py): how many
        # the budget counts, and their payload bytes.
        self.freed = 0
        self.freed_bytes = 0
        self.failures: list[tuple[BKError, list[PendingAdd]]] = []
        self.start_change = False
        self.retries: list[str] = []
        self.rollover: int | None = None

    # -- phase -------------------------------------------------------------------------------

    def _move(self, event: str) -> None:
        nxt = TRANSITIONS.get((self.phase, event))
        if nxt is None:
            raise PhaseError(f"{event} in phase {self.phase.value}")
        self.phase = nxt

    def begin_change(self) -> None:
        """An ensemble change, a rollover or a takeover's cleanup starts: hold new sends."""
        self._move("begin_change")

    def end_change(self) -> None:
        self._move("end_change")

    @property
    def changing(self) -> bool:
        return self.phase is not Phase.OPEN

    # -- adding and sending -------------------------------------------------------------------

    def queue(self, p: PendingAdd) -> None:
        self.pending.append(p)
        self.waiting.append(p)

    def send_queued(self) -> None:
        """Send waiting entries, in order, while the window has room and no change of the
        ensemble is under way."""
        if self.phase is not Phase.OPEN or self.error is not None:
            return
        room = self.max_outstanding - self.in_flight
        waiting = self.waiting
        policy, md = self.policy, self.md
        run: list[PendingAdd] = []
        while room > 0 and waiting:
            hold = policy.hold(waiting[0], md)
            if hold is not Hold.SEND:
                if hold is Hold.ROLL:
                    self.rollover = waiting[0].entry_id
                break
            run.append(waiting.popleft())
            room -= 1
        if run:
            self._send_run(run)

    def _send_run(self, run: list[PendingAdd]) -> None:
        """Send entries never sent before, in order, each to its write set. They all lie in
        the last fragment (an ensemble change starts one at the first unacknowledged
        entry), so each bookie of it takes its share of the run in one step."""
        for p in run:
            p.sent = True
        self.in_flight += len(run)
        first, ensemble = self.md.fragments[-1]
        if run[0].entry_id < first or not self.can_batch():
            for p in run:
                self._send_write_set(p)
            return
        size = len(ensemble)
        outbox = self.outbox
        for idx, bookie in enumerate(ensemble):
            residues = self.slot_residues[idx]
            share = (
                run if len(residues) == size else [p for p in run if p.entry_id % size in residues]
            )
            if share:
                out = outbox.get((bookie, idx))
                if out is None:
                    outbox[(bookie, idx)] = share if share is not run else list(run)
                else:
                    out.extend(share)

    def _send_write_set(self, p: PendingAdd) -> None:
        """Send ``p`` to the bookies of its write set that have not acknowledged it."""
        ensemble = self.md.ensemble_for(p.entry_id)
        for idx in self.write_set(p.entry_id):
            if not p.has_ack(idx):
                self.send(p, idx, ensemble[idx])

    def write_set(self, entry_id: int) -> list[int]:
        """Ensemble slots that store ``entry_id`` (``striping.write_set``, precomputed)."""
        return self.write_sets[entry_id % self.md.ensemble_size]

    def send(self, p: PendingAdd, idx: int, bookie: str) -> None:
        """Send ``p`` to ``bookie`` (slot ``idx``): adds for one bookie in the same loop
        turn travel in one ADD_BATCH request (the outbox)."""
        if self.can_batch():
            self.outbox.setdefault((bookie, idx), []).append(p)
            self.outbox_resends = True
        elif p.framed:  # not an entry that released its bytes (a stream's tracked entry)
            self.direct.append((p, idx, bookie))

    # -- answers -------------------------------------------------------------------------------

    def on_all_ok(self, run: list[PendingAdd], idx: int, bookie: str, term: int) -> None:
        """``bookie`` (slot ``idx``) answered EOK of ``term`` for every entry of ``run``: the
        common answer, counted without a verdict per entry (``on_results`` says why)."""
        if self.policy.counts(term):
            first, ensemble = self.md.fragments[-1]
            # A run is in entry order unless resends joined it: its lowest id is asked.
            lowest = min([p.entry_id for p in run])
            if lowest >= first and ensemble[idx] == bookie and self.plain:
                bit = 1 << idx  # PendingAdd.ack and _acked, inlined: this is per entry
                for p in run:
                    if not (p.acks & bit or p.settled):
                        p.acks |= bit
                        p.acked += 1
            else:
                ok = StatusCode.EOK  # (no refusal among them: the time is not needed)
                self.on_results(run, idx, bookie, [(ok, term)] * len(run), 0.0)
                return
        self.complete()

    def on_results(
        self,
        run: list[PendingAdd],
        idx: int,
        bookie: str,
        results: list[tuple[int, int]],
        now: float,
    ) -> None:
        """``bookie``'s (status, term) for each entry of ``run`` it was sent as slot ``idx``."""
        md = self.md
        # An ack from a bookie that was replaced meanwhile counts for nothing. Most answers
        # are about the last fragment: whether the bookie still holds the slot there is
        # asked once, not per entry.
        last_first, last_ensemble = md.fragments[-1]
        holds_last = last_ensemble[idx] == bookie
        counted_term, counts = NO_TERM - 1, False
        for p, (status, term) in zip(run, results, strict=True):
            if status != StatusCode.EOK:
                self._on_refusal(p, bookie, status, term, now)
                if self.error is not None:
                    return
                continue
            if term != counted_term:
                counted_term, counts = term, self.policy.counts(term)
            eid = p.entry_id
            if counts and (
                holds_last if eid >= last_first else md.ensemble_for(eid)[idx] == bookie
            ):
                self._acked(p, idx)
        self.complete()

    def _acked(self, p: PendingAdd, idx: int) -> None:
        if not p.settled:
            p.ack(idx)
        elif not self.plain:
            # Acks after the ack quorum move a stream's LAFR.
            p.ack(idx)
            self.policy.acked_settled(p, self.md, self._frozen())

    def _on_refusal(self, p: PendingAdd, bookie: str, status: int, term: int, now: float) -> None:
        outcome = refusal_outcome(
            status,
            term,
            # A stream still needs a settled entry on its whole write set (its LAFR, which
            # each rollover waits for): a bookie that refuses it is replaced as for any
            # other entry, or the next rollover waits for ever (simulator seed 6 of
            # ``unbounded-streams``: an EIO for acknowledged entry 0 hung the writer).
            settled=p.settled and self.plain,
            ledger_id=self.md.ledger_id,
            bookie=bookie,
            writer_term=self.term,
        )
        if outcome is Refused.REPLACE:
            log.info("add %s:%s refused by %s: %s", self.md.ledger_id, p.entry_id, bookie, status)
            self.bookie_failed(bookie, now)
        elif outcome is not Refused.IGNORE:
            self.fail(outcome)

    def no_answer(self, exc: BaseException, p: PendingAdd, bookie: str, now: float) -> None:
        """No answer from ``bookie`` to ``p`` (or to a batch ``p`` opens)."""
        if isinstance(exc, TlsHandshakeError):
            self.tls_refused[bookie] = exc
        else:
            self.tls_refused.pop(bookie, None)
        if isinstance(exc, UNKNOWN_OUTCOMES):
            log.debug("add %s:%s to %s: %s", self.md.ledger_id, p.entry_id, bookie, exc)
        else:
            log.error("add %s:%s to %s failed: %r", self.md.ledger_id, p.entry_id, bookie, exc)
        self.bookie_failed(bookie, now)

    def bookie_failed(self, bookie: str, now: float) -> None:
        self.policy.suspect(bookie, now)
        if self.error is not None or bookie in self.retrying:
            return
        if bookie not in self.md.last_fragment[1]:
            return  # already replaced; its entries were resent to the replacement
        self.failed.add(bookie)
        if self.phase is Phase.OPEN:
            self.begin_change()
            self.start_change = True

    # -- completion ---------------------------------------------------------------------------

    def _frozen(self) -> bool:
        return self.phase is Phase.REPLACING and not self.unsafe_ack_during_replacement

    def complete(self) -> None:
        """Acknowledge, in order, every entry at the head that has enough acks (into
        ``done``).

        Nothing completes while a replacement is in flight (from the choice of the new
        fragment's first entry until the replaced bookies' acks are taken back): an ack
        counted then may come from a bookie the new fragment no longer lists for the entry,
        which would be acknowledged with fewer than AQ copies on the bookies the metadata
        names for it. BookKeeper delays acknowledgements the same way.
        """
        if self.phase is Phase.REPLACING and not self.unsafe_ack_during_replacement:
            return
        pending = self.pending
        need = self.policy.needed_acks(self.md)
        unprepared = self.unprepared
        if unprepared:
            # Only members of the last fragment hold entries back (every entry below it
            # reached its whole write set before the fragment began); a candidate that was
            # never listed, or a member replaced since, must not keep this check running.
            members = self.md.last_fragment[1]
            for gone in [b for b in unprepared if b not in members]:
                del unprepared[gone]
        done = self.done
        acknowledged = None if self.plain else self.policy.acknowledged
        freed = freed_bytes = 0
        while pending and pending[0].acked >= need:
            if unprepared and self.held_back(pending[0]):
                break
            p = pending.popleft()
            self.in_flight -= 1
            self.lac = p.entry_id
            if acknowledged is not None:
                acknowledged(p)
            p.settled = True
            if p.cost >= 0:
                freed += 1
                freed_bytes += p.cost
            done.append(p)
        if freed:
            self.freed += freed
            self.freed_bytes += freed_bytes

    def progressed(self) -> None:
        """The driver completed ``done``: what follows a completion (a stream's LAFR)."""
        if not self.plain:
            self.policy.progressed(self.md, self._frozen())

    def held_back(self, p: PendingAdd) -> bool:
        """Whether ``p`` waits for a member of its write set that was not readied for its
        fragment and has not confirmed it: that member may hold an older term's entry at
        the id, which readers asking it first would get."""
        ensemble = self.md.ensemble_for(p.entry_id)
        return any(
            ensemble[i] in self.unprepared and not p.has_ack(i) for i in self.write_set(p.entry_id)
        )

    def fail(self, error: BKError) -> None:
        """Fail every outstanding and future add with ``error``."""
        error = self.policy.error_for(error)
        if self.error is None:
            self.error = error
        failed = list(self.pending)
        self.pending.clear()
        for p in failed:
            p.settled = True
        self.waiting.clear()
        self.in_flight = 0
        self.failures.append((error, failed))

    # -- replacing bookies ---------------------------------------------------------------------

    def plan_replacement(self) -> Replacement | None:
        """The failed bookies' replacement: the bookies and the new fragment's first entry
        (or None: each was pinned, and is retried instead). Nothing completes from now on
        until ``replaced``, ``replacement_lost`` or ``replacement_aborted``."""
        md = self.md
        ensemble = md.last_fragment[1]
        failed = {b for b in self.failed if b in ensemble}
        # The rest already left the ensemble; keeping them would spin the driver's loop
        # for ever without awaiting.
        self.failed.clear()
        first = max(
            self.policy.fragment_start(self.pending, self.next_entry_id), md.last_fragment[0]
        )
        pinned = {b for b in failed if self.policy.pinned(ensemble.index(b), first)}
        for b in sorted(pinned):
            self.retry_later(b)
        failed -= pinned
        if not failed:
            return None
        self._move("replace")
        return Replacement(md, tuple(ensemble), frozenset(failed), first)

    def avoid(self, now: float) -> set[str]:
        """Bookies new fragments and replacements avoid: those retried after a pause, and
        those the policy suspects."""
        return self.retrying | self.policy.avoid(now)

    def exclusions(self, plan: Replacement, now: float) -> set[str]:
        """Bookies never to pick as ``plan``'s replacements (beyond its ensemble)."""
        return set(plan.failed) | self.avoid(now) | self.policy.never_replacements()

    def replaced(
        self,
        plan: Replacement,
        new_md: LedgerMetadata | None,
        replaced: dict[int, str],
        ready: set[str],
    ) -> None:
        """``plan`` ended with ``replaced`` slots (their new bookies, of which ``ready``
        were readied) in ``new_md`` (committed, or kept in memory by a recovery); None: no
        replacement was found. Bookies left without one are retried after a pause."""
        self._move("replaced")
        first = plan.first
        if new_md is not None:
            self.md = new_md
            # The replaced bookies' acks of entries from ``first`` on count no more (their
            # slots now belong to the replacements), also those that arrived during the
            # compare-and-swap: nothing completed meanwhile (see complete).
            for p, idx, bookie in take_back(
                self.policy.unconfirmed(self.pending),
                first,
                replaced,
                ready,
                self.write_set,
                keep_acks=self.unsafe_ack_from_replaced_bookie,
            ):
                self.send(p, idx, bookie)
        old = plan.ensemble
        # In name order, not a set's (which follows the process's string hashing): the
        # retries' timers, and so a simulated history, must not depend on it.
        for b in sorted(plan.failed - set(replaced.values()) - {old[i] for i in replaced}):
            self.retry_later(b)

    def replacement_lost(self, plan: Replacement, fresh: LedgerMetadata) -> None:
        """Another client's change of the metadata came first: try again against it."""
        self._move("replaced")
        self.md = fresh
        self.failed |= plan.failed

    def replacement_aborted(self) -> None:
        """The replacement raised (the driver fails the writer): its outcome is unknown."""
        self._move("replaced")

    def resumed(self) -> None:
        """A replacement ended: count what was held back meanwhile."""
        self.complete()
        self.policy.progressed(self.md, self._frozen())

    def readied(self, ready: set[str], not_ready: set[str], first: int, now: float) -> None:
        """New members of a fragment from ``first`` were readied (or not, and kept: until
        readied, each holds back the entries of its write sets it has not confirmed)."""
        for b in sorted(not_ready):
            self.policy.suspect(b, now)
        for b in ready:
            self.unprepared.pop(b, None)
        for b in sorted(not_ready):
            self.unprepared[b] = first
        if ready:
            self.complete()

    # -- retrying bookies with no replacement --------------------------------------------------

    def retry_later(self, bookie: str) -> None:
        """No replacement for ``bookie``: resend its missing entries after a pause."""
        if bookie in self.retrying:
            return
        self.retrying.add(bookie)
        self.retries.append(bookie)

    def retry_due(self, bookie: str, now: float) -> Retry | None:
        """The pause of a retried bookie is over: fail (no ack quorum in time), resend its
        missing entries, or (a Retry) ready it first."""
        self.retrying.discard(bookie)
        if self.error is not None:
            return None
        oldest = self.pending[0] if self.pending else None
        if oldest is not None:
            md, need = self.md, self.policy.needed_acks(self.md)
            error = gives_up(
                oldest,
                md.ledger_id,
                md.ensemble_for(oldest.entry_id),
                self.write_set(oldest.entry_id),
                need,
                self.tls_refused,
                held_back=bool(self.unprepared) and self.held_back(oldest),
                now=now,
                quorum_timeout=self.quorum_timeout,
            )
            if error is not None:
                self.fail(error)
                return None
        first, ensemble = self.md.last_fragment
        if bookie not in ensemble:
            return None
        if bookie in self.unprepared:
            # The cut it missed, not this fragment's start: below that cut it may already
            # hold entries this term wrote back (the end of a takeover readies bookies
            # above its no-op), which are older terms' by their payload.
            return Retry(bookie, self.unprepared[bookie], first, tuple(ensemble))
        self._resend_to(bookie, first, ensemble)
        return None

    def retry_readied(self, retry: Retry, ready: set[str]) -> None:
        """``retry``'s bookie was readied (in ``ready``), or still not."""
        if retry.bookie not in ready:
            self.retry_later(retry.bookie)  # still not readied: its entries wait
            return
        self._resend_to(retry.bookie, retry.first, retry.ensemble)

    def _resend_to(self, bookie: str, first: int, ensemble: tuple[str, ...]) -> None:
        idx = ensemble.index(bookie)
        for p in missing(self.policy.unconfirmed(self.pending), idx, first, self.write_set):
            self.send(p, idx, bookie)
