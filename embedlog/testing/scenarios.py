"""What a simulated history may contain (scenarios) and the unsafe switches it must catch.

A scenario bounds what the seed draws: the cluster, the workload and the faults. An
unsafe switch restores one known-unsafe behaviour of the real code (a test-only
setting of the bookie or of the client); the simulator must find a violation with it.
"""

from __future__ import annotations

from collections.abc import Mapping

from attrs import field, frozen


@frozen
class Scenario:
    name: str
    summary: str
    bookies: int = 5
    ledgers: tuple[int, int] = (1, 3)  # bounded ledgers written at once, min..max
    entries: tuple[int, int] = (5, 60)  # entries each writer adds, min..max
    journal: str = "on"  # "on": adds journaled; "off": BP-46, acked from the write cache
    recoveries: tuple[int, int] = (0, 3)  # recoveries by other clients, concurrent with writes
    crashes: bool = True  # bookie crashes and clean stops, each followed by a restart
    # Journal off: how many distinct bookies may crash (each may lose entries it acked).
    # Up to AQ - 1, every ledger must stay recoverable, so liveness is checked too.
    lossy_bookies: int = 1
    loss: tuple[float, float] = (0.0, 0.08)  # per-message loss probability, min..max
    spikes: tuple[float, float] = (0.0, 0.1)  # per-message long-delay probability
    fault_budget: int | None = None  # nemesis steps before it stops (None: no bound)
    meta_budget: int | None = None  # injected metadata faults at most (None: no bound)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "bounded",
            "bounded ledgers, journal on: pipelined writers, concurrent recoveries, "
            "crashes and clean restarts, a lossy network",
        ),
        Scenario(
            "bounded-nojournal",
            "the same without the journal (BP-46): crashes lose acknowledged entries on "
            "that bookie; fencing on boot, limbo and repair must keep them",
            journal="off",
        ),
    )
}

DEFAULT_SCENARIO = "bounded"


@frozen
class UnsafeSwitch:
    name: str
    summary: str
    scenario: str  # the scenario that exposes it
    bookie: Mapping[str, bool] = field(factory=dict)  # BookieConfig settings
    client: Mapping[str, bool] = field(factory=dict)  # Client options


UNSAFE: dict[str, UnsafeSwitch] = {
    u.name: u
    for u in (
        UnsafeSwitch(
            "no-limbo",
            "a bookie that lost acknowledged entries answers NoSuchEntry for them (BP-46 "
            "limbo off: unsafe_skip_limbo)",
            "bounded-nojournal",
            bookie={"unsafe_skip_limbo": True},
        ),
        UnsafeSwitch(
            "no-fence-on-boot",
            "a suspicious boot does not fence its ledgers (unsafe_skip_fence_on_boot)",
            "bounded-nojournal",
            bookie={"unsafe_skip_fence_on_boot": True},
        ),
        UnsafeSwitch(
            "recovery-reads-without-fence",
            "recovery reads without the fence flag (the TLA+ model's Defect 1)",
            "bounded",
            client={"unsafe_recovery_reads_without_fence": True},
        ),
        UnsafeSwitch(
            "ack-from-replaced-bookie",
            "an ensemble change keeps the replaced bookies' acks of the entries it moves "
            "(an entry is acknowledged with fewer than AQ copies in its write set)",
            "bounded",
            client={"unsafe_ack_from_replaced_bookie": True},
        ),
        UnsafeSwitch(
            "recovery-from-minus-one",
            "recovery reads forward from -1 instead of the last fragment (Defect 2)",
            "bounded",
            client={"unsafe_recovery_from_minus_one": True},
        ),
    )
}


def choices(names: Mapping[str, object]) -> str:
    return ", ".join(sorted(names))
