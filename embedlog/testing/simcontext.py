"""What the simulator's parts share, and what they may do to the cluster.

The nemesis (simnemesis.py), the disk faults (simfaults.py), the compound aims
(simcombos.py) and the workloads (workload*.py) each get a ``SimContext`` (the seed's
settings and randomness, the trace, the counters, the fault budget, the virtual clock)
and a ``ClusterControl``: the few things they may do to the cluster (boot, crash or stop
a bookie, blind or hold up part of the network, start a client) and ask of it. Neither
is the ``Simulation`` (sim.py), which implements ``ClusterControl`` and builds the
parts: they never import it, and it is the only module that knows them all.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from attrs import define, field, frozen

from embedlog.client import Client
from embedlog.metadata.client import MetadataClient
from embedlog.testing.decisions import Decisions
from embedlog.testing.scenarios import Scenario
from embedlog.testing.simbudget import FaultBudget
from embedlog.testing.simloop import LoopClock, seeded
from embedlog.testing.simraces import RaceProfile
from embedlog.testing.simtrace import Trace


@define
class Phase:
    """Where the history is: the workload's time is up once ``workload_done``."""

    workload_done: bool = False


@frozen
class SimContext:
    seed: int
    scenario: Scenario
    clock: LoopClock  # virtual time (the loop's)
    rng: random.Random  # the workload's draws
    trace: Trace
    counts: Counter[str]
    decide: Decisions  # every fault is a numbered decision (decisions.py)
    budget: FaultBudget
    races: RaceProfile | None  # the race scenarios' aimed faults (simraces.py)
    truth: MetadataClient  # the metadata as stored, for the oracle (no faults)
    # The ledgers' shape: ensemble, write quorum, ack quorum.
    ensemble: int
    write_quorum: int
    ack_quorum: int
    client_options: Mapping[str, Any]  # what an unsafe switch sets on every Client
    phase: Phase = field(factory=Phase)
    _combo_rngs: dict[str, random.Random] = field(factory=dict)

    def combo_rng(self, what: str) -> random.Random:
        """The compound aim ``what``'s own stream of the seed's randomness (simcombos.py)."""
        rng = self._combo_rngs.get(what)
        if rng is None:
            rng = self._combo_rngs[what] = seeded(self.seed, "combo", what)
        return rng


class ClusterControl(Protocol):
    """What the simulator's parts may do to the simulated cluster, and ask of it."""

    # -- bookies ---------------------------------------------------------------------------

    def up(self) -> list[str]:
        """The bookies serving now, by id."""
        ...

    def down(self) -> list[str]:
        """The bookies not serving now (crashed, stopped, or a boot failed), by id."""
        ...

    def serving(self, bid: str) -> bool: ...

    def writable(self, bid: str) -> bool:
        """Serving, and not read-only (a disk fault makes a bookie read-only)."""
        ...

    def may_take_down(self) -> bool:
        """Whether one more bookie may go down (the ensemble leaves a spare)."""
        ...

    async def boot(self, bid: str) -> bool:
        """Start ``bid`` (again); whether it serves."""
        ...

    def crash(self, bid: str) -> None:
        """A power cut: what ``bid`` had not written to its disks is lost."""
        ...

    async def stop(self, bid: str) -> None:
        """A clean stop of ``bid``."""
        ...

    async def take_down(self, bid: str, *, wipe: bool) -> None:
        """Crash ``bid`` (stop it, beyond the lossy budget), wiping its disks if asked."""
        ...

    # -- the network -----------------------------------------------------------------------

    def blind(self, who: str, bookie: str, lid: int, what: str, until: float) -> None:
        """``who``'s requests about ``lid`` to ``bookie`` (``what``: "fence", "all") or
        to the others ("others") are lost until ``until`` (simnet.py)."""
        ...

    def unblind(self, who: str, lid: int) -> None: ...

    def lose_adds(self, who: str, bookie: str, lid: int, until: float) -> None:
        """Until virtual time ``until``, ``who``'s adds for ``lid`` to ``bookie`` are lost
        (its fences and reads go through); a time passed ends it now."""
        ...

    def gate(self, bookie: str, lid: int, until: float) -> None:
        """``bookie`` takes no fence of ``lid`` until ``until``."""
        ...

    def hold_next(self, who: str, bookie: str, lid: int, delay: float) -> None:
        """``who``'s next add of ``lid`` reaches ``bookie`` ``delay`` seconds late."""
        ...

    def spare(self, who: str, lid: int, spared: bool) -> None:
        """Whether the network's random faults leave ``who``'s requests about ``lid`` alone."""
        ...

    # -- clients and the metadata store ----------------------------------------------------

    def client(self, name: str) -> Client:
        """A new client of the cluster, named ``name`` in the trace."""
        ...

    def watch_metadata(
        self, on_write: Callable[[str, str], None], on_read: Callable[[str, str], None]
    ) -> None:
        """Called with (operation, path) at each write and read the store serves."""
        ...

    async def next_stream_write(self, limit: float) -> int | None:
        """The race scenarios' takeovers aimed at a stream writer's metadata write
        (simraces.DisplacedWrites.next_write); None when not aimed."""
        ...
