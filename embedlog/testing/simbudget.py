"""How much a simulated history may break before its invariants stop being provable.

A history must stay recoverable for its liveness checks to mean something: no more
bookies down at once than the ensemble leaves spare, and no more bookies that lost what
they acknowledged (wiped, or crashed without the journal) than the scenario allows.
The nemeses ask this budget before each fault, and record here what each fault cost.
It also remembers which bookies a nemesis step or a compound aim holds, so that two
of them never act on one bookie at once. No I/O: the simulation does the faults.
"""

from __future__ import annotations

from collections import Counter

from attrs import define, field

from embedlog.metadata.ledger_metadata import LedgerMetadata


@define
class FaultBudget:
    max_down: int  # bookies down at once, at most
    lossy_bookies: int  # bookies that may lose what they acknowledged, at most
    journal: bool  # adds are journaled: a crash loses nothing acknowledged
    _busy: set[str] = field(factory=set)  # held by a nemesis step or a compound aim
    _combo_held: set[str] = field(factory=set)  # held by a compound aim (simcombos.py)
    # Bookies that may have lost entries they acknowledged. Once AQ of one ensemble did,
    # BP-46 rightly leaves the ledger unrecoverable (an acknowledged entry may be gone
    # everywhere): no liveness then.
    _lossy: set[str] = field(factory=set)
    # Held for compound aims' wipes: bookie -> how many aims hold it.
    _reserved: Counter[str] = field(factory=Counter)
    _aborted: set[str] = field(factory=set)  # failed boots that left the unclean bit set
    _unrecoverable: set[int] = field(factory=set)  # ledgers exempt from liveness
    _going_down: set[str] = field(factory=set)  # serving, sure to go down (going_down)

    # -- who acts on a bookie -----------------------------------------------------------------

    def busy(self, bid: str, busy: bool, *, combo: bool = True) -> None:
        """Keep the nemeses (crashes, disk faults) and the strikes off ``bid`` (or let them
        at it again): a nemesis step or a compound aim (``combo``) holds it."""
        if busy:
            self._busy.add(bid)
            if combo:
                self._combo_held.add(bid)
        else:
            self._busy.discard(bid)
            if combo:
                self._combo_held.discard(bid)

    def is_busy(self, bid: str) -> bool:
        return bid in self._busy

    def held_by_combo(self, bid: str) -> bool:
        return bid in self._combo_held

    # -- what a fault may cost ----------------------------------------------------------------

    def may_take_down(self, down: int) -> bool:
        """Whether one more bookie may go down, ``down`` being down now (the ensemble
        leaves a spare)."""
        return down + len(self._going_down) < self.max_down

    def going_down(self, bid: str, going: bool) -> None:
        """``bid`` serves on but is sure to go down (a rot under a serving bookie, which
        then crashes): it counts as down for ``may_take_down`` until it is."""
        if going:
            self._going_down.add(bid)
        else:
            self._going_down.discard(bid)

    def may_wipe(self, bid: str) -> bool:
        """Whether ``bid`` may lose its disks within the lossy budget."""
        if bid in self._lossy or bid in self._reserved:
            return True
        return len(self._lossy | self._reserved.keys()) < self.lossy_bookies

    def may_lose(self, bid: str) -> bool:
        """Whether ``bid`` may crash: without the journal a crash loses what it acknowledged."""
        return self.journal or self.may_wipe(bid)

    def reserve_lossy(self, bid: str) -> None:
        """Hold the lossy budget for ``bid`` until ``release_lossy``: a compound aim is
        about to wipe it, and a crash elsewhere meanwhile would spend the budget."""
        self._reserved[bid] += 1

    def release_lossy(self, bid: str) -> None:
        """One ``reserve_lossy`` hold for ``bid`` ends (other aims' holds stay)."""
        self._reserved[bid] -= 1
        if self._reserved[bid] <= 0:
            del self._reserved[bid]

    # -- what faults cost ---------------------------------------------------------------------

    def lost_data(self, bid: str) -> None:
        """``bid`` may have lost what it acknowledged (wiped, or a disk fault without the
        journal): it counts against the lossy budget, and for liveness and invariant 4."""
        self._lossy.add(bid)

    def boot_aborted(self, bid: str) -> None:
        """``bid``'s boot failed and left its unclean bit set (journal off): its next boot
        protects its ledgers as after a crash, though it lost nothing; for liveness it
        counts as lossy."""
        self._aborted.add(bid)

    def lost_disks(self) -> set[str]:
        """Bookies that lost what their disks held: wiped, or crashed without the journal."""
        return set(self._lossy)

    def lossy_fragments(self, md: LedgerMetadata) -> list[tuple[str, ...]]:
        """The ensembles of ``md`` in which AQ bookies lost what they acknowledged (crashed
        without the journal, wiped, or a boot abandoned after its unclean bit): an
        acknowledged entry may be gone everywhere, so liveness is not checked there."""
        limbo = self._lossy | self._aborted
        return [e for _, e in md.fragments if len(limbo & set(e)) >= md.ack_quorum]

    def unrecoverable(self, lid: int) -> None:
        """``lid`` was left unrecoverable by lossy bookies: exempt from invariant 4 too."""
        self._unrecoverable.add(lid)

    def is_unrecoverable(self, lid: int) -> bool:
        return lid in self._unrecoverable
