"""The add pipeline's phase, and the replacement under way, as values.

One table (``TRANSITIONS``, as h11's ``_state.py`` keeps every transition in one
place) says how an ensemble change moves the pipeline (pipeline.py) between sending
and completing freely (OPEN), holding new sends back (CHANGING) and holding
completions back too (REPLACING).
"""

from __future__ import annotations

import enum

from attrs import frozen

from embedlog.metadata.ledger_metadata import LedgerMetadata


class Phase(enum.Enum):
    OPEN = "open"  # adds are sent and complete
    # An ensemble change (or a stream's rollover, or the end of a takeover) is under way:
    # adds not sent yet wait for the fragment it makes.
    CHANGING = "changing"
    # A replacement fragment was chosen and is not committed yet: nothing completes
    # either, until the replaced bookies' acks are taken back.
    REPLACING = "replacing"


# Every change of phase, in one table (as h11's _state.py): (phase, event) -> next phase.
TRANSITIONS: dict[tuple[Phase, str], Phase] = {
    (Phase.OPEN, "begin_change"): Phase.CHANGING,
    (Phase.CHANGING, "replace"): Phase.REPLACING,
    (Phase.REPLACING, "replaced"): Phase.CHANGING,
    (Phase.CHANGING, "end_change"): Phase.OPEN,
}


class PhaseError(RuntimeError):
    """An event the pipeline's phase does not allow: a bug of the driver."""


@frozen
class Replacement:
    """A replacement under way: the failed bookies of ``ensemble`` (the last fragment of
    ``md`` when it was chosen) get a new fragment from ``first``."""

    md: LedgerMetadata
    ensemble: tuple[str, ...]
    failed: frozenset[str]
    first: int


@frozen
class Retry:
    """A retried bookie that must be readied (from ``cut``) before its entries are resent
    to it, as a member of the last fragment as it was (``first``, ``ensemble``)."""

    bookie: str
    cut: int
    first: int
    ensemble: tuple[str, ...]
