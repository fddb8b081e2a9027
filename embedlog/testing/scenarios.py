"""What a simulated history may contain (scenarios) and the unsafe switches it must catch.

A scenario bounds what the seed draws: the cluster, the workload and the faults. An
unsafe switch restores one known-unsafe behaviour of the real code (a test-only
setting of the bookie or of the client); the simulator must find a violation with it.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
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
    # Each metadata operation waits one of these (seconds, drawn per seed): a slow store
    # widens the windows of compare-and-swaps (ensemble changes, takeovers, trims).
    metadata_delay: tuple[float, ...] = (0.0,)
    ledger_kind: str = "bounded"  # "unbounded": streams (workload_unbounded.py)
    # Unbounded streams: takeovers by other clients, trims, followers tailing; min..max.
    takeovers: tuple[int, int] = (0, 0)
    trims: tuple[int, int] = (0, 0)
    followers: tuple[int, int] = (0, 0)
    # Bounded ledgers: readers following a ledger as it is written (recover=False).
    tailers: tuple[int, int] = (0, 0)
    # Faults aimed at protocol moments, with rates drawn per seed (simraces.py).
    races: bool = False
    # The stream layer (workload_streams.py): streams created with retention, consumers
    # committing cursors, deletes of streams still written; min..max of each.
    committers: tuple[int, int] = (0, 0)
    deletes: tuple[int, int] = (0, 0)
    retention: bool = False
    # Per-answer probability (min..max, drawn per seed) that an answer carrying entries
    # has a bit flipped on the wire (simnet.py): digests must catch it on every read path.
    corrupt: tuple[float, float] = (0.0, 0.0)
    # How likely the files of a bookie that crashed without the journal rot while it is
    # down (one drawn per seed; empty: never): simrot.py.
    rot: tuple[float, ...] = ()
    # How likely an add that times out (an ensemble change starts) is followed by late
    # answers to its client, and by a reset of another of its connections (one drawn per
    # seed; empty: never): simchanges.py.
    change_aims: tuple[float, ...] = ()
    # Producers appending by msg_id, each append retried through takeovers (up to 6
    # attempts, while the streams' writers write: workload_dedup.py); min..max. With
    # any, every append of the workload is a record.
    producers: tuple[int, int] = (0, 0)


RACES = "; faults aimed at protocol moments (simraces.py)"

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
        Scenario(
            "unbounded",
            "unbounded streams, journal on: pipelined appends, rollovers, concurrent "
            "takeovers by other clients, trims, followers tailing, crashes, a lossy network",
            ledgers=(1, 2),
            entries=(5, 40),
            ledger_kind="unbounded",
            metadata_delay=(0.0, 0.002, 0.02),
            takeovers=(1, 3),
            trims=(0, 2),
            followers=(0, 2),
        ),
        Scenario(
            "unbounded-nojournal",
            "the same without the journal (BP-46): a crash loses what the bookie acknowledged; "
            "repair takes the stream over before limbo ends",
            ledgers=(1, 2),
            entries=(5, 40),
            journal="off",
            ledger_kind="unbounded",
            metadata_delay=(0.0, 0.002, 0.02),
            takeovers=(1, 3),
            trims=(0, 2),
            followers=(0, 2),
        ),
    )
}
# Each everyday scenario once more with the faults aimed at protocol moments
# (simraces.py): the interleavings that need several coincidences (most unsafe switches'
# races) come within a few hundred seeds instead of tens of thousands.
SCENARIOS.update(
    (
        f"{s.name}-races",
        attrs.evolve(s, name=f"{s.name}-races", summary=s.summary + RACES, races=True),
    )
    for s in list(SCENARIOS.values())
)

# Readers of open bounded ledgers (no race twin of its own: it is one): what a reader
# that does not recover is handed while the writer, recoveries and the races go on.
SCENARIOS["bounded-tailing"] = attrs.evolve(
    SCENARIOS["bounded-nojournal-races"],
    name="bounded-tailing",
    summary="bounded ledgers without the journal, with readers following them as they are "
    "written (open_ledger(recover=False): up to the LAC the bookies report, then to the "
    "close)" + RACES,
    tailers=(1, 3),
)

# The stream layer's own scenario (no race twin): retention, cursors and deletes on top
# of the streams' workload; manual trims are left out, so that every trim is retention's.
SCENARIOS["unbounded-streams"] = attrs.evolve(
    SCENARIOS["unbounded"],
    name="unbounded-streams",
    summary="unbounded streams with retention (small fragments), consumers committing "
    "cursors, and deletes of streams while they are written and committed to",
    entries=(10, 60),
    loss=(0.0, 0.04),
    trims=(0, 0),
    takeovers=(0, 2),
    committers=(1, 3),
    deletes=(0, 1),
    retention=True,
)

# Corruption on the wire and at rest: the journal-off scenarios (whose BP-46 repair reads
# too) with answers carrying entries that sometimes arrive with a bit flipped, and the
# entry logs and journal of crashed bookies rotting while they are down.
CORRUPT = (
    "; a bit flipped now and then in answers carrying entries (simnet.py) and in the "
    "files of crashed bookies (simrot.py); late answers and connection resets aimed at "
    "ensemble changes (simchanges.py)"
)
SCENARIOS.update(
    (
        f"{base}-corrupt",
        attrs.evolve(
            SCENARIOS[f"{base}-nojournal"],
            name=f"{base}-corrupt",
            summary=f"{base}-nojournal's histories" + CORRUPT,
            corrupt=(0.01, 0.1),
            rot=(0.2, 0.5, 0.9),
            change_aims=(0.3, 0.6, 0.9),
        ),
    )
    for base in ("bounded", "unbounded")
)

# Idempotent appends: producers retrying by msg_id while takeovers displace the writers
# they append through (no race twin: the takeovers are the race).
SCENARIOS["unbounded-dedup"] = attrs.evolve(
    SCENARIOS["unbounded"],
    name="unbounded-dedup",
    summary="unbounded streams with producers appending by msg_id, each append retried "
    "through the writer of the moment or a takeover of their own (workload_dedup.py): "
    "every message stored at most once, an acknowledged one where acknowledged",
    producers=(1, 3),
)
DEFAULT_SCENARIO = "bounded"


@frozen
class UnsafeSwitch:
    name: str
    summary: str
    scenario: str  # the scenario that exposes it
    bookie: Mapping[str, bool] = field(factory=dict)  # BookieConfig settings
    client: Mapping[str, bool] = field(factory=dict)  # Client options
    context: Mapping[str, bool] = field(factory=dict)  # ClientContext test-only settings


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
            "bounded-nojournal-races",
            bookie={"unsafe_skip_fence_on_boot": True},
        ),
        UnsafeSwitch(
            "recovery-reads-without-fence",
            "recovery reads without the fence flag (the TLA+ model's Defect 1)",
            "bounded-nojournal-races",
            client={"unsafe_recovery_reads_without_fence": True},
        ),
        UnsafeSwitch(
            "ack-from-replaced-bookie",
            "an ensemble change keeps the replaced bookies' acks of the entries it moves "
            "(an entry is acknowledged with fewer than AQ copies in its write set)",
            "bounded",
            context={"unsafe_ack_from_replaced_bookie": True},
        ),
        UnsafeSwitch(
            "recovery-from-minus-one",
            "recovery reads forward from -1 instead of the last fragment (Defect 2)",
            "bounded",
            client={"unsafe_recovery_from_minus_one": True},
        ),
        UnsafeSwitch(
            "no-truncate-noop",
            "a takeover writes no truncate no-op: older terms' entries above the recovered "
            "end stay (unsafe_takeover_without_noop)",
            "unbounded",
            client={"unsafe_takeover_without_noop": True},
        ),
        UnsafeSwitch(
            "unknown-as-negative",
            "recovery reads a timeout or an error answer as 'entry absent' "
            "(unsafe_unknown_as_negative)",
            "bounded",
            context={"unsafe_unknown_as_negative": True},
        ),
        UnsafeSwitch(
            "dirty-entries-outside-noop-write-set",
            "E > WQ: a takeover leaves the bookies of the last fragment outside its no-op's "
            "write set uncleared (issue #12 race 1: unsafe_skip_clear_last_fragment)",
            "unbounded-races",
            context={"unsafe_skip_clear_last_fragment": True},
        ),
        UnsafeSwitch(
            "ack-during-replacement",
            "entries complete during an ensemble change with acks of the bookie being "
            "replaced (issue #12 race 3: unsafe_ack_during_replacement)",
            "unbounded",
            context={"unsafe_ack_during_replacement": True},
        ),
        UnsafeSwitch(
            "limbo-clears-at-first-resend",
            "journal off: a rebooted bookie's repair of an open stream clears limbo up to the "
            "first add after the boot, which a resend of an older entry does not bound "
            "(issue #12 race 2: unsafe_limbo_clears_at_first_resend)",
            "unbounded-nojournal-races",
            bookie={"unsafe_limbo_clears_at_first_resend": True},
        ),
        UnsafeSwitch(
            "forget-deletions",
            "bookies keep no tombstone of a deleted ledger: adds sent after the delete "
            "are accepted again (issue #27 item 2: unsafe_forget_deletions)",
            "unbounded-streams",
            bookie={"unsafe_forget_deletions": True},
        ),
        UnsafeSwitch(
            "recovery-ignores-term",
            "recovery ignores the terms entries carry, so an aborted takeover's no-op "
            "leaves a hole (issue #12: unsafe_recovery_ignores_term)",
            "unbounded",
            context={"unsafe_recovery_ignores_term": True},
        ),
    )
}


def choices(names: Mapping[str, object]) -> str:
    return ", ".join(sorted(names))
