"""Corruption at rest: bits flipped in a bookie's entry logs and journal while it is down.

A disk can return bytes other than those written (a bad sector, a firmware bug, a stray
write): what a bookie wrote, fsync'd and may have acknowledged reads back wrong. The
bookie must find out by its own checksums: each entry log record and each journal record
carries a CRC32C (embedlog/bookie/entrylog.py, journal.py), so a damaged record reads as
an I/O error, never as an entry or as "no such entry", and replay takes a damaged
journal record for corruption. A reader then asks another replica; BP-46 repair finds an
entry it can no longer read back (``holds_readable``) and copies it from its peers.

Which bookies rot, and why the budget is safe: only a bookie whose next boot knows it
may have lost something, i.e. one that crashed without the journal (its unclean bit is
set, so the boot fences and puts its ledgers in limbo and repair checks every entry it
owes), and only within the lossy budget (AQ - 1 bookies per history, the bookies that
may lose what they acknowledged; a journal-off crash already counts against it). So at
most AQ - 1 copies of an acknowledged entry are damaged or lost, and every copy that is
damaged sits on a bookie that answers "unknown" rather than "absent" for it until its
repair ends: recovery never reads it as a negative, whatever WQ - AQ is. A bookie that
rots after a clean shutdown would find out only at the next read of each entry, and
nothing copies such an entry back (the auditor's re-replication does, outside the
simulator): not drawn.

While it serves, too: bits flipped in the entry logs of a running bookie within the
lossy budget (simfaults.py: ``DiskNemesis._live_rot``). Its reads of a damaged record
must answer "I/O error", and every read path meets them while it serves on (a reader's,
a recovery's, a peer's repair); then it crashes and boots as above, so that its repair
copies the damaged entries back (the auditor's part, done here by the crash). Only the
entry logs: the oracle reads the journal for what state is durable
(oracle_durable.py), which a damaged journal record of a bookie still serving would
falsify.

Each rot is a numbered decision (decisions.py); its draws come from a stream of their own
(``seeded(seed, "disk-rot")``), so the scenarios without it draw what they always drew.
"""

from __future__ import annotations

import random

from attrs import frozen

from embedlog.bookie.entrylog import SUFFIX as ENTRY_LOG_SUFFIX
from embedlog.bookie.journal_replay import SUFFIX as JOURNAL_SUFFIX
from embedlog.testing.simdisk import MemoryDisk

FLIPS = (1, 3)  # bits flipped per rot, min..max (each in a file drawn anew)
# Rot under a serving bookie: the mean gaps drawn per seed (None: never), seconds it
# serves on its damaged entry logs, seconds it stays down after its crash.
LIVE_ROT_GAPS = (None, 1.0, 3.0)
LIVE_ROT_SERVES = (0.05, 1.0)
LIVE_ROT_DOWN = (0.05, 0.6)


@frozen
class Flip:
    path: str
    offset: int
    bit: int

    @property
    def kind(self) -> str:
        return "entrylog" if self.path.endswith(ENTRY_LOG_SUFFIX) else "journal"

    def __str__(self) -> str:
        return f"{self.path}@{self.offset}^{self.bit}"


def draw_flips(rng: random.Random, files: list[tuple[str, int]]) -> list[Flip]:
    """The bits a rot flips in ``files`` ((path, size), size > 0): 1 to 3, each in a file
    and at a byte drawn uniformly (record headers, CRCs, entry headers, digests and
    payloads alike)."""
    if not files:
        return []
    flips = []
    for _ in range(rng.randint(*FLIPS)):
        path, size = rng.choice(files)
        flips.append(Flip(path, rng.randrange(size), rng.randrange(8)))
    return flips


def rot_targets(disk: MemoryDisk) -> list[tuple[str, int]]:
    """The files of a bookie's disks a rot may damage: its entry logs and journal files
    (not its cookies, whose damage stops a boot for the operator, nor the index, which
    the simulator keeps as a map)."""
    return disk.files((ENTRY_LOG_SUFFIX, JOURNAL_SUFFIX))


def apply_flips(disk: MemoryDisk, flips: list[Flip]) -> None:
    for f in flips:
        disk.flip(f.path, f.offset, f.bit)
