"""The simulation's disk faults: full disks, failing fsyncs and wiped disks, drawn from
the seed (the disks themselves are embedlog/testing/simdisk.py).

* Full disks and failing fsyncs come at their own pace, on any bookie's disk: a disk
  stays full for a while (appends and fsyncs fail with ENOSPC), or its next fsync
  fails with EIO. The bookies meet them as real ones would: a journal write that fails
  makes the bookie read-only until it restarts; a failed flush keeps the write cache,
  makes the bookie read-only and retries (flushing.py).
* A wipe replaces the disks of a bookie that just went down (crash or stop) with empty
  ones; it comes back after the operator's BP-46 cookie fix (``fix_cookies``), so its
  boot is suspicious: every ledger the metadata gives it is fenced and put in limbo
  before it serves, then repaired from its peers (the oracle's rule for what it
  acknowledged before: simlosses.py). A wiped bookie lost entries it
  acknowledged, like a bookie that crashed without the journal: both count against the
  same budget (``Scenario.lossy_bookies``, AQ - 1), so that every acknowledged entry
  keeps a copy somewhere and liveness is still checked. Without the journal, a full
  or failing disk can cost acknowledged entries too (a clean stop whose final flush
  fails loses the write cache): there, only a bookie within that budget gets them.

Scenarios with ``rot`` (the ``*-corrupt`` ones) also flip bits in the entry logs and
journal of a bookie that crashed without the journal, while it is down, and in the entry
logs of a serving bookie, which crashes a moment later (simrot.py).

Once the history heals, every fault ends: full disks have room again, armed fsync
failures are disarmed, and a bookie left read-only by its disk is restarted (the
operator's fix). A boot that a fault made fail is no violation: the bookie stays down
until the next restart.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable, Mapping

from embedlog.errors import BKError
from embedlog.metadata.ledger_metadata import LedgerState
from embedlog.testing.simcontext import ClusterControl, SimContext
from embedlog.testing.simdisk import MemoryDisk
from embedlog.testing.simloop import seeded
from embedlog.testing.simlosses import DiskEvent, LossRecord
from embedlog.testing.simrot import (
    ENTRY_LOG_SUFFIX,
    LIVE_ROT_DOWN,
    LIVE_ROT_GAPS,
    LIVE_ROT_SERVES,
    apply_flips,
    draw_flips,
    rot_targets,
)

# The oracle's ``forget_lost``: a bookie booted after losing data; which ledgers its
# boot protected. Returns the ledgers whose acks it forgot.
ForgetLost = Callable[[str, Callable[[int], bool]], list[int]]


class DiskNemesis:
    def __init__(
        self,
        ctx: SimContext,
        cluster: ClusterControl,
        rng: random.Random,
        disks: Mapping[str, MemoryDisk],
        forget_lost: ForgetLost,
    ) -> None:
        self.ctx = ctx
        self.cluster = cluster
        self.disks = disks  # each bookie's, for the whole history (filled as they boot)
        self._forget_lost = forget_lost
        self.rng = rng
        # Per seed: how often the disks fail (None: never), and how likely a bookie that
        # goes down gets wiped disks.
        self.mean_gap: float | None = rng.choice((None, 0.3, 1.0, 3.0))
        self.wipe_probability = rng.choice((0.0, 0.1, 0.3))
        self._wiped: set[str] = set()  # wiped, and not booted with a cookie fix yet
        # Per bookie, the ledgers its booting incarnation owes entries of by the metadata
        # as its boot began (boot_begins).
        self._owed: dict[str, frozenset[int]] = {}
        # What the history did to each bookie that may have cost it acknowledged entries,
        # and which boot answers for it (simlosses.py).
        self.losses = LossRecord(journal=ctx.budget.journal)
        # Corruption at rest (simrot.py): how likely a crashed bookie's files rot while it
        # is down, drawn per seed from a stream of its own (the other draws stay as they
        # were in scenarios without it).
        rot = ctx.scenario.rot
        self.rot_probability = seeded(ctx.seed, "disk-rot").choice(rot) if rot else 0.0
        # Bookies taken down so far, suppressed steps included: each rot draws from a
        # stream of its own, so leaving a crash out changes no later rot.
        self._downs = 0
        # Rot under a serving bookie (simrot.py, "while it serves"): the mean gap between
        # two, drawn per seed from a stream of its own (None: none); each one's victim and
        # bits from a stream of their own, so that leaving one out (shrinking) or finding
        # no victim changes no later one.
        self._live_rng = seeded(ctx.seed, "disk-rot-live")
        self.live_rot_gap: float | None = self._live_rng.choice(LIVE_ROT_GAPS) if rot else None

    def needs_cookie_fix(self, bid: str) -> bool:
        return bid in self._wiped

    def cookie_fixed(self, bid: str) -> None:
        self._wiped.discard(bid)

    def after_down(self, bid: str) -> None:
        """``bid`` just crashed or stopped: maybe its disks are replaced."""
        self._downs += 1
        if self.rng.random() < self.wipe_probability and self.wipe(bid):
            return
        if self.rot_probability:
            self.rot(bid)

    def rot(self, bid: str) -> None:
        """Maybe flip bits in the files of ``bid`` (down): only after a crash without the
        journal, which its next boot takes for possible loss (simrot.py says why)."""
        ctx, disk = self.ctx, self.disks[bid]
        rng = seeded(ctx.seed, "disk-rot", self._downs)
        if ctx.budget.journal or not disk.powered_off or not ctx.budget.may_wipe(bid):
            return
        if rng.random() >= self.rot_probability:
            return
        flips = draw_flips(rng, rot_targets(disk))
        if not flips or not ctx.decide("disk-rot", bid, *map(str, flips)):
            return
        ctx.budget.lost_data(bid)
        self.happened(bid, "rot")
        apply_flips(disk, flips)
        ctx.counts["fault.disk_rot"] += 1
        for f in flips:
            ctx.counts[f"fault.disk_rot.{f.kind}"] += 1
        ctx.trace("disk-rot", bid, *map(str, flips))

    def wipe(self, bid: str) -> bool:
        """Replace the disks of ``bid`` (down) with empty ones, if the lossy budget allows."""
        ctx = self.ctx
        if not ctx.budget.may_wipe(bid):
            return False
        if not ctx.decide("wipe", bid):
            return False
        ctx.budget.lost_data(bid)
        self.disks[bid].wipe()
        self._wiped.add(bid)
        self.happened(bid, "wipe")
        ctx.counts["fault.wipe"] += 1
        ctx.trace("wipe", bid)
        return True

    def pass_over(self) -> None:
        """A crash or stop was suppressed (decisions.py): the draw ``after_down`` makes is
        made all the same, so the later wipes (and rots) keep theirs."""
        self._downs += 1
        self.rng.random()

    def happened(self, bid: str, event: DiskEvent) -> None:
        """The history did ``event`` to ``bid`` (a crash, a stop or a boot that failed,
        told by simbookies.py; a wipe or rot, done here): its next successful boot is
        judged as after a loss when ``simlosses.may_lose_acked`` says so."""
        self.losses.happened(bid, event)

    def boot_begins(self, bid: str) -> None:
        """``bid`` starts booting: the ledgers whose metadata lists it now, or that are
        being recovered (whose write-backs may have reached it), are those its boot must
        protect (BP-46 phase one), whatever the bookie decides: taken from the metadata
        store here, not from the bookie."""
        self.losses.boot_begins(bid)
        truth = self.ctx.truth
        owed = set()
        for lid in truth.list_ledgers():
            try:
                md = truth.read_ledger(lid)
            except BKError:  # deleted meanwhile
                continue
            if bid in md.bookies() or md.state is LedgerState.IN_RECOVERY:
                owed.add(lid)
        self._owed[bid] = frozenset(owed)

    def booted(self, bid: str) -> None:
        """``bid`` booted. When the history may have cost it acknowledged entries since
        its last successful boot (``LossRecord.booted``), what it acknowledged before is
        judged anew (``Oracle.forget_lost``): the ledgers the metadata gave it as its
        boot began (``boot_begins``) still forbid a negative. Both come from the
        history, never from the bookie: neither its verdict on its boot (its BP-46
        suspicion) nor its limbo flags decide what the oracle still checks."""
        owed = self._owed.pop(bid, frozenset())
        if not self.losses.booted(bid):
            return
        gone = self._forget_lost(bid, owed.__contains__)
        if gone:
            self.ctx.trace("lost-acks-forgotten", bid, gone)

    async def run(self) -> None:
        # A task of its own only where the scenario rots disks: the others' histories
        # stay as they were.
        live = None if self.live_rot_gap is None else asyncio.ensure_future(self._live_rot())
        try:
            await self._faults()
        except BaseException:
            if live is not None:
                live.cancel()
            raise
        if live is not None:
            await live

    async def _live_rot(self) -> None:
        """Now and then, bits flipped in the entry logs of a serving bookie (within the
        lossy budget), which serves on for a while (a read of a damaged entry must answer
        "I/O error", never "no such entry"), then crashes and comes back: its boot, after
        a crash without the journal, puts what it owes in limbo and repair copies every
        entry it can no longer read back from its peers (simrot.py says why not before)."""
        ctx, cluster = self.ctx, self.cluster
        assert self.live_rot_gap is not None
        for n in itertools.count():
            await asyncio.sleep(self._live_rng.expovariate(1 / self.live_rot_gap))
            if ctx.phase.workload_done:
                return
            rng = seeded(ctx.seed, "disk-rot-live", n)
            budget = ctx.budget
            candidates = [
                b
                for b in sorted(self.disks)
                if cluster.serving(b) and budget.may_wipe(b) and not budget.is_busy(b)
            ]
            if not candidates or not cluster.may_take_down():
                continue
            bid = rng.choice(candidates)
            flips = draw_flips(rng, self.disks[bid].files((ENTRY_LOG_SUFFIX,)))
            serve_for, down_for = rng.uniform(*LIVE_ROT_SERVES), rng.uniform(*LIVE_ROT_DOWN)
            if not flips or not ctx.decide("disk-rot-live", bid, *map(str, flips)):
                continue
            budget.busy(bid, True, combo=False)
            budget.going_down(bid, True)  # no other bookie goes down in its place meanwhile
            try:
                budget.lost_data(bid)
                self.happened(bid, "rot")
                apply_flips(self.disks[bid], flips)
                ctx.counts["fault.disk_rot_live"] += 1
                ctx.trace("disk-rot-live", bid, *map(str, flips))
                await asyncio.sleep(serve_for)
                if bid in cluster.up():
                    ctx.trace("crash", bid, "rotted")
                    cluster.crash(bid)
                budget.going_down(bid, False)  # down now: it counts itself
                await asyncio.sleep(down_for)
                if bid in cluster.down() and ctx.decide("restart", bid):
                    ctx.counts["fault.restart"] += 1
                    ctx.trace("restart", bid)
                    await cluster.boot(bid)
            finally:
                budget.going_down(bid, False)
                budget.busy(bid, False, combo=False)

    async def _faults(self) -> None:
        ctx, rng = self.ctx, self.rng
        if self.mean_gap is None:
            return
        ctx.trace("disk-nemesis", "mean-gap", self.mean_gap, "wipe", self.wipe_probability)
        while True:
            await asyncio.sleep(rng.expovariate(1 / self.mean_gap))
            if ctx.phase.workload_done:
                return
            # Without the journal a disk fault can cost acknowledged entries (a failed final
            # flush at a stop loses the write cache): such a bookie is lossy, in the budget.
            # (Not the bookies a compound aim holds: simcombos.py.)
            candidates = [
                b
                for b in sorted(self.disks)
                if ctx.budget.may_lose(b) and not ctx.budget.held_by_combo(b)
            ]
            if not candidates:
                continue
            bid = rng.choice(candidates)
            fill = rng.random() < 0.5
            until = ctx.clock.monotonic() + rng.uniform(0.01, 1.5) if fill else 0.0
            if not ctx.decide("disk-fill" if fill else "disk-fail-sync", bid):
                continue
            if not ctx.budget.journal:
                ctx.budget.lost_data(bid)
            disk = self.disks[bid]
            if fill:
                disk.fill(until)
                ctx.trace("disk-fill", bid, f"{until:.6f}")
            else:
                disk.fail_syncs(1)
                ctx.trace("disk-fail-sync", bid)

    async def heal(self) -> None:
        """The end of the faults: room on every disk, no fsync failing, and every bookie
        its disk left read-only restarted."""
        cluster = self.cluster
        for disk in self.disks.values():
            disk.clear_faults()
        for bid in cluster.up():
            if not cluster.writable(bid):  # read-only
                self.ctx.trace("restart-readonly", bid)
                await cluster.stop(bid)
                await cluster.boot(bid)
