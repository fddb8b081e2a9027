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
* **the dirty leftover** (issue #12 race 1, ``dirty-entries-outside-noop-write-set``;
  E > WQ > AQ): a stream's term writer is cut off from every bookie of its last
  fragment but one, and goes on appending (what reaches that bookie completes
  nowhere); another client takes the stream over, alone. Its recovery finds the
  first id that bookie lacks absent and writes the no-op there, whose truncate does
  not reach that bookie: only clearing the last fragment drops the old term's entries
  it holds above. The new term's first append to it is held up, acknowledged by the
  others, and a reader asks that bookie for it.

* **a displaced wipe** (BP-46 for a bookie the stream no longer lists): before a new
  stream's first append, another client takes it over, blind to one bookie of the
  first write set (it never hears of the new term) and losing its adds to another
  (which answers its fence and reads, and then is replaced in the no-op's ensemble
  change: the metadata no longer lists it). That one is wiped and boots at once; the
  old writer then appends, its request to the third bookie lost. Only the term that
  bookie's suspicious boot raises for a stream it is not listed in keeps the old
  writer's append from being acknowledged after the takeover.

While a compound aim runs it holds the bookies of the ledger's ensemble
(``FaultBudget.busy``): the nemesis, the strikes and the disk faults leave them alone.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

from embedlog.errors import BKError
from embedlog.metadata.ledger_metadata import LedgerState
from embedlog.metadata.striping import write_set_bookies
from embedlog.testing.simcontext import ClusterControl, SimContext
from embedlog.testing.simraces import BLIND_FOR
from embedlog.testing.workload import PASSWORD
from embedlog.wire.messages import OpCode

if TYPE_CHECKING:
    from embedlog.client import Client
    from embedlog.ledger.writer import LedgerWriter
    from embedlog.testing.oracle import Oracle
    from embedlog.testing.simbudget import FaultBudget
    from embedlog.unbounded.ledger import UnboundedLedger
    from embedlog.unbounded.writer import TermWriter

# How long a quiet writer waits at most for the recovery and the reboot it is quiet for.
QUIET_LIMIT = 5.0
WIPED_REBOOT_WITHIN = 10  # a writer's first adds: the lossy budget is likely unspent
SETTLE = (0.005, 0.05)  # seconds after its last acknowledgement, for the stragglers
RECOVERY_TRIES = 3
BOOT_TRIES = 3
# The dirty leftover: how long the old writer stays cut off from all but one bookie, how
# long after the cut the takeover starts (the old writer's appends reach that bookie
# meanwhile), and how long the new term's first append to it is held up.
CUT_OFF_FOR = 10.0  # at most: it ends once the takeover ended
CUT_OFF_WAIT = 0.5
POLL = 0.005
HELD_ADD = (0.05, 0.8)
TAKEOVER_TRIES = 3  # a wiped bookie's boot (its cookie fix) may meet a metadata fault
# The displaced wipe: its per-seed rates (0 in half the seeds), and how long its lost
# requests last at most.
DISPLACED_WIPE_RATES = (0.0, 0.0, 0.5, 1.0)
DISPLACED_WIPE_FOR = 5.0


class StreamWork(Protocol):
    """What the dirty leftover asks of the streams' workload (workload_unbounded.py)."""

    def hold(self, lid: int) -> asyncio.Event:
        """Keep other takeovers of ``lid`` waiting until the event is set."""
        ...

    async def take_over(
        self, client: Client, name: str, lid: int, *, holder: bool = False
    ) -> UnboundedLedger | None: ...

    def append(self, handle: UnboundedLedger, name: str, payload: bytes) -> asyncio.Future[int]:
        """One append in ``handle``'s term, known to the oracle."""
        ...


def wiped_reboot_at(ctx: SimContext, adds: int) -> int | None:
    """After which of a writer's ``adds`` adds (counted from 0) it goes quiet for the wiped
    reboot, if it does: early, before the nemesis spent the lossy budget elsewhere."""
    races = ctx.races
    if races is None or not races.wiped_reboot or adds < 2:
        return None
    rng = ctx.combo_rng("wiped-reboot")
    if rng.random() >= races.wiped_reboot:
        return None
    return rng.randrange(min(adds - 1, WIPED_REBOOT_WITHIN))


