"""The deterministic simulator: one seed, one history, on one thread in virtual time.

``run_seed(seed, scenario)`` boots real bookies (``embedlog.bookie.Bookie``) with
their real journals, write caches, entry logs and LevelDB indexes in a scratch
directory, and drives real clients (``LedgerWriter``, ``recover_ledger`` through
``Client.open_ledger_aio``, the reader) against them through ``SimNetwork``, all on
one ``VirtualClockLoop``. Everything that varies comes from the seed: the cluster's
settings, the workload, every message's delay and loss, every disk operation's
latency, when bookies crash or stop and when they come back. The trace (every
message, answer, fault and client outcome, stamped with virtual time) is hashed:
the same seed gives the same hash.

What is not simulated yet is listed in docs/simulation.md.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from embedlog.bookie.bookie import Bookie, BookieState
from embedlog.client import Client
from embedlog.ledger.placement import RandomPlacement
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.memory import MemoryMetadataStore
from embedlog.runtime import Runtime
from embedlog.testing.ackquorum import describe, entry_payload, missing_copies, storage_reader
from embedlog.testing.decisions import Decisions, format_suppress
from embedlog.testing.limits import Limits
from embedlog.testing.liveness import judge_at_limit, retrying_finish
from embedlog.testing.oracle_durable import DurableStateRule
from embedlog.testing.oracle_quorum import ledger_changes
from embedlog.testing.scenarios import DEFAULT_SCENARIO, SCENARIOS, UNSAFE, Scenario
from embedlog.testing.simbookies import SimBookies
from embedlog.testing.simbudget import FaultBudget
from embedlog.testing.simconfig import REQUEST_TIMEOUT, draw_config
from embedlog.testing.simcontext import SimContext
from embedlog.testing.simdisk import MemoryDisk
from embedlog.testing.simfaults import DiskNemesis
from embedlog.testing.simloop import LoopClock, VirtualClockLoop, seeded
from embedlog.testing.simmeta import (
    FaultyMetadataStore,
    MetadataFaults,
    MetaProfile,
    SimMetadataExecutor,
)
from embedlog.testing.simnemesis import Nemesis
from embedlog.testing.simnet import SimNetwork
from embedlog.testing.simraces import HOLD_DISPLACED_RATES, DisplacedWrites
from embedlog.testing.simtrace import SeedResult, Trace
from embedlog.testing.workload import DIGEST, Aims, Workload, judge_outcome
from embedlog.testing.workload_bounded import BoundedWorkload
from embedlog.testing.workload_unbounded import UnboundedWorkload
from embedlog.wire.entry import HEADER, Digester

WORKLOAD_LIMIT = 120.0  # virtual seconds the writers get before the cluster is healed
SETTLE_LIMIT = 10.0  # virtual seconds for BP-46 repair to finish once healed
REPAIR_BACKOFF_LIMIT = 31.0  # the longest pause between a repair's takeovers, and a bit


class SimRuntime(Runtime):
    """The Runtime a simulated Client holds: the simulation's own loop, no thread.

    Blocking calls refuse (``run`` from the loop thread raises): simulated code uses the
    ``*_aio`` methods.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:  # no thread of its own
        self.name = "sim"
        self.loop = loop
        self._closed_reason = None
        self._thread = threading.current_thread()

    def close(self, reason: str | None = None) -> None:
        self._closed_reason = reason or "the simulation is over"


# Where the bookies' directories are on their simulated disks (no real file is touched).
SIM_ROOT = Path("/embedlog-sim")


@contextmanager
def _quiet(enabled: bool) -> Iterator[None]:
    """The bookies' own warnings (boots, repairs) are the simulation's normal course."""
    logger = logging.getLogger("embedlog")
    before = logger.level
    if enabled:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(before)


# A history allocates millions of short-lived objects (handles, futures, frames): with
# the default first threshold (700) the collector runs thousands of times a seed, 3% of
# its instructions (callgrind), about 5% of its CPU time. Collections find only cyclic
# garbage, which no history depends on (a seed hashes alike in any worker, after any
# other seeds), so rarer ones change nothing but the cost.
GC_YOUNG_THRESHOLD = 10_000


