"""Reading the journal back: its files, its record frame, and replay, which tells a torn
tail (cut) from corruption (reported: the boot is suspicious, BP-46).

Files are named by the log sequence number (LSN: a byte position in the journal as a
whole) of their first record. Record frame: length u32 | crc32c u32 | payload (never
empty). A record that is not intact (short, or a bad CRC) is judged by
``judge_bad_record``: a torn tail is cut, so nothing is ever appended after garbage; a
bad record with an intact one after it is corruption, which replay reports and skips:
it goes on at the next record when the bad one's length still leads there, else at the
next file (BP-46 repair brings back what was dropped). The writer is journal.py.
"""

from __future__ import annotations

import logging
import re
import struct
from collections.abc import Iterator
from pathlib import Path

import crc32c
from attrs import frozen

from embedlog.bookie.disk import REAL_DISK, Disk, child
from embedlog.bookie.records import well_formed

log = logging.getLogger(__name__)

FRAME = struct.Struct(">II")
SUFFIX = ".jnl"


def journal_files(directory: Path, disk: Disk = REAL_DISK) -> list[tuple[int, Path]]:
    """The journal's files in ``directory``, by the LSN they start at."""
    files = []
    for name in disk.listdir(directory):
        if name.endswith(SUFFIX):
            try:
                files.append((int(name[: -len(SUFFIX)]), child(directory, name)))
            except ValueError:
                continue
    return sorted(files)


# Bounds of the search for an intact record after a bad one (docs/security.md). Past
# either, the search gives up and the damage counts as corruption: the safe verdict.
SCAN_MAX_OFFSETS = 1 << 22  # offsets tried as a record's start (runs of zeros skip free)
SCAN_MAX_CRC_BYTES = 1 << 30  # payload bytes checksummed while trying them
_NONZERO = re.compile(rb"[^\x00]")


def intact_end(data: bytes, pos: int) -> int | None:
    """Where the record starting at ``pos`` ends, if it is intact (whole, non-empty, of a
    kind the journal writes, its CRC right); else None."""
    if pos + FRAME.size > len(data):
        return None
    length, crc = FRAME.unpack_from(data, pos)
    end = pos + FRAME.size + length
    if length == 0 or end > len(data) or not well_formed(data[pos + FRAME.size], length):
        return None
    if crc32c.crc32c(memoryview(data)[pos + FRAME.size : end]) != crc:
        return None
    return end


def next_intact(data: bytes, start: int) -> tuple[int | None, bool]:
    """The offset of the first intact record at or after ``start`` (None: there is none),
    and whether the search was complete (False: it reached its bounds first)."""
    view = memoryview(data)
    n = len(data)
    pos, tried, checksummed = start, 0, 0
    while pos + FRAME.size < n:
        length, crc = FRAME.unpack_from(data, pos)
        if length == 0:
            # Bytes pos..pos+3 are zero; no record starts before the 4 bytes that end at
            # the next non-zero one (preallocated or zeroed space is skipped at once).
            nonzero = _NONZERO.search(data, pos + 4)
            if nonzero is None:
                return None, True
            pos = max(pos + 1, nonzero.start() - 3)
            continue
        tried += 1
        if tried > SCAN_MAX_OFFSETS:
            return None, False
        end = pos + FRAME.size + length
        if end <= n and well_formed(data[pos + FRAME.size], length):
            checksummed += length
            if checksummed > SCAN_MAX_CRC_BYTES:
                return None, False
            if crc32c.crc32c(view[pos + FRAME.size : end]) == crc:
                return pos, True
        pos += 1
    return None, True


@frozen
class BadRecord:
    """What replay makes of a journal record that is not intact."""

    offset: int  # where it starts in its file
    torn_tail: bool  # True: cut the file here; False: corruption
    resume: int | None  # corruption: where replay may go on (None: at the next file)
    why: str


