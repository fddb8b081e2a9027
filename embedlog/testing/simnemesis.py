"""The nemesis: bookies taken down and brought back during a simulated history.

Every scenario with crashes draws random steps (``Nemesis.run``): restart a bookie
that is down, or crash or stop one that is up. The race scenarios also aim
(simraces.py): the victim is often a bookie a recovery or a takeover just asked; a
request's fate may strike its bookie down at once and bring it back; an aimed
recovery starts on the ledger of an add the network holds up (``late_add``) and may
be blinded to the bookie that add is late for (``blind``).

The cluster itself (boots, crashes, clean stops, which bookies are busy) is the
``Simulation``'s; this module only decides when and to whom.
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from embedlog.testing.sim import Simulation


class Nemesis:
    def __init__(self, sim: Simulation, seed: int) -> None:
        self.sim = sim
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
        sim = self.sim
        rng = self._rng
        max_down = sim.budget.max_down
        mean_gap = rng.choice((0.1, 0.3, 1.0))
        sim.trace("nemesis", "mean-gap", mean_gap, "max-down", max_down)
        steps = 0
        while True:
            await asyncio.sleep(rng.expovariate(1 / mean_gap))
            if sim.workload_done or steps == sim.scenario.fault_budget:
                return
            steps += 1
            # Bookies a strike holds are its own to bring back (none outside the races).
            up = [b for b in sim.up() if not sim.budget.is_busy(b)]
            down = [b for b in sim.down() if not sim.budget.is_busy(b)]
            action = rng.random()
            if down and (action < 0.4 or len(sim.down()) >= max_down):
                bid = rng.choice(down)
                if not sim.decide("restart", bid):
                    continue
                sim.counts["fault.restart"] += 1
                sim.trace("restart", bid)
                # A strike leaves a bookie alone while it boots.
                sim.budget.busy(bid, True, combo=False)
                try:
                    await sim.boot(bid)
                finally:
                    sim.budget.busy(bid, False, combo=False)
            elif len(sim.down()) >= max_down:
                continue  # what is down is a strike's to bring back
            elif up:
                bid = self._victim(rng, up)
                crash = action < 0.85 and sim.budget.may_lose(bid)
                if not sim.decide("crash" if crash else "stop", bid):
                    sim.disk_faults.pass_over()
                    continue
                sim.budget.busy(bid, True, combo=False)
                try:
                    if crash:
                        sim.crash(bid)
                    else:
                        await sim.stop(bid)
                    sim.disk_faults.after_down(bid)
                finally:
                    sim.budget.busy(bid, False, combo=False)

    def _victim(self, rng: random.Random, up: list[str]) -> str:
        """The bookie a step takes down: in the race scenarios, often one a recovery or a
        takeover just asked, or whose request was just lost."""
        races = self.sim.races
        if races is not None and rng.random() < races.aim:
            aimed_at = self._targets.among(self.sim.loop.time(), up)
            if aimed_at:
                self.sim.counts["fault.aimed"] += 1
                return rng.choice(aimed_at)
        return rng.choice(up)

    # -- aimed at races (the race scenarios) --------------------------------------------------

    def watched(self, bookie: str, req: Request, fate: str) -> None:
        """The network's word on each request's fate (``SimNetwork(watch=...)``)."""
        if aimed(req, fate):
            self._targets.note(self.sim.loop.time(), bookie)
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
        moment: asyncio.Future[int] = self.sim.loop.create_future()
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
        sim = self.sim
        races = sim.races
        bookie = self._late_bookie.get(lid)
        if races is None or not races.blind or bookie is None:
            return
        now = sim.loop.time()
        until = now + self._blind_rng.uniform(*BLIND_FOR)
        if not sim.decide("blind", who, bookie, lid, races.blind):
            return
        sim.counts[f"recovery.blind.{races.blind}"] += 1
        sim.trace("blind", who, bookie, lid, races.blind, f"{until:.6f}")
        sim.net.blind(who, bookie, lid, races.blind, until)
        if races.blind == "fence":
            sim.net.gate(bookie, lid, now + GATE_FOR)

    async def strikes_done(self) -> None:
        """Wait for the strikes under way: each brings its bookie back."""
        if self._strikes:
            await asyncio.wait(list(self._strikes))

    def _maybe_strike(self, bid: str) -> None:
        sim = self.sim
        races = sim.races
        assert races is not None
        if not races.strike or sim.workload_done or sim.budget.is_busy(bid):
            return
        if not sim.serving(bid) or not sim.may_take_down():
            return
        if self._strike_rng.random() >= races.strike:
            return
        sim.budget.busy(bid, True, combo=False)
        strike = asyncio.ensure_future(self._strike(bid))
        self._strikes.add(strike)
        strike.add_done_callback(self._strikes.discard)

    async def _strike(self, bid: str) -> None:
        """Take ``bid`` down at once (crashed when the lossy budget allows, else stopped;
        maybe wiped), then bring it back: the race scenarios' aimed crash."""
        sim = self.sim
        rng = self._strike_rng
        try:
            await asyncio.sleep(rng.uniform(*STRIKE_AFTER))
            if not sim.serving(bid):
                return
            if not sim.decide("strike", bid):
                rng.uniform(*STRIKE_DOWN)  # drawn all the same: later strikes keep theirs
                return
            sim.counts["fault.strike"] += 1
            sim.trace("strike", bid)
            if sim.budget.may_lose(bid):
                sim.crash(bid)
            else:
                await sim.stop(bid)
            sim.disk_faults.after_down(bid)
            await asyncio.sleep(rng.uniform(*STRIKE_DOWN))
            if bid in sim.down() and sim.decide("restart", bid):
                sim.counts["fault.restart"] += 1
                sim.trace("restart", bid)
                await sim.boot(bid)
        finally:
            sim.budget.busy(bid, False, combo=False)