@contextmanager
def _rarer_collections() -> Iterator[None]:
    before = gc.get_threshold()
    if before[0]:  # 0: collections are off, and stay off
        gc.set_threshold(max(before[0], GC_YOUNG_THRESHOLD), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def run_seed(
    seed: int,
    scenario: str = DEFAULT_SCENARIO,
    *,
    unsafe: str | None = None,
    keep_trace: bool = True,
    quiet: bool = True,
    limits: Limits | None = None,
    suppress: frozenset[int] = frozenset(),
) -> SeedResult:
    """Run one seeded history and check its invariants (``limits``: bounds on what the
    seed draws, limits.py; ``suppress``: numbered fault decisions left out, decisions.py)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; scenarios: {', '.join(SCENARIOS)}")
    if unsafe is not None and unsafe not in UNSAFE:
        raise ValueError(f"unknown unsafe switch {unsafe!r}; switches: {', '.join(UNSAFE)}")
    loop = VirtualClockLoop()
    root = SIM_ROOT
    sc = limits.apply(SCENARIOS[scenario]) if limits else SCENARIOS[scenario]
    sim = Simulation(seed, sc, unsafe, root, loop, keep_trace, suppress)
    try:
        with _quiet(quiet), _rarer_collections():
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(sim.run())
            finally:
                loop.run_until_complete(sim.shutdown())
                asyncio.set_event_loop(None)
    finally:
        loop.close()
    return SeedResult(
        seed=seed,
        scenario=scenario,
        unsafe=unsafe,
        violations=list(sim.oracle.violations),
        trace_hash=sim.trace.digest(),
        events=sim.trace.count,
        counts=sim.counts,
        virtual_seconds=loop.time(),
        trace=sim.trace.events,
        limits=str(limits or ""),
        suppress=format_suppress(suppress),
        decisions=sim.decide.carried(),
    )


def make_workload(ctx: SimContext, cluster: Simulation, aims: Aims) -> Workload:
    """The workload the scenario names (its ledgers: bounded or unbounded)."""
    if ctx.scenario.ledger_kind == "unbounded":
        return UnboundedWorkload(ctx, cluster, aims)
    return BoundedWorkload(ctx, cluster, aims)


class Simulation:
    """One seeded history: builds the cluster (its configuration drawn by simconfig.py,
    its bookies kept by simbookies.py) and the parts that act on it (the nemesis, the
    disk faults, the workload), and is their ``ClusterControl`` (simcontext.py)."""

    def __init__(
        self,
        seed: int,
        scenario: Scenario,
        unsafe: str | None,
        root: Path,
        loop: VirtualClockLoop,
        keep_trace: bool,
        suppress: frozenset[int] = frozenset(),
    ) -> None:
        self.seed = seed
        self.scenario = scenario
        self.root = root
        self._data_dirs: dict[str, Path] = {}  # root / bookie id: the oracle asks per answer
        self.loop = loop
        # Every client, bookie and metadata client reads the loop's virtual time.
        self.clock = LoopClock(loop)
        self.trace = Trace(loop, keep_trace)
        self.counts: Counter[str] = Counter()
        # Every fault (and leavable workload step) is a numbered decision: suppressible.
        self.decide = Decisions(loop.time, self.trace, self.counts, suppress)
        self.store = MemoryMetadataStore()
        # What the store holds, for the oracle; clients and bookies reach it through a
        # connection that is slow and fails (simmeta.py).
        self.truth = MetadataClient(self.store, clock=self.clock)
        self.metafaults = MetadataFaults(
            seeded(seed, "metadata"),
            MetaProfile.draw(seeded(seed, "metadata-config")),
            self.trace,
            self.counts,
            budget=scenario.meta_budget,
            decide=self.decide,
        )
        self.meta = MetadataClient(
            FaultyMetadataStore(self.store, self.metafaults), clock=self.clock
        )
        executor = SimMetadataExecutor(loop, self.metafaults)
        loop.set_default_executor(executor)
        # The clients' own choices (which bookies a stream's next fragment leaves out):
        # one generator for all, drawn in the order the history makes the choices.
        self._choices_rng = seeded(seed, "global")
        sc = scenario
        config = draw_config(seed, sc, unsafe, self.trace)
        self.bookie_settings = config.bookie_settings
        self.client_options = config.client_options
        self._context_options = config.context_options
        if config.metadata_delay is not None:
            delay = config.metadata_delay
            self.meta.delay = (lambda: delay) if delay else None
        self.ensemble, self.write_quorum = config.ensemble, config.write_quorum
        self.ack_quorum = config.ack_quorum
        profile = config.profile
        self.races = config.races
        self.budget = FaultBudget(
            max_down=max(1, sc.bookies - self.ensemble),
            lossy_bookies=sc.lossy_bookies,
            journal=self.bookie_settings["journal_write_data"],
        )
        # What the nemesis, the disk faults and the workload share (simcontext.py); they
        # act on the cluster through this Simulation's ClusterControl methods.
        self.ctx = SimContext(
            seed=seed,
            scenario=sc,
            clock=self.clock,
            rng=seeded(seed, "workload"),
            trace=self.trace,
            counts=self.counts,
            decide=self.decide,
            budget=self.budget,
            races=self.races,
            truth=self.truth,
            ensemble=self.ensemble,
            write_quorum=self.write_quorum,
            ack_quorum=self.ack_quorum,
            client_options=self.client_options,
        )
        # Each bookie's disks, for the whole history: they outlive its incarnations.
        self.disks: dict[str, MemoryDisk] = {}
        self.disk_faults = DiskNemesis(
            self.ctx,
            self,
            seeded(seed, "disk-faults"),
            self.disks,
            lambda bid, protected: self.oracle.forget_lost(bid, protected),
        )
        if self.races is not None:
            self.disk_faults.wipe_probability = self.races.wipe
        self._displaced: DisplacedWrites | None = None
        if self.races is not None and sc.ledger_kind == "unbounded":
            rng = seeded(seed, "displaced-writes")
            rate = rng.choice(HOLD_DISPLACED_RATES)
            self.trace("aim", "hold-displaced", rate)
            executor.hold = self._displaced = DisplacedWrites(
                self.truth, rng, rate, self.decide, self.trace, self.counts
            )
        self.nemesis = Nemesis(self.ctx, self, self.disk_faults, seed)
        self.workload: Workload = make_workload(self.ctx, self, self.nemesis)
        self.oracle = self.workload.oracle
        self.net = SimNetwork(
            self._serving,
            seeded(seed, "network"),
            self.oracle,
            self.trace,
            profile,
            watch=self.nemesis.watched if self.races is not None else None,
            decide=self.decide,
            spare=seeded(seed, "network-spared"),
            corrupting=seeded(seed, "network-corrupt"),
            aiming=seeded(seed, "change-aims"),
            loop=loop,
        )
        self.runtime = SimRuntime(loop)
        self.fleet = SimBookies(
            seed,
            loop,
            root,
            self.meta,
            self.clock,
            self.bookie_settings,
            self.disks,
            self.disk_faults,
            self.budget,
            self.trace,
            self.counts,
            self.oracle.violate,
            self.client,
        )
        self.oracle.durable = DurableStateRule(self._disk_of, self.oracle.violate, self.counts)
        self.watch_metadata(ledger_changes(self.truth, self.oracle), None)
        self._clients = 0
        self._healed = False
        self.trace(
            "seed",
            seed,
            sc.name,
            unsafe or "-",
            self.bookie_settings,
            f"E{self.ensemble}/WQ{self.write_quorum}/AQ{self.ack_quorum}",
            profile,
            *([self.races] if self.races is not None else []),
        )

    # -- clients -------------------------------------------------------------------------------

    def client(self, name: str) -> Client:
        self._clients += 1
        client = Client(
            self.runtime,
            self.meta,
            self.net,
            name=name,
            request_timeout=REQUEST_TIMEOUT,
            placement=RandomPlacement(seeded(self.seed, "placement", name, self._clients)),
            add_entry_quorum_timeout=10.0,
            clock=self.clock,
            rng=self._choices_rng,
            **self.client_options,
        )
        for setting, value in self._context_options.items():
            setattr(client.ctx, setting, value)
        return client

    # -- the bookies (simbookies.py) -------------------------------------------------------------

    def _serving(self, bookie_id: str) -> Bookie | None:
        return self.fleet.serving(bookie_id)

    def _disk_of(self, bookie_id: str) -> tuple[MemoryDisk, Path, Bookie] | None:
        """A serving bookie's disks, data directory and incarnation (oracle_durable.py).

        None while it is not serving: what a bookie answers as it stops is not judged.
        Its stop's final flush makes that state durable, and its disks may be replaced
        (a wipe) before the answer is seen (``unbounded-corrupt`` seed 754: a repair's
        TRIM answered after its bookie's stop and wipe was judged against the empty
        disk)."""
        bookie = self.fleet.bookies.get(bookie_id)
        if bookie is None or bookie.state is not BookieState.SERVING:
            return None
        data_dir = self._data_dirs.get(bookie_id)
        if data_dir is None:
            data_dir = self._data_dirs[bookie_id] = self.root / bookie_id
        return self.disks[bookie_id], data_dir, bookie

    async def boot(self, bid: str) -> bool:
        return await self.fleet.boot(bid)

    def crash(self, bid: str) -> None:
        self.fleet.crash(bid)

    async def stop(self, bid: str) -> None:
        await self.fleet.stop(bid)

    def down(self) -> list[str]:
        return self.fleet.down()

    def up(self) -> list[str]:
        return self.fleet.up()

    # -- the history ---------------------------------------------------------------------------

    async def run(self) -> None:
        for n in range(1, self.scenario.bookies + 1):
            await self.boot(f"bookie-{n}")
        work = self.workload.start()
        nemesis = asyncio.ensure_future(self.nemesis.run()) if self.scenario.crashes else None
        disk_nemesis = asyncio.ensure_future(self.disk_faults.run())
        expiries = asyncio.ensure_future(
            self.metafaults.expire_sessions(
                lambda: [b for b in self.up() if b in self.fleet.sessions],
                lambda: self.ctx.phase.workload_done,
                lambda b: self.fleet.sessions[b].expire(),  # type: ignore[attr-defined]
            )
        )
        _done, pending = await asyncio.wait(work, timeout=WORKLOAD_LIMIT)
        now = self.loop.time()
        judged = judge_at_limit(
            self.oracle, pending, lambda t: self.workload.retrying(t, now), WORKLOAD_LIMIT
        )
        if pending:
            self.counts["workload.retrying_at_limit"] += len(judged.retrying)
            self.trace("workload-limit", len(pending), "hung", len(judged.hung))
        for t in judged.hung:
            t.cancel()
        retrying = judged.retrying  # they go on: once the cluster is healed they finish
        # The nemesis ends after its current step, never inside one: a stop or a boot cut
        # short by a cancellation would be a fault of the simulator's own making.
        self.ctx.phase.workload_done = True
        await self.nemesis.strikes_done()
        rest = [
            *(t for t in work if t not in retrying),
            disk_nemesis,
            expiries,
            *(x for x in [nemesis] if x is not None),
        ]
        await asyncio.wait(rest)
        for t in rest:
            judge_outcome(self.oracle, t)
        await self.heal_and_check(retrying)
        self.counts.update(self.net.counts)

    # -- the rest of ClusterControl (simcontext.py) --------------------------------------------

    def serving(self, bid: str) -> bool:
        return self._serving(bid) is not None

    def writable(self, bid: str) -> bool:
        b = self._serving(bid)
        return b is not None and not b.readonly

    def may_take_down(self) -> bool:
        """Whether one more bookie may go down (the ensemble leaves a spare)."""
        return self.budget.may_take_down(len(self.down()))

    async def take_down(self, bid: str, *, wipe: bool) -> None:
        """Crash ``bid`` (stop it, beyond the lossy budget), and wipe its disks if asked
        and the budget allows (else maybe, as the nemesis does)."""
        if self.budget.may_lose(bid):
            self.crash(bid)
        else:
            await self.stop(bid)
        if not (wipe and self.disk_faults.wipe(bid)):
            self.disk_faults.after_down(bid)

    def blind(self, who: str, bookie: str, lid: int, what: str, until: float) -> None:
        self.net.blind(who, bookie, lid, what, until)

    def unblind(self, who: str, lid: int) -> None:
        self.net.unblind(who, lid)

    def lose_adds(self, who: str, bookie: str, lid: int, until: float) -> None:
        self.net.lose_adds(who, bookie, lid, until)

    def gate(self, bookie: str, lid: int, until: float) -> None:
        self.net.gate(bookie, lid, until)

    def hold_next(self, who: str, bookie: str, lid: int, delay: float) -> None:
        self.net.hold_next(who, bookie, lid, delay)

    def spare(self, who: str, lid: int, spared: bool) -> None:
        if spared:
            self.net.spared.add((who, lid))
        else:
            self.net.spared.discard((who, lid))

    def watch_metadata(
        self,
        on_write: Callable[[str, str], None],
        on_read: Callable[[str, str], None] | None,
    ) -> None:
        store = self.meta.store
        assert isinstance(store, FaultyMetadataStore)
        store.watch(on_write, on_read)

    async def next_stream_write(self, limit: float) -> int | None:
        if self._displaced is None:
            return None
        return await self._displaced.next_write(limit)

    async def heal_and_check(self, retrying: Sequence[asyncio.Future[Any]] = ()) -> None:
        """The end of every history: heal the network, bring every bookie back, let repair
        run, recover every ledger and read it back; the workload's tasks that were still
        retrying at its limit (``retrying``) finish then."""
        self.trace("heal")
        self._healed = True
        self.net.heal()
        await self.disk_faults.heal()
        self.metafaults.heal()
        for bid in self.down():
            await self.boot(bid)
        await self._settle_repairs(SETTLE_LIMIT)
        await self.workload.check_end()
        await retrying_finish(self.oracle, retrying)
        # A repair that must take a stream over backs off between failed takeovers (up to
        # 30 s, bookie/repair.py): once check_end settled every ledger, it gets that long
        # to copy what the bookie owes before invariant 4 counts copies.
        await self._settle_repairs(REPAIR_BACKOFF_LIMIT)
        self.check_ack_quorum_copies()
        self.workload.stop()

    async def _settle_repairs(self, limit: float) -> None:
        deadline = self.loop.time() + limit
        while self.loop.time() < deadline and not all(
            self.fleet.bookies[b].wait_repaired_nowait() for b in self.up()
        ):
            await asyncio.sleep(0.2)

    def check_ack_quorum_copies(self) -> None:
        """Invariant 4 (ackquorum.py), asking every bookie's storage directly: bounded
        ledgers and streams (above their trim point)."""
        skip = HEADER.size + Digester(DIGEST).digest_len
        stored = storage_reader(
            lambda b: self.fleet.bookies[b].storage if self._serving(b) else None,
            lambda data: entry_payload(data, skip),
        )
        # A ledger left unrecoverable by lossy bookies cannot be repaired either: what the
        # others lost stays lost until it is recovered.
        acked = {
            k: v
            for k, v in self.oracle.acked_entries().items()
            if not self.budget.is_unrecoverable(k)
        }
        short = missing_copies(acked, self.truth.read_ledger, stored, self.budget.lost_disks())
        self.counts["check.ack_quorum_entries"] += sum(map(len, acked.values()))
        if short:
            self.oracle.violate("AllCommittedEntriesReachAckQuorum", "; ".join(describe(short)))

    async def shutdown(self) -> None:
        """Release every bookie's files and end every task, whatever state the run ended in."""
        self.workload.stop()
        for bid, b in self.fleet.bookies.items():
            if b.state in (BookieState.SERVING, BookieState.BOOTING):
                self.fleet.retire(bid)
                for d in self.fleet.disk_threads[bid]:
                    d.lose_pending()
                b.crash()
        await self.net.close()
        me = asyncio.current_task()
        # In rounds: a task may start another as it ends (a rollover's ``finally`` starts an
        # ensemble change), a callback already queued may start one (an answer that lets
        # a writer roll over), and Python 3.11's wait_for can swallow a cancellation that
        # meets its inner wait completing; each would leave a task pending at close.
        for _round in range(100):
            tasks = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
            if not tasks:
                for _ in range(3):  # callbacks already queued may still start a task
                    await asyncio.sleep(0)
                tasks = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
            if not tasks:
                break
            for t in tasks:
                t.cancel()
            await asyncio.wait(tasks, timeout=1.0)
