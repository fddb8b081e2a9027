"""The replication protocol's quorum rules, as small pure functions.

Names follow BP-46: AQ ack quorum, WQ write quorum, QC quorum coverage
(WQ - AQ + 1: the cohort is one entry's write set). A property held by QC
members of the cohort is held by at least one member of every ack quorum in it.

Fencing asks for QC in every write set of the fragment, as replication-protocol.md
and BookKeeper (``RoundRobinDistributionSchedule.RRQuorumCoverageSet``) do, not for
ensemble coverage (E - AQ + 1 over the whole ensemble, the TLA+ model's simpler
rule): an add is acknowledged by AQ bookies of its own write set, so ack quorums
that straddle two write sets never acknowledge anything. The two rules agree when
E == WQ; with E > WQ the per-write-set rule fences with fewer bookies up. Which bookies
store an entry (its write set) is embedlog/metadata/striping.py's rule.
"""

from __future__ import annotations

import enum
from collections.abc import Set

from embedlog.metadata.striping import write_set


def coverage(cohort_size: int, ack_quorum: int) -> int:
    """How many cohort members must hold a property so that no ack quorum lacks it."""
    return cohort_size - ack_quorum + 1


def quorum_coverage(write_quorum: int, ack_quorum: int) -> int:
    """QC: explicit negatives needed to call an entry unrecoverable."""
    return coverage(write_quorum, ack_quorum)


class Decision(enum.Enum):
    PENDING = "pending"  # wait for more answers
    YES = "yes"  # the threshold for the positive outcome was reached
    NO = "no"  # the threshold for the negative outcome was reached
    STUCK = "stuck"  # neither threshold can be reached any more: abort, retry later


def fencing_decision(
    ensemble_size: int,
    write_quorum: int,
    ack_quorum: int,
    positive: Set[int],
    unknown: Set[int],
) -> Decision:
    """Fencing (LAC reads with the fence flag, or the takeover's term raise) of one fragment.

    ``positive`` and ``unknown`` are disjoint sets of ensemble indexes; the rest have not
    answered yet. YES once each of the E write sets has QC positives: then none holds an
    ack quorum of bookies that would still accept the old writer's adds. STUCK once AQ
    bookies of some write set are unknown: it can no longer reach QC, and those AQ may
    still acknowledge the old writer's adds.
    """
    need = quorum_coverage(write_quorum, ack_quorum)
    covered = True
    for first in range(ensemble_size):
        ws = write_set(first, ensemble_size, write_quorum)
        if write_quorum - sum(1 for i in ws if i in unknown) < need:
            return Decision.STUCK
        if sum(1 for i in ws if i in positive) < need:
            covered = False
    return Decision.YES if covered else Decision.PENDING


def recovery_read_decision(
    write_quorum: int, ack_quorum: int, positive: int, negative: int, unknown: int
) -> Decision:
    """One entry during recovery: generous on positive, strict on close.

    YES (recoverable) on the first positive; NO (unrecoverable, close before it)
    only when QC bookies of the write set answered an explicit negative; STUCK
    when every bookie answered (or can no longer change the result) and neither
    was reached. Timeouts, errors and EUNKNOWN count as unknown, never negative.
    """
    if positive >= 1:
        return Decision.YES
    if negative >= quorum_coverage(write_quorum, ack_quorum):
        return Decision.NO
    if positive + negative + unknown >= write_quorum:
        return Decision.STUCK
    return Decision.PENDING
