"""The replication protocol's quorum rules, as small pure functions.

Names follow BP-46: AQ ack quorum, WQ write quorum, QC quorum coverage
(WQ - AQ + 1: the cohort is one entry's write set), EC ensemble coverage
(E - AQ + 1: the cohort is a fragment's ensemble). A property held by QC (or
EC) members of the cohort is held by at least one member of every ack quorum.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence


def write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> list[int]:
    """Ensemble indexes that store ``entry_id``: WQ of them, round robin from entry mod E."""
    start = entry_id % ensemble_size
    return [(start + i) % ensemble_size for i in range(write_quorum)]


def write_set_bookies(entry_id: int, ensemble: Sequence[str], write_quorum: int) -> list[str]:
    return [ensemble[i] for i in write_set(entry_id, len(ensemble), write_quorum)]


def coverage(cohort_size: int, ack_quorum: int) -> int:
    """How many cohort members must hold a property so that no ack quorum lacks it."""
    return cohort_size - ack_quorum + 1


def quorum_coverage(write_quorum: int, ack_quorum: int) -> int:
    """QC: explicit negatives needed to call an entry unrecoverable."""
    return coverage(write_quorum, ack_quorum)


def ensemble_coverage(ensemble_size: int, ack_quorum: int) -> int:
    """EC: fenced bookies needed before recovery may read and write."""
    return coverage(ensemble_size, ack_quorum)


class Decision(enum.Enum):
    PENDING = "pending"  # wait for more answers
    YES = "yes"  # the threshold for the positive outcome was reached
    NO = "no"  # the threshold for the negative outcome was reached
    STUCK = "stuck"  # neither threshold can be reached any more: abort, retry later


def fencing_decision(ensemble_size: int, ack_quorum: int, fenced: int, unknown: int) -> Decision:
    """Fencing (LAC reads with the fence flag): done at EC; stuck once AQ bookies are unknown."""
    if fenced >= ensemble_coverage(ensemble_size, ack_quorum):
        return Decision.YES
    if fenced + (ensemble_size - fenced - unknown) < ensemble_coverage(ensemble_size, ack_quorum):
        return Decision.STUCK
    return Decision.PENDING


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
