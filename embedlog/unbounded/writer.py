"""Adds of one term of an unbounded ledger.

``TermWriter`` is the ledger writer (pipelining, in-order acks, ensemble change by
CAS) with the stream's add policy (policy.py: which acks count, the LAFR, where a
replacement fragment starts, who is pinned), plus the I/O the unbounded protocol adds:

* every add carries the writer's term and its LAFR (last add fully replicated: every
  bookie of the write set of it and of every entry before it confirmed);
* answers of another term are discarded; an InvalidTerm answer, or finding the ledger
  IN_RECOVERY/under another term on an ensemble change, fails every add with
  ``InvalidTermError``: another client took over;
* ``fragment_max_entries``: when the current fragment is full, the writer waits until
  every entry of it is acknowledged, then starts a new fragment on a fresh ensemble
  from the placement policy (by CAS), and only then sends the next entry.

With ``guaranteed_write_quorum`` (the recovery writes of a takeover) an entry completes
only when its whole write set confirmed it; a bookie that does not answer is replaced
(in memory: the metadata learns the new fragments with the takeover's closing CAS) or
retried, and the writer fails loudly after ``add_entry_quorum_timeout``.
"""

from __future__ import annotations

import asyncio
import logging

from embedlog.bookie.truncation import trim_above_body
from embedlog.errors import (
    BKError,
    InvalidTermError,
    LedgerDeletedError,
    MetadataVersionError,
    NotEnoughBookiesError,
    UnauthorizedAccessError,
)
from embedlog.ledger.bookie_client import UNKNOWN_OUTCOMES
from embedlog.ledger.context import ClientContext
from embedlog.ledger.pending import Completion
from embedlog.ledger.writer import LedgerWriter
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.metadata.striping import write_set_bookies
from embedlog.unbounded import follow, layout, rules
from embedlog.unbounded import retention as retention_rules
from embedlog.unbounded.policy import StreamPolicy
from embedlog.unbounded.retaining import StreamRetention
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import FLAG_TERM, TERM
from embedlog.wire.messages import NO_TERM, OpCode, TrimFlags

log = logging.getLogger(__name__)

# How long a bookie that failed this writer is left out of new fragments and replacements
# (when enough others are available).
SUSPECT_SECONDS = 10.0


