"""Compound aims of the race scenarios: several aimed faults in one chosen order.

The single aimed faults (simraces.py) each make one coincidence likely; a few
histories need three or four of them in a particular order, at one ledger, before
anything else happens to it, and independent draws hardly ever line them up. A
compound aim lines them up once its (rare, per-seed) draw fires; each step is still a
fault the simulation draws anyway (a recovery blind to one bookie, a wiped disk, a
quick reboot), only placed where the protocol decides something. Their draws come
from streams of their own (``seeded(seed, "combo", ...)``), so a seed whose rate is
0 runs exactly the history it ran before they existed.

* **a wiped reboot under a quiet writer** (BP-46 scenario 1, ``no-fence-on-boot``):
  a bounded ledger's writer goes quiet after an add; another client recovers its
  ledger, blind to one bookie of the writer's next write set (that bookie stays
  unfenced); once the recovery ended, another bookie of that write set, one the
  recovery fenced, is taken down, its disks are wiped, and it boots at once (the
  operator's cookie fix); then the writer writes again. The only thing that keeps
  its next entry from being acknowledged after the close is the fence that bookie's
  suspicious boot puts on the ledger.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from embedlog.errors import BKError
from embedlog.ledger.quorum import write_set_bookies
from embedlog.metadata.ledger_metadata import LedgerState
from embedlog.testing.simloop import seeded
from embedlog.testing.simraces import BLIND_FOR
from embedlog.testing.workload import PASSWORD

if TYPE_CHECKING:
    from embedlog.client import Client
    from embedlog.ledger.writer import LedgerWriter
    from embedlog.testing.sim import Simulation
    from embedlog.testing.workload_bounded import BoundedWorkload

# How long a quiet writer waits at most for the recovery and the reboot it is quiet for.
QUIET_LIMIT = 5.0
WIPED_REBOOT_WITHIN = 10  # a writer's first adds: the lossy budget is likely unspent
SETTLE = (0.005, 0.05)  # seconds after its last acknowledgement, for the stragglers
RECOVERY_TRIES = 3
BOOT_TRIES = 3  # a wiped bookie's boot (its cookie fix) may meet a metadata fault


def wiped_reboot_at(sim: Simulation, adds: int) -> int | None:
    """After which of a writer's ``adds`` adds (counted from 0) it goes quiet for the wiped
    reboot, if it does: early, before the nemesis spent the lossy budget elsewhere."""
    races = sim.races
    if races is None or not races.wiped_reboot or adds < 2:
        return None
    rng = sim.combo_rng("wiped-reboot")
    if rng.random() >= races.wiped_reboot:
        return None
    return rng.randrange(min(adds - 1, WIPED_REBOOT_WITHIN))


async def quiet_writer_wiped_reboot(
    work: BoundedWorkload, name: str, lid: int, writer: LedgerWriter
) -> None:
    """Run the wiped reboot under a quiet writer (module docstring) on ``name``'s ledger
    ``lid`` before the writer adds again."""
    sim = work.sim
    rng = sim.combo_rng("wiped-reboot")
    # Quiet means nothing of the writer's in flight: a late answer of an add sent before
    # the recovery's fence would be a refusal that ends the writer.
    drained = asyncio.ensure_future(writer.drain())
    await asyncio.wait([drained], timeout=QUIET_LIMIT)
    if not drained.done():
        drained.cancel()
        sim.counts["combo.wiped_reboot.missed.busy_writer"] += 1
        return
    await asyncio.sleep(rng.uniform(*SETTLE))
    md = writer.md
    eid = writer.next_entry_id
    ws = write_set_bookies(eid, md.ensemble_for(eid), md.write_quorum)
    # The bookie to wipe must be within the lossy budget (a wipe loses what it held).
    wipeable = [b for b in ws if sim.may_wipe(b) and sim.serving(b) and not sim.is_busy(b)]
    if writer.error is not None or not wipeable:
        sim.counts["combo.wiped_reboot.missed.no_victim"] += 1
        return
    victim = rng.choice(wipeable)
    sim.reserve_lossy(victim)
    blind = rng.choice([b for b in ws if b != victim])
    sim.counts["combo.wiped_reboot"] += 1
    who = f"q{sim.counts['combo.wiped_reboot']}"
    sim.trace("combo", "wiped-reboot", name, lid, eid, "blind", blind, "wipe", victim)
    # The nemesis and the strikes leave the ensemble alone meanwhile: a wipe or a crash of
    # another of its bookies would end the history this aims at before it happened.
    held = [b for b in md.last_fragment[1] if not sim.is_busy(b)]
    for b in held:
        sim.busy(b, True)
    try:
        client = sim.client(who)
        sim.net.blind(who, blind, lid, "all", sim.loop.time() + rng.uniform(*BLIND_FOR))
        recovery = asyncio.ensure_future(_recover(work, client, lid, who))
        await asyncio.wait([recovery], timeout=QUIET_LIMIT)
        if not recovery.done() or not recovery.result():
            sim.counts["combo.wiped_reboot.missed.recovery"] += 1
            return  # the writer goes on where it was
        if not (sim.serving(victim) and sim.may_wipe(victim) and sim.may_take_down()):
            sim.counts["combo.wiped_reboot.missed.victim"] += 1
            return
        await sim.take_down(victim, wipe=True)
        for _ in range(BOOT_TRIES):
            sim.counts["fault.restart"] += 1
            sim.trace("restart", victim)
            if await sim.boot(victim):
                sim.counts["combo.wiped_reboot.done"] += 1
                break
            await asyncio.sleep(rng.uniform(0.01, 0.1))
    finally:
        sim.reserve_lossy(None)
        for b in held:
            sim.busy(b, False)


async def _recover(work: BoundedWorkload, client: Client, lid: int, who: str) -> bool:
    """Recover (close) ``lid``, tried again while it fails; whether it closed. No read
    back: the writer is waiting."""
    sim = work.sim
    rng = sim.combo_rng("wiped-reboot")
    for _ in range(RECOVERY_TRIES):
        sim.counts["recovery"] += 1
        sim.trace("recover", who, lid)
        try:
            rh = await client.open_ledger_aio(lid, password=PASSWORD, recover=True)
        except BKError as exc:
            sim.counts[f"recovery.failed.{type(exc).__name__}"] += 1
            sim.trace("recover-failed", who, lid, type(exc).__name__, exc)
            await asyncio.sleep(rng.uniform(0.05, 0.3))
            continue
        md = rh.metadata
        if md.state is not LedgerState.CLOSED:
            work.oracle.violate("LedgerIsClosed", f"{who} recovered {lid} but it is {md.state}")
            return False
        sim.counts["recovery.ok"] += 1
        sim.trace("recovered", who, lid, md.last_entry_id, md.fragments)
        work.oracle.ledger_closed(lid, md.last_entry_id, who)
        return True
    return False
