"""A test-only mutant of fencing: a recovery reads forward once as many bookies answered
its fence as one write set needs (WQ - AQ + 1), wherever they are in the ensemble, not
once every write set has them. A context manager patching this process."""

from __future__ import annotations

from collections.abc import Iterator, Set
from contextlib import contextmanager

from seed_search import patched

from embedlog.ledger import recovery
from embedlog.ledger.quorum import Decision, quorum_coverage


@contextmanager
def fence_counts_bookies_not_write_sets() -> Iterator[None]:
    decide = recovery.fencing_decision

    def mutant(e: int, wq: int, aq: int, positive: Set[int], unknown: Set[int]) -> Decision:
        if len(positive) >= quorum_coverage(wq, aq):
            return Decision.YES
        return decide(e, wq, aq, positive, unknown)

    with patched(recovery, "fencing_decision", mutant):
        yield
