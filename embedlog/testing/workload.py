"""What a simulated history runs against the cluster: the workload of its scenario.

A workload starts the clients' work (``start``), is told when the workload's time is
up (``stop``), and, once the network is healed and every bookie is back, reads every
ledger back to check what it wrote (``check_end``). The bounded ledgers' workload is in
``workload_bounded``, the unbounded streams' in ``workload_unbounded``; ``sim.py`` picks
one by the scenario's ``ledger_kind``.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from embedlog.errors import BKError
from embedlog.testing.simraces import AIM_RECOVERY_WAIT, PAUSE
from embedlog.wire.entry import DigestType

if TYPE_CHECKING:
    from embedlog.testing.oracle import Oracle
    from embedlog.testing.sim import Simulation

T = TypeVar("T")

PASSWORD = b"sim"
DIGEST = DigestType.CRC32C


class Workload(Protocol):
    @property
    def oracle(self) -> Oracle: ...

    def start(self) -> list[asyncio.Future[Any]]:
        """Start the clients' work; the futures end when it is done."""
        ...

    def responsible(self, lid: int, eid: int, bookie: str) -> bool:
        """Whether the metadata, as it is now, gives ``eid`` to ``bookie`` (the oracle's
        NoNegativeForAckedEntry asks)."""
        ...

    async def check_end(self) -> None:
        """After healing: read every ledger back and check it."""
        ...

    def stop(self) -> None:
        """Stop every writer (the history is over)."""
        ...


async def create_with_retries(
    sim: Simulation, name: str, create: Callable[[], Awaitable[T]]
) -> T | None:
    """``create()`` a ledger, tried 5 times half a second apart (a metadata store or a
    cluster with too few bookies up fails some); None when every try failed."""
    for _ in range(5):
        try:
            return await create()
        except BKError as exc:
            sim.trace("create-failed", name, type(exc).__name__)
            await asyncio.sleep(0.5)
    return None


async def maybe_pause(sim: Simulation, who: str, lid: int) -> None:
    """The race scenarios' writer pauses (simraces.py): now and then a writer goes quiet
    between two adds while recoveries, takeovers and the nemesis act; most often right
    after the network held one of its adds up (that add lands meanwhile)."""
    races, rng = sim.races, sim.rng
    if races is None:
        return
    rate = races.pause_on_late if sim.nemesis.took_late(lid) else races.pause
    if rng.random() < rate:
        pause = rng.uniform(*PAUSE)
        if not sim.decide("pause", who, f"{pause:.6f}"):
            return
        sim.counts["writer.pause"] += 1
        sim.trace("pause", who, f"{pause:.6f}")
        await asyncio.sleep(pause)


async def aimed_ledger(sim: Simulation, who: str) -> int | None:
    """The race scenarios' aimed recoveries and takeovers (simraces.py): now and then one
    waits for the next add the network holds up and starts on its ledger at once, while
    that add is on its way, maybe blind to that add's bookie (``Simulation.blind``).
    None: not aimed (or no add was held up in time)."""
    races, rng = sim.races, sim.rng
    if races is None or rng.random() >= races.aim_recovery:
        return None
    lid = await sim.nemesis.late_add(AIM_RECOVERY_WAIT)
    sim.counts["recovery.aimed" if lid is not None else "recovery.aim_missed"] += 1
    if lid is not None:
        sim.nemesis.blind(who, lid)
    return lid


def task_error(task: asyncio.Future[Any]) -> str | None:
    """The traceback a finished task ended with, or None (done, or cancelled)."""
    if task.cancelled():
        return None
    exc = task.exception()
    if exc is None:
        return None
    return "".join(traceback.format_exception(exc))