async def quiet_writer_wiped_reboot(
    ctx: SimContext,
    cluster: ClusterControl,
    oracle: Oracle,
    name: str,
    lid: int,
    writer: LedgerWriter,
) -> None:
    """Run the wiped reboot under a quiet writer (module docstring) on ``name``'s ledger
    ``lid`` before the writer adds again."""
    rng = ctx.combo_rng("wiped-reboot")
    # Quiet means nothing of the writer's in flight: a late answer of an add sent before
    # the recovery's fence would be a refusal that ends the writer.
    drained = asyncio.ensure_future(writer.drain())
    await asyncio.wait([drained], timeout=QUIET_LIMIT)
    if not drained.done():
        drained.cancel()
        ctx.counts["combo.wiped_reboot.missed.busy_writer"] += 1
        return
    await asyncio.sleep(rng.uniform(*SETTLE))
    md = writer.md
    eid = writer.next_entry_id
    ws = write_set_bookies(eid, md.ensemble_for(eid), md.write_quorum)
    # The bookie to wipe must be within the lossy budget (a wipe loses what it held).
    budget = ctx.budget
    wipeable = [
        b for b in ws if budget.may_wipe(b) and cluster.serving(b) and not budget.is_busy(b)
    ]
    if writer.error is not None or not wipeable:
        ctx.counts["combo.wiped_reboot.missed.no_victim"] += 1
        return
    victim = rng.choice(wipeable)
    blind = rng.choice([b for b in ws if b != victim])
    ctx.counts["combo.wiped_reboot"] += 1
    who = f"q{ctx.counts['combo.wiped_reboot']}"
    ctx.trace("combo", "wiped-reboot", name, lid, eid, "blind", blind, "wipe", victim)
    # The nemesis and the strikes leave the ensemble alone meanwhile: a wipe or a crash of
    # another of its bookies would end the history this aims at before it happened.
    with _holding(budget, md.last_fragment[1], victim):
        client = cluster.client(who)
        cluster.blind(who, blind, lid, "all", ctx.clock.monotonic() + rng.uniform(*BLIND_FOR))
        recovery = asyncio.ensure_future(_recover(ctx, oracle, client, lid, who))
        await asyncio.wait([recovery], timeout=QUIET_LIMIT)
        if not recovery.done() or not recovery.result():
            ctx.counts["combo.wiped_reboot.missed.recovery"] += 1
            return  # the writer goes on where it was
        await _wipe_and_boot(ctx, cluster, victim, rng, "wiped_reboot")


@contextmanager
def _holding(
    budget: FaultBudget, bookies: Iterable[str], victim: str | None = None
) -> Iterator[None]:
    """While a compound aim runs: ``bookies`` (those nothing holds yet) busy, so that the
    nemesis, the strikes and the disk faults leave them alone, and the lossy budget held
    for ``victim``, the bookie it is about to wipe (a crash elsewhere would spend it)."""
    held = [b for b in bookies if not budget.is_busy(b)]
    for b in held:
        budget.busy(b, True)
    if victim is not None:
        budget.reserve_lossy(victim)
    try:
        yield
    finally:
        if victim is not None:
            budget.release_lossy(victim)
        for b in held:
            budget.busy(b, False)


async def _take_over_alone(
    work: StreamWork, client: Client, who: str, lid: int, rng: random.Random
) -> UnboundedLedger | None:
    """A compound aim's takeover of ``lid`` (the others wait), tried again while it fails."""
    for _ in range(TAKEOVER_TRIES):
        handle = await work.take_over(client, who, lid, holder=True)
        if handle is not None:
            return handle
        await asyncio.sleep(rng.uniform(0.05, 0.3))
    return None


async def _wipe_and_boot(
    ctx: SimContext, cluster: ClusterControl, victim: str, rng: random.Random, combo: str
) -> bool:
    """Crash ``victim``, wipe its disks and boot it at once (the operator's cookie fix),
    if it still serves and the budgets allow; whether it was taken down."""
    if not (cluster.serving(victim) and ctx.budget.may_wipe(victim) and cluster.may_take_down()):
        ctx.counts[f"combo.{combo}.missed.victim"] += 1
        return False
    await cluster.take_down(victim, wipe=True)
    for _ in range(BOOT_TRIES):
        ctx.counts["fault.restart"] += 1
        ctx.trace("restart", victim)
        if await cluster.boot(victim):
            ctx.counts[f"combo.{combo}.done"] += 1
            break
        await asyncio.sleep(rng.uniform(0.01, 0.1))
    return True


