"""How one kind of writer counts and replaces: the add pipeline's policy.

The add pipeline (pipeline.py) holds one. A bounded ledger's writer follows
BookKeeper (``BoundedPolicy``): every EOK counts, AQ acks complete an entry, a
replacement fragment starts at the first unacknowledged entry. A stream's term writer
follows the guaranteed-write-quorum model instead (``embedlog.unbounded.policy``):
answers of another term are discarded, an entry is tracked until its whole write set
has it (the LAFR), replacements start above the LAFR and never take a bookie whose ack
still counts for an acknowledged entry (pinned).

A policy holds state only about its own rule (the stream's LAFR and the entries it
still tracks); it never performs I/O and never reads the time (the pipeline passes
``now`` where a rule needs it).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable
from typing import Protocol

from embedlog.errors import BKError
from embedlog.ledger.pending import PendingAdd
from embedlog.metadata.ledger_metadata import LedgerMetadata


class Hold(enum.Enum):
    """Whether the next waiting entry may be sent."""

    SEND = "send"
    WAIT = "wait"  # not yet (a new fragment is on its way)
    ROLL = "roll"  # start a new fragment at this entry first


class AddPolicy(Protocol):
    # True when acks of settled entries matter (they move the stream's LAFR): the
    # pipeline then calls ``acked_settled`` and ``acknowledged``; False lets its hot
    # loops count acks inline.
    tracks_settled: bool

    def counts(self, term: int) -> bool:
        """Whether an EOK answer carrying ``term`` counts as an ack."""
        ...

    def needed_acks(self, md: LedgerMetadata) -> int:
        """Acks of its write set that complete an entry."""
        ...

    def acked_settled(self, p: PendingAdd, md: LedgerMetadata, frozen: bool) -> None:
        """An ack of ``p`` arrived after it was acknowledged to its caller (``frozen``: a
        replacement is in flight, see ``progressed``)."""
        ...

    def acknowledged(self, p: PendingAdd) -> None:
        """``p`` was just acknowledged to its caller."""
        ...

    def progressed(self, md: LedgerMetadata, frozen: bool) -> None:
        """Entries were acknowledged, or a replacement ended; ``frozen``: a replacement is
        in flight, and an ack counted now may be from a bookie the new fragment drops."""
        ...

    def fragment_start(self, pending: deque[PendingAdd], next_entry_id: int) -> int:
        """The first entry of a replacement fragment."""
        ...

    def unconfirmed(self, pending: deque[PendingAdd]) -> Iterable[PendingAdd]:
        """Entries whose bytes are kept because some bookie may still need them, in order."""
        ...

    def pinned(self, idx: int, first: int) -> bool:
        """Whether slot ``idx`` must not be replaced from ``first`` on yet."""
        ...

    def avoid(self, now: float) -> set[str]:
        """Bookies not to pick as replacements, beyond those retried after a pause."""
        ...

    def never_replacements(self) -> frozenset[str]:
        """Bookies never to pick as replacements, beyond the ensemble itself."""
        ...

    def suspect(self, bookie: str, now: float) -> None:
        """``bookie`` failed this writer at ``now`` (an add, or readying it)."""
        ...

    def hold(self, p: PendingAdd, md: LedgerMetadata) -> Hold:
        """Whether the next waiting entry ``p`` may be sent now (a stream's full fragment
        rolls over first)."""
        ...

    def lafr_for_adds(self) -> int:
        """The last add fully replicated, sent with every add (-1: not tracked)."""
        ...

    def error_for(self, error: BKError) -> BKError:
        """The error the writer's adds fail with when it fails with ``error``."""
        ...


class BoundedPolicy:
    """BookKeeper's rules: every EOK counts, AQ acks complete an entry, a replacement
    fragment starts at the first entry not acknowledged (LAC + 1)."""

    tracks_settled = False

    def counts(self, term: int) -> bool:
        return True

    def needed_acks(self, md: LedgerMetadata) -> int:
        return md.ack_quorum

    def acked_settled(self, p: PendingAdd, md: LedgerMetadata, frozen: bool) -> None:
        pass  # an entry already acknowledged needs nothing more

    def acknowledged(self, p: PendingAdd) -> None:
        pass

    def progressed(self, md: LedgerMetadata, frozen: bool) -> None:
        pass

    def fragment_start(self, pending: deque[PendingAdd], next_entry_id: int) -> int:
        # Everything below keeps the fragment it was written in.
        return pending[0].entry_id if pending else next_entry_id

    def unconfirmed(self, pending: deque[PendingAdd]) -> Iterable[PendingAdd]:
        return pending

    def pinned(self, idx: int, first: int) -> bool:
        return False

    def avoid(self, now: float) -> set[str]:
        return set()

    def never_replacements(self) -> frozenset[str]:
        return frozenset()

    def suspect(self, bookie: str, now: float) -> None:
        pass

    def hold(self, p: PendingAdd, md: LedgerMetadata) -> Hold:
        return Hold.SEND

    def lafr_for_adds(self) -> int:
        return -1

    def error_for(self, error: BKError) -> BKError:
        return error
