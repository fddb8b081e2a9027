"""What a simulated history runs against the cluster: the workload of its scenario.

A workload starts the clients' work (``start``), is told when the workload's time is
up (``stop``), and, once the network is healed and every bookie is back, reads every
ledger back to check what it wrote (``check_end``). The bounded ledgers' workload is in
``workload_bounded``, the unbounded streams' in ``workload_unbounded``; ``sim.py`` picks
one by the scenario's ``ledger_kind``. A workload gets the simulation's context and its
cluster control (simcontext.py), and the nemesis's aims (``Aims``), never the
``Simulation``.
"""

from __future__ import annotations

import asyncio
import random
import traceback
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from attrs import frozen

from embedlog.errors import BKError
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.metadata.striping import write_set_bookies
from embedlog.testing.simcontext import ClusterControl, SimContext
from embedlog.testing.simraces import AIM_RECOVERY_WAIT, PAUSE
from embedlog.wire.entry import DigestType
from embedlog.wire.messages import OpCode

if TYPE_CHECKING:
    from embedlog.client import Client
    from embedlog.testing.oracle import Oracle
    from embedlog.testing.oracle_unbounded import StreamOracle
    from embedlog.unbounded.ledger import UnboundedLedger

T = TypeVar("T")

PASSWORD = b"sim"
DIGEST = DigestType.CRC32C


@frozen
class StreamsShared:
    """What each part of the streams' workload (its followers, consumers and deletes,
    producers) acts on and reports to, handed to it by the workload that composes it."""

    ctx: SimContext
    cluster: ClusterControl
    oracle: StreamOracle
    ledgers: list[int]  # the workload's streams, added to as they are created
    writers_done: Callable[[], bool]  # whether every stream's writers are done


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

    def retrying(self, task: asyncio.Future[Any], now: float) -> bool:
        """Whether ``task``, still running at the workload's limit, is a reader retrying
        reads the faults keep failing, each of them returned lately (a tail waits for
        the cluster by design), rather than an operation that never returned
        (``OperationsReturn``, sim.py)."""
        ...


class Aims(Protocol):
    """What the race scenarios' workloads ask of the nemesis (simnemesis.py)."""

    def took_late(self, lid: int) -> bool:
        """Whether an add to ``lid`` was held up since the last time this was asked."""
        ...

    async def late_add(self, limit: float) -> int | None:
        """The ledger of the next add the network holds up (None after ``limit`` s)."""
        ...

    def blind(self, who: str, lid: int) -> None:
        """An aimed recovery or takeover by ``who`` starts on ``lid``."""
        ...


async def create_with_retries(
    ctx: SimContext, name: str, create: Callable[[], Awaitable[T]]
) -> T | None:
    """``create()`` a ledger, tried 5 times half a second apart (a metadata store or a
    cluster with too few bookies up fails some); None when every try failed."""
    for _ in range(5):
        try:
            return await create()
        except BKError as exc:
            ctx.trace("create-failed", name, type(exc).__name__)
            await asyncio.sleep(0.5)
    return None


async def open_to_follow(
    ctx: SimContext,
    rng: random.Random,
    client: Client,
    name: str,
    ledgers: list[int],
    wait: tuple[float, float],
    failed: str,
) -> tuple[int, UnboundedLedger] | None:
    """After a pause drawn from ``wait``, one of ``ledgers`` opened to follow it
    (``takeover=False``: a follower's or a consumer's handle), with its id; None when there
    is no stream yet or the open failed (traced as ``failed``)."""
    await asyncio.sleep(rng.uniform(*wait))
    if not ledgers:
        return None
    lid = rng.choice(ledgers)
    try:
        return lid, await client.open_unbounded_aio(lid, password=PASSWORD, takeover=False)
    except BKError as exc:
        ctx.trace(failed, name, lid, type(exc).__name__)
        return None


async def maybe_pause(ctx: SimContext, aims: Aims, who: str, lid: int) -> None:
    """The race scenarios' writer pauses (simraces.py): now and then a writer goes quiet
    between two adds while recoveries, takeovers and the nemesis act; most often right
    after the network held one of its adds up (that add lands meanwhile)."""
    races, rng = ctx.races, ctx.rng
    if races is None:
        return
    rate = races.pause_on_late if aims.took_late(lid) else races.pause
    if rng.random() < rate:
        pause = rng.uniform(*PAUSE)
        if not ctx.decide("pause", who, f"{pause:.6f}"):
            return
        ctx.counts["writer.pause"] += 1
        ctx.trace("pause", who, f"{pause:.6f}")
        await asyncio.sleep(pause)


async def aimed_ledger(ctx: SimContext, aims: Aims, who: str) -> int | None:
    """The race scenarios' aimed recoveries and takeovers (simraces.py): now and then one
    waits for the next add the network holds up and starts on its ledger at once, while
    that add is on its way, maybe blind to that add's bookie (``Aims.blind``).
    None: not aimed (or no add was held up in time)."""
    races, rng = ctx.races, ctx.rng
    if races is None or rng.random() >= races.aim_recovery:
        return None
    lid = await aims.late_add(AIM_RECOVERY_WAIT)
    ctx.counts["recovery.aimed" if lid is not None else "recovery.aim_missed"] += 1
    if lid is not None:
        aims.blind(who, lid)
    return lid


def task_error(task: asyncio.Future[Any]) -> str | None:
    """The traceback a finished task ended with, or None (done, or cancelled)."""
    if task.cancelled():
        return None
    exc = task.exception()
    if exc is None:
        return None
    return "".join(traceback.format_exception(exc))


def judge_outcome(oracle: Oracle, task: asyncio.Future[Any]) -> None:
    """A finished task of the history's: no exception that is not a protocol outcome
    (``NoUnexpectedError``)."""
    detail = task_error(task)
    if detail is not None:
        oracle.violate("NoUnexpectedError", detail)


async def probe(
    ctx: SimContext, checker: Client, md: LedgerMetadata, entry_ids: Iterable[int]
) -> None:
    """The race scenarios' end probe (simraces.py): every bookie of each entry's write
    set in ``md`` is asked for it, so that a negative for an entry a bookie acknowledged
    (``NoNegativeForAckedEntry``) does not hide behind a reader that asked another; the
    oracle judges every answer as the bookie gives it."""
    lid = md.ledger_id

    async def ask(bookie: str, eid: int) -> None:
        try:
            await checker.ctx.bookies.call(bookie, OpCode.READ, lid, eid)
        except BKError:
            pass  # unknown: the oracle saw whatever the bookie answered

    asks = [
        ask(b, eid)
        for eid in entry_ids
        for b in write_set_bookies(eid, md.ensemble_for(eid), md.write_quorum)
    ]
    ctx.counts["probe.read"] += len(asks)
    await asyncio.gather(*asks)