async def _recover(ctx: SimContext, oracle: Oracle, client: Client, lid: int, who: str) -> bool:
    """Recover (close) ``lid``, tried again while it fails; whether it closed. No read
    back: the writer is waiting."""
    rng = ctx.combo_rng("wiped-reboot")
    for _ in range(RECOVERY_TRIES):
        ctx.counts["recovery"] += 1
        ctx.trace("recover", who, lid)
        try:
            rh = await client.open_ledger_aio(lid, password=PASSWORD, recover=True)
        except BKError as exc:
            ctx.counts[f"recovery.failed.{type(exc).__name__}"] += 1
            ctx.trace("recover-failed", who, lid, type(exc).__name__, exc)
            await asyncio.sleep(rng.uniform(0.05, 0.3))
            continue
        md = rh.metadata
        if md.state is not LedgerState.CLOSED:
            oracle.violate("LedgerIsClosed", f"{who} recovered {lid} but it is {md.state}")
            return False
        ctx.counts["recovery.ok"] += 1
        ctx.trace("recovered", who, lid, md.last_entry_id, md.fragments)
        oracle.ledger_closed(lid, md.last_entry_id, who)
        return True
    return False


def dirty_leftover_at(ctx: SimContext, adds: int) -> int | None:
    """After which of a stream writer's ``adds`` appends (from 0) the dirty leftover
    starts, if it does (E > WQ > AQ only: with WQ = AQ no add completes without a bookie
    of its write set, and with E = WQ every bookie is in the no-op's)."""
    races = ctx.races
    if races is None or not races.dirty_leftover or adds < 2:
        return None
    if not ctx.ensemble > ctx.write_quorum > ctx.ack_quorum:
        return None
    rng = ctx.combo_rng("dirty-leftover")
    if rng.random() >= races.dirty_leftover:
        return None
    return rng.randrange(adds - 1)


def dirty_leftover_ready(ctx: SimContext, cluster: ClusterControl, writer: TermWriter) -> bool:
    """Whether the dirty leftover may start at ``writer`` now: every bookie of its last
    fragment up, writable, and held by nothing else."""
    md = ctx.truth.read_ledger(writer.md.ledger_id)
    if md.term != writer.term or md.state is not LedgerState.OPEN:
        return False  # displaced already, or a takeover under way
    return all(
        cluster.writable(b) and not ctx.budget.is_busy(b) for b in writer.md.last_fragment[1]
    )


async def dirty_leftover(
    ctx: SimContext,
    cluster: ClusterControl,
    work: StreamWork,
    client_name: str,
    lid: int,
    writer: TermWriter,
) -> None:
    """The dirty leftover (module docstring), against ``client_name``'s term writer of
    stream ``lid``, which keeps appending meanwhile."""
    rng = ctx.combo_rng("dirty-leftover")
    budget = ctx.budget
    md = writer.md
    ensemble = md.last_fragment[1]
    keep = rng.choice(ensemble)
    ctx.counts["combo.dirty_leftover"] += 1
    n = ctx.counts["combo.dirty_leftover"]
    who = f"d{n}"
    ctx.trace("combo", "dirty-leftover", client_name, lid, "keep", keep)
    with _holding(budget, ensemble):
        alone = work.hold(lid)
        try:
            # The old term's appends reach only ``keep`` from now on (none completes).
            cluster.blind(client_name, keep, lid, "others", ctx.clock.monotonic() + CUT_OFF_FOR)
            # The takeover starts once the old writer sent a few ids more (some of them reach
            # ``keep`` only, the others nothing), or a while later at most.
            cut_at, waited = writer.next_entry_id, 0.0
            while writer.next_entry_id <= cut_at + md.ensemble_size and waited < CUT_OFF_WAIT:
                await asyncio.sleep(POLL)
                waited += POLL
            client = cluster.client(who)
            cluster.spare(who, lid, True)
            handle = await _take_over_alone(work, client, who, lid, rng)
            # The old writer's connections heal (it learns of the new term as they do).
            cluster.unblind(client_name, lid)
            if handle is None or handle.writer is None:
                ctx.counts["combo.dirty_leftover.missed.takeover"] += 1
                return
            new = handle.writer
            eid = new.next_entry_id
            nmd = new.md
            ws = write_set_bookies(eid, nmd.ensemble_for(eid), nmd.write_quorum)
            noop_ws = write_set_bookies(eid - 1, nmd.ensemble_for(eid - 1), nmd.write_quorum)
            if keep not in ws or keep in noop_ws:
                # The no-op's truncate reached it, or the next id is not its to hold.
                ctx.counts["combo.dirty_leftover.missed.write_set"] += 1
                return
            # The new term's first append reaches ``keep`` late: acknowledged by the others,
            # while ``keep`` still holds whatever the old term left at that id.
            cluster.hold_next(who, keep, lid, rng.uniform(*HELD_ADD))
            acked = work.append(handle, who, b"dirty-leftover")
            await asyncio.wait([acked])
            if acked.exception() is not None or acked.result() != eid:
                ctx.counts["combo.dirty_leftover.missed.append"] += 1
                return
            ctx.counts["combo.dirty_leftover.read"] += 1
            ctx.trace("combo-read", who, keep, lid, eid)
            # A reader of its own: on the new term's connection the read would wait behind
            # the held add.
            reader = cluster.client(f"{who}-reader")
            try:
                await reader.ctx.bookies.call(keep, OpCode.READ, lid, eid)
            except BKError:
                pass  # unknown: the oracle judged whatever the bookie answered
        finally:
            alone.set()
            cluster.spare(who, lid, False)