def judge_bad_record(data: bytes, offset: int, *, last_file: bool) -> BadRecord:
    """Is the bad record at ``offset`` of a journal file's ``data`` a torn tail or corruption?

    A crash can tear only what was being written: the last group commit of the last
    file (the journal fsyncs a file before it starts the next). So a bad record is a
    torn tail only in the last file and only with no intact record anywhere after it;
    whatever follows it then (a partial record, zeros, garbage) was never fsync'd, so
    never acknowledged. A bad record with an intact one after it lost bytes that were
    written, and maybe acknowledged: corruption. (Pages of the torn group that reached
    the disk out of order look the same; taking them for corruption costs a protective
    boot, never an entry.) The one damage this cannot see: the file's very last record
    spoilt in place, which is exactly what a torn write leaves.

    Replay goes on after corruption only when the bad record's own length leads to an
    intact record: only its bytes are spoilt. Found by searching, an intact record may
    lie inside the damaged one (an entry's payload can hold anything, a record-like
    frame too), so the rest of the file is left to BP-46 repair instead.
    """
    if offset + FRAME.size <= len(data):
        length, _ = FRAME.unpack_from(data, offset)
        end = offset + FRAME.size + length
        if length and end < len(data) and intact_end(data, end) is not None:
            return BadRecord(
                offset,
                False,
                end,
                f"only this record is spoilt: the next, at byte {end}, is intact",
            )
    found, complete = next_intact(data, offset + 1)
    if found is not None:
        return BadRecord(offset, False, None, f"an intact record follows at byte {found}")
    if not last_file:
        return BadRecord(
            offset, False, None, "the file was complete before the next one was started"
        )
    if not complete:
        return BadRecord(
            offset,
            False,
            None,
            "no intact record was found after it within the search's bounds, so it cannot "
            "be told from corruption",
        )
    return BadRecord(offset, True, None, "no intact record follows: a torn tail")


@frozen
class JournalDamage:
    """Journal records lost to damage, not to a crash (a reason for a suspicious boot)."""

    path: Path
    offset: int | None  # where the damage starts in the file; None: before the file
    why: str

    def describe(self) -> str:
        if self.offset is None:
            return f"journal {self.path}: {self.why}"
        return f"journal {self.path} is corrupt at byte {self.offset}: {self.why}"


class Replay:
    """A journal directory replayed from an LSN: iterate for (lsn, payload) of every intact
    record at or after it. Torn tails are cut; afterwards ``damage`` lists the records lost
    to anything else and ``end`` is the LSN just past the journal's last byte."""

    def __init__(self, directory: Path, from_lsn: int, disk: Disk = REAL_DISK) -> None:
        self.directory = directory
        self.disk = disk
        self.from_lsn = from_lsn
        self.end = from_lsn
        self.damage: list[JournalDamage] = []

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        files = journal_files(self.directory, self.disk)
        covered = self.from_lsn  # every LSN below this is in ledger storage or replayed
        for i, (start, path) in enumerate(files):
            next_start = files[i + 1][0] if i + 1 < len(files) else None
            if next_start is not None and next_start <= self.from_lsn:
                continue
            if start > covered:
                self.damage.append(
                    JournalDamage(
                        path,
                        None,
                        f"the records from LSN {covered} to {start}, before this file, are "
                        "missing: journal files were deleted, or the index is older than "
                        "the journal (it lost writes)",
                    )
                )
            data = self.disk.read(path)
            pos = 0
            while pos < len(data):
                if pos + FRAME.size <= len(data):  # intact_end, inlined: the boot's hot loop
                    length, crc = FRAME.unpack_from(data, pos)
                    end = pos + FRAME.size + length
                    if length and end <= len(data):
                        payload = data[pos + FRAME.size : end]
                        if crc32c.crc32c(payload) == crc and well_formed(payload[0], length):
                            if start + pos >= self.from_lsn:
                                yield start + pos, payload
                            pos = end
                            continue
                bad = judge_bad_record(data, pos, last_file=next_start is None)
                if bad.torn_tail:
                    log.warning(
                        "journal %s: torn tail at byte %d of %d, cut there", path, pos, len(data)
                    )
                    # Durably: a journal file started after this one must find this one
                    # whole (``judge_bad_record`` counts on it).
                    self.disk.truncate(path, pos)
                    data = data[:pos]
                    break
                lost_to = start + (bad.resume if bad.resume is not None else len(data))
                if lost_to > self.from_lsn:
                    found = JournalDamage(path, pos, bad.why)
                    log.error("%s; the records it held are lost", found.describe())
                    self.damage.append(found)
                else:  # wholly before the checkpoint: ledger storage has all of it
                    log.warning(
                        "journal %s: damaged at byte %d, before the checkpoint: nothing lost",
                        path,
                        pos,
                    )
                if bad.resume is None:
                    break
                pos = bad.resume
            covered = max(covered, start + len(data))
            self.end = max(self.end, start + len(data))
