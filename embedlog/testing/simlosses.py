"""Whether a simulated bookie may have lost entries it acknowledged, from the history.

The oracle judges what a bookie acknowledged before a boot anew (``Oracle.forget_lost``)
only when the history did something to it since its last successful boot that may have
cost it those entries (``may_lose_acked``). The bookie's own verdict on its boot (its
BP-46 suspicion: embedlog/bookie/integrity.py) never decides it: a bookie that wrongly
thinks it lost data must not excuse the data it does lose. The disk faults
(simfaults.py) and the bookies' crashes, stops and boots (simbookies.py) tell a
``LossRecord`` what happened; ``DiskNemesis.booted`` asks it. No I/O.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

from attrs import define, field

# What the history did to a bookie that may bear on what it still holds.
DiskEvent = Literal["wipe", "rot", "crash", "unclean-stop", "boot-failed-on-disk"]


def may_lose_acked(event: DiskEvent, *, journal: bool) -> bool:
    """Whether ``event`` may cost a bookie entries it acknowledged (``journal``: adds are
    journaled).

    Wiped disks and rot lose them whatever the configuration. Without the journal, so do
    a crash (the write cache is gone), a clean stop whose final flush failed (the same,
    and its unclean bit stays set), and a boot that a disk fault made fail (its closing
    flush met the fault too, and may leave the unclean bit set). A disk fault alone costs
    nothing: the bookie keeps its write cache and retries; only a crash, a failed stop
    or a failed boot after it loses what it holds, each an event here. Any other failed
    boot found its unclean bit clear and clears it again, or found it set by one of these
    events. With the journal, a power cut loses nothing acknowledged: the journal was
    synced before the ack.
    """
    if event in ("wipe", "rot"):
        return True
    return not journal


@define
class LossRecord:
    """Per bookie, the events that may have cost it acknowledged entries (counted), as
    its booting incarnation began, and as its last successful boot began: a boot that
    succeeds after such an event may have lost them; a failed boot settles nothing, and
    an event after a boot began is the next boot's to answer for."""

    journal: bool  # adds are journaled
    _events: Counter[str] = field(factory=Counter)
    _at_boot: dict[str, int] = field(factory=dict)
    _settled: Counter[str] = field(factory=Counter)

    def happened(self, bid: str, event: DiskEvent) -> None:
        if may_lose_acked(event, journal=self.journal):
            self._events[bid] += 1

    def boot_begins(self, bid: str) -> None:
        self._at_boot[bid] = self._events[bid]

    def lost(self, bid: str) -> bool:
        """Whether the history may have cost ``bid`` acknowledged entries since its last
        successful boot began, before its booting incarnation began."""
        return self._at_boot.get(bid, self._events[bid]) > self._settled[bid]

    def booted(self, bid: str) -> bool:
        """``bid`` booted: ``lost``, and what it answers for is settled."""
        lost = self.lost(bid)
        self._settled[bid] = self._at_boot.pop(bid, self._events[bid])
        return lost
