"""Corruption at rest (simrot.py, the ``*-corrupt`` scenarios): bits flipped in the entry
logs and journal of a bookie that crashed without the journal, while it is down. Its
CRCs catch them (a damaged record reads as an I/O error), readers ask another replica,
and BP-46 repair copies the entry back; a bookie whose entry log reads skip the CRC
(rot_mutants.py) serves the damaged bytes, and an invariant sees its answer at the seed
pinned here."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from rot_mutants import MUTANTS
from seed_search import caught_then_clean, first_caught

from embedlog.testing.sim import run_seed
from embedlog.testing.simdisk import MemoryDisk
from embedlog.testing.simrot import Flip, apply_flips, draw_flips, rot_targets

# Each mutant: the scenario, the first violating seed (from 0) and the invariant that sees
# the damaged entry. A change to the simulator or the protocol code may move the seed: the
# test then searches from 0 up to SEARCH and says where to pin it.
CAUGHT = {
    # a damaged record taken for a good copy: a reader is handed its bytes (at seed 35,
    # nothing repairs it, and the acknowledged entry is left with one intact copy)
    "single-reads-skip-crc": ("bounded-corrupt", 25, "NoOutOfOrderEntries"),
}
SEARCH = 100
# Caught only when the disk rots under a serving bookie (``DiskNemesis._live_rot``): a
# bookie that rotted while down boots in limbo, where "absent" becomes "unknown".
LIVE = {
    "damaged-entry-read-as-absent": ("bounded-corrupt", 43, "NoNegativeForAckedEntry"),
}
LIVE_SEARCH = 300


@pytest.mark.parametrize("mutant", sorted(CAUGHT))
def test_an_entry_log_read_without_its_crc_check_is_caught(mutant):
    scenario, pinned, invariant = CAUGHT[mutant]
    caught, violated = first_caught(MUTANTS[mutant], scenario, pinned, SEARCH)
    if caught == pinned:
        assert invariant in violated
    # The same history with every check in place holds every invariant, and its disks
    # did rot: the CRCs caught it.
    clean = run_seed(caught, scenario, keep_trace=False)
    assert clean.ok, [str(v) for v in clean.violations]
    assert clean.counts["fault.disk_rot.entrylog"] > 0


def _disk() -> MemoryDisk:
    disk = MemoryDisk(random.Random(1), lambda: 0.0)
    for d in ("/b/journal", "/b/ledgers", "/b/index"):
        disk.mkdir(Path(d))
    return disk


def test_rot_hits_only_the_entry_logs_and_the_journal():
    disk = _disk()
    for name, data in (
        ("/b/journal/00000000000000000000.jnl", b"j" * 10),
        ("/b/ledgers/00000000.log", b"e" * 20),
        ("/b/ledgers/00000001.log", b""),  # empty: nothing to flip
        ("/b/index/COOKIE", b"c" * 30),
    ):
        f = disk.open_append(Path(name))
        f.append(data)
        f.sync()
    assert rot_targets(disk) == [
        ("/b/journal/00000000000000000000.jnl", 10),
        ("/b/ledgers/00000000.log", 20),
    ]
    flips = draw_flips(random.Random(7), rot_targets(disk))
    assert 1 <= len(flips) <= 3
    for f in flips:
        assert f.kind in ("entrylog", "journal") and 0 <= f.bit < 8
        assert f.offset < dict(rot_targets(disk))[f.path]
    assert draw_flips(random.Random(7), []) == []


def test_a_flip_changes_one_bit_and_keeps_what_is_durable():
    disk = _disk()
    path = "/b/ledgers/00000000.log"
    f = disk.open_append(Path(path))
    f.append(b"\x00" * 8)
    f.sync()
    apply_flips(disk, [Flip(path, 3, 6), Flip(path, 5, 0)])
    assert disk.read(Path(path)) == b"\x00\x00\x00\x40\x00\x01\x00\x00"
    assert disk.durable_bytes(Path(path)) == 8


def test_a_power_cut_is_remembered_until_the_next_boot_locks_the_disks():
    disk = _disk()
    assert not disk.powered_off
    disk.power_cut()
    assert disk.powered_off
    disk.lock(Path("/b/index")).release()
    assert not disk.powered_off


@pytest.mark.parametrize("mutant", sorted(LIVE))
def test_a_damaged_entry_read_as_absent_by_a_serving_bookie_is_caught(mutant):
    scenario, pinned, invariant = LIVE[mutant]
    caught_then_clean(
        MUTANTS[mutant], scenario, pinned, LIVE_SEARCH, invariant, "fault.disk_rot_live"
    )