class TermWriter(LedgerWriter):
    def __init__(
        self,
        ctx: ClientContext,
        md: LedgerMetadata,
        password: bytes,
        *,
        term: int,
        lac: int,
        lafr: int | None = None,
        fragment_max_entries: int | None = None,
        recovery: bool = False,
        fixed_lac: int | None = None,
        guaranteed_write_quorum: bool = False,
    ) -> None:
        # Retention (retention.py): limits from the metadata, counted since the last mark.
        limits = layout.retention(md)
        # A takeover's recovery writes never roll over: they go to the last fragment as it
        # was (its bookies replaced in memory at most), and a new fragment's TRIM ABOVE
        # would drop the older term's acknowledged entries the takeover is still writing
        # back (simulator, ``unbounded-streams``: retention's derived fragment size made
        # recovery writers roll over).
        rollover = (
            retention_rules.Rollover()
            if recovery
            else retention_rules.rollover_for(limits, fragment_max_entries)
        )
        self.stream = StreamPolicy(
            term=term,
            lafr=lac if lafr is None else lafr,
            gwq=guaranteed_write_quorum,
            recovery=recovery,
            segment=self._open_stretch(ctx, md, rollover, lac, recovery),
            fragment_max_entries=rollover.entries,
            # A takeover keeps its replacements in memory until its end stores them
            # (takeover.open_term): until then the stored metadata lists these bookies.
            listed_at_start=frozenset(md.last_fragment[1]) if recovery else frozenset(),
            suspect_seconds=SUSPECT_SECONDS,
        )
        super().__init__(
            ctx,
            md,
            password,
            lac=lac,
            recovery=recovery,
            fixed_lac=fixed_lac,
            term=term,
            policy=self.stream,
        )
        self.gwq = guaranteed_write_quorum
        self._progress = asyncio.Event()
        self.rollovers = 0
        # Prompt LAC (see _prompt_lac): the LAC the last queued entry carries, and whether a
        # round of explicit LAC writes is on the wire.
        self._lac_queued = -1
        self._prompt_due = False
        self._lac_busy: set[str] = set()  # bookies with an explicit LAC write on the wire
        self._lac_told: dict[str, int] = {}  # the LAC last written to each bookie that way
        self.retaining = StreamRetention(self, limits, self.stream.segment)
        if self._segment.inherited and self.retaining.reads_inherited():
            # The takeover's part of the open stretch: counted from the entries, so that
            # max_entries and max_bytes see what readers see whoever wrote it, and dated
            # by their records, so that max_age measures it from its newest entry.
            self.retaining.counting = self._spawn(self.retaining.count_inherited())
        if rollover.age is not None and not recovery:
            self._spawn(self._age_ticks(rollover.age))

    # The policy's state that callers and tests read.

    @property
    def lafr(self) -> int:
        return self.stream.lafr

    @property
    def fragment_max_entries(self) -> int | None:
        return self.stream.fragment_max_entries

    @property
    def _segment(self) -> retention_rules.SegmentCounter:
        return self.stream.segment

    @property
    def retention(self) -> retention_rules.Retention | None:
        """The stream's retention limits (None: it keeps everything)."""
        return self.retaining.limits

    async def apply_retention(self) -> None:
        """Trim the whole fragments beyond the stream's retention limits (retaining.py)."""
        await self.retaining.apply()

    def add_to(
        self,
        future: Completion,
        payload: bytes,
        *,
        entry_flags: int = 0,
        add_flags: int = 0,
        cost: int = -1,
    ) -> None:
        # Each entry carries the term that made it (wire/entry.py FLAG_TERM): a later
        # takeover tells an older term's leftover from this term's entries by it.
        if self.term != NO_TERM:
            payload = TERM.pack(self.term) + payload
            entry_flags |= FLAG_TERM
        self._lac_queued = self.lac
        super().add_to(future, payload, entry_flags=entry_flags, add_flags=add_flags, cost=cost)

    # -- completion --------------------------------------------------------------------------

    @property
    def progress(self) -> asyncio.Event:
        """Set whenever the LAC moves or the writer fails (its own tail waits on it)."""
        return self._progress

    def _progressed(self) -> None:
        self._progress.set()
        if not self._prompt_due and not self.recovery and self.ctx.explicit_lac_interval > 0:
            # At the end of this loop iteration: an append queued meanwhile carries the LAC.
            self._prompt_due = True
            asyncio.get_running_loop().call_soon(self._prompt_lac)

    def _failed_out(self) -> None:
        self._progress.set()

    # -- prompt LAC --------------------------------------------------------------------------

    def _prompt_lac(self) -> None:
        """Tell the last fragment's bookies a LAC that no entry on the wire carries.

        An entry carries the LAC of when it was queued, so the last acknowledged entry
        becomes visible to followers only with the next entry. Unless an entry sent since
        carries it, the new LAC goes out at once as an explicit LAC write (as DistributedLog's
        writer flushes a control record when its queue empties); the bookies answer the
        followers' long polls with it. At most one such write per bookie is on the wire: a
        LAC that moves meanwhile goes with the next, so under load this costs one request
        per bookie per round trip, and a bookie that does not answer holds up only itself.
        """
        self._prompt_due = False
        lac = self.lac
        if self.error is not None or (self._lac_queued >= lac and not self.pl.waiting):
            return  # failed, or an entry on the wire carries the LAC
        for bookie in self.md.last_fragment[1]:
            if bookie in self._lac_busy or self._lac_told.get(bookie, -1) >= lac:
                continue
            self._lac_busy.add(bookie)
            self._lac_told[bookie] = lac
            self._spawn(self._prompt_one(bookie, lac))
        self.explicit_lac.sent = max(self.explicit_lac.sent, lac)  # the idle timer's too

    async def _prompt_one(self, bookie: str, lac: int) -> None:
        try:
            await self.explicit_lac.send(bookie, lac)
        finally:
            self._lac_busy.discard(bookie)
        if self.lac > lac and not self._prompt_due:
            self._prompt_lac()

    # -- ensemble change (the guaranteed-write-quorum model's ChangeEnsemble) ---------------

    async def prepare_bookies(self, bookies: set[str], first: int) -> set[str]:
        """Before a new fragment's first entry, each new member drops whatever it holds of
        this ledger at or above ``first`` (once per term, TrimFlags.ABOVE).

        A bookie that missed a takeover's truncate no-op (it was not in the last fragment,
        or was replaced during the recovery) may still hold an older term's entries at ids
        this term writes again; if one of this term's adds to it then failed while the
        entry still reached its ack quorum, readers asking it first would read the old
        payload. Bookies that applied this term's no-op (or an earlier cleanup) ignore it.
        """
        if self.term == NO_TERM or not bookies:
            return set(bookies)
        lid = self.md.ledger_id

        async def one(bookie: str) -> str | None:
            try:
                resp = await self.ctx.bookies.call(
                    bookie,
                    OpCode.TRIM,
                    lid,
                    first - 1,
                    flags=TrimFlags.ABOVE,
                    term=self.term,
                    master_key=self.key,
                    body=trim_above_body(self.digester.digest_len),
                )
            except UNKNOWN_OUTCOMES:
                return None
            if resp.status == StatusCode.EINVALIDTERM:
                raise InvalidTermError(
                    f"ledger {lid}: {bookie} has term {resp.term} above {self.term}"
                )
            if resp.status == StatusCode.EUA:
                raise UnauthorizedAccessError(f"ledger {lid}: wrong password ({bookie})")
            return bookie if resp.status == StatusCode.EOK else None

        answers = await asyncio.gather(*(one(b) for b in sorted(bookies)))
        ready = {b for b in answers if b is not None}
        # Until readied (again), a member kept in the fragment holds back the entries of
        # its write sets that it has not confirmed itself (AddPipeline.held_back).
        self.pl.readied(ready, bookies - ready, first, self.ctx.clock.monotonic())
        self._carry_out()
        return ready

    async def clear_last_fragment(self, noop_id: int) -> None:
        """End of a takeover: every bookie of the last fragment drops what older terms
        left above ``noop_id`` before this term acknowledges anything.

        The no-op's truncate reaches only its write set; with E > WQ the other bookies of
        the fragment may hold an older term's unacknowledged entries at ids this term
        writes next, and one failed add would leave two payloads in a write set. They get
        the same cut by TrimFlags.ABOVE (once per term). A bookie that cannot be reached
        is replaced (in memory, as every change of the recovery) from ``noop_id + 1``;
        without a replacement the takeover fails after ``add_entry_quorum_timeout``.
        """
        clock = self.ctx.clock
        deadline = clock.monotonic() + self.ctx.add_entry_quorum_timeout
        while True:
            first, ensemble = self.md.last_fragment
            cut = set(ensemble)
            if first <= noop_id:  # the no-op's write set applied the truncate itself
                cut -= set(write_set_bookies(noop_id, ensemble, self.md.write_quorum))
            ready = await self.prepare_bookies(cut, noop_id + 1)
            missing = cut - ready
            if not missing or self.error is not None:
                return
            if clock.monotonic() > deadline:
                self.fail(
                    NotEnoughBookiesError(
                        f"{sorted(missing)} did not drop the older terms' entries above "
                        f"{noop_id} and cannot be replaced"
                    )
                )
                return
            self.pl.failed |= missing
            # One replacement at a time: a change started by a late answer would build on
            # the same metadata, and the later of the two would undo the other.
            while self._changing is not None:
                await asyncio.wait({self._changing})
            self._changing = asyncio.current_task()  # type: ignore[assignment]
            self.pl.begin_change()
            try:
                await self._replace_failed()
            finally:
                self._changing = None
                self.pl.end_change()
            if set(self.md.last_fragment[1]) & missing:
                await asyncio.sleep(min(self.ctx.bookies.request_timeout, 0.5))

    # -- fragment rollover -------------------------------------------------------------------

    @staticmethod
    def _open_stretch(
        ctx: ClientContext,
        md: LedgerMetadata,
        rollover: retention_rules.Rollover,
        lac: int,
        recovery: bool,
    ) -> retention_rules.SegmentCounter:
        """The counter of the stretch since the last mark: after a takeover it holds the
        earlier terms' entries up to ``lac`` (the no-op), begun when the last stretch was
        sealed (or when the stream was created)."""
        marks = layout.marks(md)
        begins = marks[-1][0] if marks else layout.first_entry(md)
        if recovery or lac < begins:
            return retention_rules.SegmentCounter(rollover, clock=ctx.clock)
        started = marks[-1][2] if marks else (md.ctime or ctx.clock.time())
        return retention_rules.SegmentCounter(
            rollover, started=started, inherited=True, clock=ctx.clock
        )

    def _start_rollover(self, at: int) -> None:
        self._spawn(self._rollover(at))

    async def _age_ticks(self, age: float) -> None:
        """A quiet stream rolls over by age too (so its entries can age out), and its
        retention is applied as time passes."""
        while self.error is None:
            await asyncio.sleep(min(max(age / 4, 0.05), 5.0))
            idle = self.stream.roll_at is None and self._changing is None and not self.pl.waiting
            if idle and self._segment.due() and self.next_entry_id > self.md.last_fragment[0]:
                # Marked as under way, as a rollover an append asks for is: the appends
                # that come meanwhile wait for the new fragment instead of asking for it
                # again (simulator seed 5086 of ``unbounded-streams``).
                self.stream.roll_at = self.next_entry_id
                self._start_rollover(self.next_entry_id)
            elif idle and self.retention is not None:
                await self.retaining.retain()

    async def _rollover(self, at: int) -> None:
        cancelled = False
        try:
            # Every entry of the full fragment must be on its whole write set first (the
            # LAFR passes it), not only acknowledged: after the switch nobody would replace
            # a failing bookie of the old fragment, and a member that never got an entry
            # may hold an older term's leftover at its id, which readers asking it first
            # would get (simulator seed 247 of ``unbounded``: a member whose TRIM ABOVE
            # failed). A bookie that fails meanwhile is replaced from the LAFR on.
            replicating = self.stream.replicating
            while self.error is None and (
                self._changing is not None
                or (self.pending and self.pending[0].entry_id < at)
                or (replicating and replicating[0].entry_id < at)
            ):
                self._progress.clear()
                try:  # completions and failures set it; an ensemble change ending does not
                    await asyncio.wait_for(self._progress.wait(), 0.05)
                except TimeoutError:
                    pass
            if self.error is not None:
                return
            if at <= self.md.last_fragment[0]:
                # Another rollover started the fragment here, and entries of it may be in
                # flight with acks counted by slot: a fresh ensemble over them would let
                # an entry complete on acks of bookies that no longer store it.
                return
            self._changing = asyncio.current_task()  # type: ignore[assignment]
            self.pl.begin_change()
            await self._start_fragment(at)
        except BKError as exc:
            self.fail(exc)
        except Exception as exc:  # a bug must not leave appends hanging
            log.exception("ledger %s: fragment rollover failed", self.md.ledger_id)
            self.fail(NotEnoughBookiesError(f"fragment rollover failed: {exc}"))
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            if self._changing is asyncio.current_task():
                self._changing = None
                self.pl.end_change()
            self.stream.roll_at = None
            # Cancelled: the writer is being stopped; start nothing more (sending the
            # queue again would start this rollover anew, for ever).
            if not cancelled:
                if self.pl.failed and self._changing is None and self.error is None:
                    self.pl.begin_change()
                    loop = asyncio.get_running_loop()
                    self._changing = loop.create_task(self._change_ensemble())
                self._send_queued()

    async def _start_fragment(self, at: int) -> None:
        md = self.md
        while True:
            available = await self.ctx.writable_bookies()
            avoid = self.pl.avoid(self.ctx.clock.monotonic())
            healthy = {b: info for b, info in available.items() if b not in avoid}
            if len(healthy) >= md.ensemble_size:
                available = healthy
            ensemble = fresh_ensemble(self.ctx, md, available)
            nxt = md.with_ensemble(at, tuple(ensemble))
            nxt = await self.retaining.with_sealed_stretch(md, nxt, at)
            try:
                self.md = await self.ctx.meta(self.ctx.metadata.write_ledger, nxt)
            except MetadataVersionError:
                md = await follow.current_metadata(self.ctx, md.ledger_id)
                check_still_ours(md, self.term)
                self.md = md
                continue
            self.rollovers += 1
            self._segment.seal(at)
            if self.retention is not None:
                self._spawn(self.retaining.retain())
            log.debug("ledger %s: new fragment at %s on %s", md.ledger_id, at, ensemble)
            ready = await self.prepare_bookies(set(ensemble), at)
            # Not ready: replaced by an ensemble change before the fragment's first entry.
            self.pl.failed |= set(ensemble) - ready
            return


def fresh_ensemble(
    ctx: ClientContext, md: LedgerMetadata, available: dict[str, dict[str, object]]
) -> list[str]:
    """The next fragment's ensemble, from the placement policy, leaving out as many of the
    full fragment's bookies as the cluster allows (all of them with 2E writable bookies,
    at least one with E + 1)."""
    current = [b for b in md.last_fragment[1] if b in available]
    n = max(0, min(len(current), len(available) - md.ensemble_size))
    leave_out = set(ctx.rng.sample(current, n))
    return ctx.placement.new_ensemble(md.ensemble_size, md.write_quorum, available, leave_out)


def check_still_ours(md: LedgerMetadata, term: int) -> None:
    """After a lost CAS: raise InvalidTermError unless the ledger is still OPEN in ``term``."""
    if rules.deleted_by_term(md.term):
        raise LedgerDeletedError(
            f"stream (ledger) {md.ledger_id} is being deleted; create it again to go on"
        )
    if md.term != term or md.state is not LedgerState.OPEN:
        raise InvalidTermError(
            f"ledger {md.ledger_id}: term {md.term} ({md.state.value}) took over from {term}"
        )
