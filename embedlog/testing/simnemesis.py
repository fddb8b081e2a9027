"""The nemesis: bookies taken down and brought back during a simulated history.

Every scenario with crashes draws random steps (``Nemesis.run``): restart a bookie
that is down, or crash or stop one that is up. The race scenarios also aim
(simraces.py): the victim is often a bookie a recovery or a takeover just asked; a
request's fate may strike its bookie down at once and bring it back; an aimed
recovery starts on the ledger of an add the network holds up (``late_add``) and may
be blinded to the bookie that add is late for (``blind``).

The cluster itself (boots, crashes, clean stops) is the ``ClusterControl``'s
(simcontext.py); this module only decides when and to whom.
"""

from __future__ import annotations

import asyncio
import random

from embedlog.testing.simcontext import ClusterControl, SimContext
from embedlog.testing.simfaults import DiskNemesis
from embedlog.testing.simloop import seeded
from embedlog.testing.simraces import (
    BLIND_FOR,
    GATE_FOR,
    STRIKE_AFTER,
    STRIKE_DOWN,
    Targets,
    aimed,
    strikes_at,
)
from embedlog.wire.messages import Request


class Nemesis:
    def __init__(
        self, ctx: SimContext, cluster: ClusterControl, disk_faults: DiskNemesis, seed: int
    ) -> None:
        self.ctx = ctx
        self.cluster = cluster
        self.disk_faults = disk_faults
        self._rng = seeded(seed, "faults")
        self._blind_rng = seeded(seed, "blind")
        self._strike_rng = seeded(seed, "strikes")
        self._targets = Targets()
        self._strikes: set[asyncio.Future[None]] = set()
        self._moments: list[asyncio.Future[int]] = []  # aimed recoveries waiting
        self._late_ledgers: set[int] = set()  # ledgers an add was held up to, lately
        self._late_bookie: dict[int, str] = {}  # ledger -> the bookie of its last late add

    # -- random steps ---------------------------------------------------------------------------

    async def run(self) -> None:
        ctx, cluster = self.ctx, self.cluster
        rng = self._rng
        max_down = ctx.budget.max_down
        mean_gap = rng.choice((0.1, 0.3, 1.0))
        ctx.trace("nemesis", "mean-gap", mean_gap, "max-down", max_down)
        steps = 0
        while True:
            await asyncio.sleep(rng.expovariate(1 / mean_gap))
            if ctx.phase.workload_done or steps == ctx.scenario.fault_budget:
                return
            steps += 1
            # Bookies a strike holds are its own to bring back (none outside the races).
            up = [b for b in cluster.up() if not ctx.budget.is_busy(b)]
            down = [b for b in cluster.down() if not ctx.budget.is_busy(b)]
            action = rng.random()
            # (may_take_down: fewer than max_down down, a bookie sure to go down counted)
            if down and (action < 0.4 or not cluster.may_take_down()):
                bid = rng.choice(down)
                if not ctx.decide("restart", bid):
                    continue
                ctx.counts["fault.restart"] += 1
                ctx.trace("restart", bid)
                # A strike leaves a bookie alone while it boots.
                ctx.budget.busy(bid, True, combo=False)
                try:
                    await cluster.boot(bid)
                finally:
                    ctx.budget.busy(bid, False, combo=False)
            elif not cluster.may_take_down():
                continue  # what is down is a strike's (or a rot's) to bring back
            elif up:
                bid = self._victim(rng, up)
                crash = action < 0.85 and ctx.budget.may_lose(bid)
                if not ctx.decide("crash" if crash else "stop", bid):
                    self.disk_faults.pass_over()
                    continue
                ctx.budget.busy(bid, True, combo=False)
                try:
                    if crash:
                        cluster.crash(bid)
                    else:
                        await cluster.stop(bid)
                    self.disk_faults.after_down(bid)
                finally:
                    ctx.budget.busy(bid, False, combo=False)

    def _victim(self, rng: random.Random, up: list[str]) -> str:
        """The bookie a step takes down: in the race scenarios, often one a recovery or a
        takeover just asked, or whose request was just lost."""
        races = self.ctx.races
        if races is not None and rng.random() < races.aim:
            aimed_at = self._targets.among(self.ctx.clock.monotonic(), up)
            if aimed_at:
                self.ctx.counts["fault.aimed"] += 1
                return rng.choice(aimed_at)
        return rng.choice(up)

    # -- aimed at races (the race scenarios) --------------------------------------------------

    def watched(self, bookie: str, req: Request, fate: str) -> None:
        """The network's word on each request's fate (``SimNetwork(watch=...)``)."""
        if aimed(req, fate):
            self._targets.note(self.ctx.clock.monotonic(), bookie)
        if fate == "late":
            self._late_ledgers.add(req.ledger_id)
            self._late_bookie[req.ledger_id] = bookie
        if fate == "late" and self._moments:
            for waiting in self._moments:
                if not waiting.done():
                    waiting.set_result(req.ledger_id)
            self._moments.clear()
        if strikes_at(req, fate):
            self._maybe_strike(bookie)

    def took_late(self, lid: int) -> bool:
        """Whether an add to ``lid`` was held up since the last time this was asked."""
        late = lid in self._late_ledgers
        self._late_ledgers.discard(lid)
        return late

    async def late_add(self, limit: float) -> int | None:
        """The ledger of the next add the network holds up (None after ``limit`` seconds):
        an aimed recovery or takeover starts there while that add is on its way."""
        moment: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._moments.append(moment)
        await asyncio.wait([moment], timeout=limit)
        if not moment.done():
            moment.cancel()
            return None
        return moment.result()

    def blind(self, who: str, lid: int) -> None:
        """An aimed recovery or takeover by ``who`` starts on ``lid``: in the race scenarios
        it may lose its fence (or every request, a while) to the bookie the late add it
        started at is held up for. That bookie stays unfenced while the others cover the
        fence, and takes the old writer's late add after the recovery read its end."""
        ctx = self.ctx
        races = ctx.races
        bookie = self._late_bookie.get(lid)
        if races is None or not races.blind or bookie is None:
            return
        now = ctx.clock.monotonic()
        until = now + self._blind_rng.uniform(*BLIND_FOR)
        if not ctx.decide("blind", who, bookie, lid, races.blind):
            return
        ctx.counts[f"recovery.blind.{races.blind}"] += 1
        ctx.trace("blind", who, bookie, lid, races.blind, f"{until:.6f}")
        self.cluster.blind(who, bookie, lid, races.blind, until)
        if races.blind == "fence":
            self.cluster.gate(bookie, lid, now + GATE_FOR)

    async def strikes_done(self) -> None:
        """Wait for the strikes under way: each brings its bookie back."""
        if self._strikes:
            await asyncio.wait(list(self._strikes))

    def _maybe_strike(self, bid: str) -> None:
        ctx, cluster = self.ctx, self.cluster
        races = ctx.races
        assert races is not None
        if not races.strike or ctx.phase.workload_done or ctx.budget.is_busy(bid):
            return
        if not cluster.serving(bid) or not cluster.may_take_down():
            return
        if self._strike_rng.random() >= races.strike:
            return
        ctx.budget.busy(bid, True, combo=False)
        strike = asyncio.ensure_future(self._strike(bid))
        self._strikes.add(strike)
        strike.add_done_callback(self._strikes.discard)

    async def _strike(self, bid: str) -> None:
        """Take ``bid`` down at once (crashed when the lossy budget allows, else stopped;
        maybe wiped), then bring it back: the race scenarios' aimed crash."""
        ctx, cluster = self.ctx, self.cluster
        rng = self._strike_rng
        try:
            await asyncio.sleep(rng.uniform(*STRIKE_AFTER))
            if not cluster.serving(bid):
                return
            if not ctx.decide("strike", bid):
                rng.uniform(*STRIKE_DOWN)  # drawn all the same: later strikes keep theirs
                return
            ctx.counts["fault.strike"] += 1
            ctx.trace("strike", bid)
            if ctx.budget.may_lose(bid):
                cluster.crash(bid)
            else:
                await cluster.stop(bid)
            self.disk_faults.after_down(bid)
            await asyncio.sleep(rng.uniform(*STRIKE_DOWN))
            if bid in cluster.down() and ctx.decide("restart", bid):
                ctx.counts["fault.restart"] += 1
                ctx.trace("restart", bid)
                await cluster.boot(bid)
        finally:
            ctx.budget.busy(bid, False, combo=False)
