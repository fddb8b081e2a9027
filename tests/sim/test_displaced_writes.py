"""The displaced-writes aim (simraces.DisplacedWrites) of the stream race scenarios: a
stream writer's metadata write that meets a takeover waits until the newer term opened,
so the writer loses its compare-and-swap to an open newer term. A writer that then
forgets to check it is still the writer (a test-only mutant: the rollover's
``check_still_ours`` left out) writes its fragment into that term's metadata, and the
simulator catches it at the seed pinned here; before the aim, 1,000 seeds of
``unbounded-races`` did not."""

from __future__ import annotations

from contextlib import AbstractContextManager

from seed_search import caught_then_clean, patched

from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.unbounded import writer

SCENARIO = "unbounded-races"
FIRST = 216  # the mutant's first violating seed (searched from 0 if it moved)
SEARCH = 1000


def rollover_keeps_a_lost_cas() -> AbstractContextManager[None]:
    """A rollover that lost its compare-and-swap takes the metadata it read again as its
    own, whatever term it is in."""

    def trusting(md: LedgerMetadata, term: int) -> None:
        return None

    return patched(writer, "check_still_ours", trusting)


def test_a_writer_that_writes_into_a_newer_terms_metadata_is_caught():
    caught_then_clean(
        rollover_keeps_a_lost_cas,
        SCENARIO,
        FIRST,
        SEARCH,
        "AckedByAckQuorum",
        "aim.hold_displaced.opened",
    )