def displaced_wipe_rate(ctx: SimContext) -> float:
    """The seed's rate of the displaced wipe per new stream (0 outside the race scenarios)."""
    if ctx.races is None:
        return 0.0
    return ctx.combo_rng("displaced-wipe").choice(DISPLACED_WIPE_RATES)


def displaced_wipe_ready(
    ctx: SimContext, cluster: ClusterControl, writer: TermWriter, rate: float
) -> bool:
    """Whether the displaced wipe starts at ``writer`` now: a new stream before its first
    append, its ensemble up and held by nothing else, two more bookies to replace two of
    it, and the seed's rate fires."""
    if rate <= 0 or writer.next_entry_id != 0 or ctx.ack_quorum < 2:
        return False
    ensemble = writer.md.last_fragment[1]
    budget = ctx.budget
    if not all(cluster.writable(b) and not budget.is_busy(b) for b in ensemble):
        return False
    spares = [b for b in cluster.up() if b not in ensemble and cluster.writable(b)]
    if len(spares) < 2:
        return False
    return ctx.combo_rng("displaced-wipe").random() < rate


async def displaced_wipe(
    ctx: SimContext,
    cluster: ClusterControl,
    work: StreamWork,
    client_name: str,
    lid: int,
    writer: TermWriter,
) -> None:
    """The displaced wipe (module docstring) against ``client_name``'s new stream ``lid``,
    whose writer appends once this returned."""
    rng = ctx.combo_rng("displaced-wipe")
    budget = ctx.budget
    md = writer.md
    ws = write_set_bookies(0, md.ensemble_for(0), md.write_quorum)
    wipeable = [b for b in ws if budget.may_wipe(b)]
    if not wipeable:
        ctx.counts["combo.displaced_wipe.missed.no_victim"] += 1
        return
    victim = rng.choice(wipeable)
    unaware = rng.choice([b for b in ws if b != victim])
    refusing = [b for b in ws if b not in (victim, unaware)]  # WQ <= 3: one at most
    ctx.counts["combo.displaced_wipe"] += 1
    who = f"u{ctx.counts['combo.displaced_wipe']}"
    ctx.trace("combo", "displaced-wipe", client_name, lid, "unaware", unaware, "wipe", victim)
    with _holding(budget, md.last_fragment[1], victim):
        alone = work.hold(lid)
        try:
            client = cluster.client(who)
            cluster.spare(who, lid, True)
            until = ctx.clock.monotonic() + DISPLACED_WIPE_FOR
            cluster.blind(who, unaware, lid, "all", until)
            cluster.lose_adds(who, victim, lid, until)
            handle = await _take_over_alone(work, client, who, lid, rng)
            if handle is None:
                ctx.counts["combo.displaced_wipe.missed.takeover"] += 1
                return
            if victim in ctx.truth.read_ledger(lid).bookies():
                ctx.counts["combo.displaced_wipe.missed.listed"] += 1
                return
            if not await _wipe_and_boot(ctx, cluster, victim, rng, "displaced_wipe"):
                return
            # The old writer's first append reaches the unaware bookie and the wiped one; the
            # third's refusal is lost, so the wiped bookie's term alone can refuse it.
            for b in refusing:
                cluster.blind(client_name, b, lid, "all", ctx.clock.monotonic() + BLIND_FOR[1])
        finally:
            cluster.unblind(who, lid)
            cluster.lose_adds(who, victim, lid, 0.0)  # over: its writer's adds reach it again
            alone.set()
            cluster.spare(who, lid, False)
