"""Disk damage rules: torn tail or corruption (journal), what a damaged entry log lost."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import crc32c
import pytest

from embedlog.bookie import journal, journal_replay
from embedlog.bookie.config import BookieConfig
from embedlog.bookie.entrylog import RECORD, damaged_logs, entry_readable
from embedlog.bookie.journal_replay import FRAME, judge_bad_record, next_intact


def rec(payload: bytes) -> bytes:
    return FRAME.pack(len(payload), crc32c.crc32c(payload)) + payload


A, B, C = rec(b"A" * 40), rec(b"S" + b"x" * 25), rec(b"B" + b"y" * 60)


# An entry header's id 4 and LAC -1 read as a frame: length 4, CRC 0xffffffff, and four
# 0xff bytes, whose CRC32C is 0xffffffff.
ENTRY_4_LAC_MINUS_1 = (4).to_bytes(8, "big") + (-1).to_bytes(8, "big", signed=True)
assert crc32c.crc32c(b"\xff" * 4) == 0xFFFFFFFF


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


def high_length(data: bytes, at: int) -> bytes:
    """The record at ``at`` claims a length far past the end of the file."""
    return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1 :]


MID = len(A)  # where B starts
AFTER = len(A) + len(B)  # where C starts

# (case, file bytes, where the bad record starts, last file?, torn tail?, resume at).
# Corruption resumes only where the bad record's own length leads to an intact record.
CASES = [
    ("short header at the end", A + B[:5], MID, True, True, None),
    ("partial record at the end", A + B[:-7], MID, True, True, None),
    ("partial record, then zeros", A + B[:-7] + bytes(4096), MID, True, True, None),
    (
        "partial record, then garbage",
        A + B[:-7] + b"\x00\x00\x01\x00garbage that is not a whole record",
        MID,
        True,
        True,
        None,
    ),
    ("zeros only (preallocated)", A + bytes(100), MID, True, True, None),
    (
        "last record's payload spoilt (what a torn write leaves)",
        A + flip(B, 20),
        MID,
        True,
        True,
        None,
    ),
    ("payload byte flipped, intact record after", A + flip(B, 20) + C, MID, True, False, AFTER),
    (
        "partial add whose entry header reads as a frame (seed 864 of bounded-races)",
        A + rec(b"A" + bytes(16) + ENTRY_4_LAC_MINUS_1 + b"payload")[:-5],
        MID,
        True,
        True,
        None,
    ),
    ("crc byte flipped, intact record after", A + flip(B, 5) + C, MID, True, False, AFTER),
    ("first record spoilt, the rest intact", flip(A, 30) + B + C, 0, True, False, MID),
    ("length made huge, intact record after", A + high_length(B, 0) + C, MID, True, False, None),
    ("length's low byte flipped, intact record after", A + flip(B, 3) + C, MID, True, False, None),
    ("zeroed pages, intact record after", A + bytes(len(B)) + C, MID, True, False, None),
    (
        "partial record, zeros, then an intact record",
        A + B[:-7] + bytes(300) + C,
        MID,
        True,
        False,
        None,
    ),
    ("partial record at the end of an earlier file", A + B[:-7], MID, False, False, None),
    ("intact-looking tail of an earlier file spoilt", A + flip(B, 20), MID, False, False, None),
]


@pytest.mark.parametrize(
    ("data", "bad", "last", "torn", "resume"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_torn_tail_or_corruption(data, bad, last, torn, resume):
    verdict = judge_bad_record(data, bad, last_file=last)
    assert (verdict.offset, verdict.torn_tail, verdict.resume) == (bad, torn, resume)
    assert verdict.why


# (case, file bytes, where the search starts, the first intact record it finds)
SEARCH_CASES = [
    (
        "inside a damaged length's record: the next record",
        A + high_length(B, 0) + C,
        MID + 1,
        AFTER,
    ),
    ("past zeroed pages", A + bytes(len(B)) + C, MID + 1, AFTER),
    ("past a partial record and zeros", A + B[:-7] + bytes(300) + C, MID + 1, AFTER - 7 + 300),
    (
        "a record-like frame inside a payload comes first",
        A + rec(b"Q" * 8 + rec(b"S" + b"forged state")) + C,
        MID + 1,
        MID + 8 + 8,
    ),
    ("nothing intact", A + B[:-7], MID + 1, None),
    (
        "a frame of no kind the journal writes is no record",
        A + rec(b"A" + bytes(16) + ENTRY_4_LAC_MINUS_1 + b"payload")[:-5],
        MID + 1,
        None,
    ),
]


@pytest.mark.parametrize(
    ("data", "start", "found"), [c[1:] for c in SEARCH_CASES], ids=[c[0] for c in SEARCH_CASES]
)
def test_next_intact(data, start, found):
    assert next_intact(data, start) == (found, True)


def test_a_search_past_its_bounds_is_corruption_not_a_tail(monkeypatch):
    # Garbage whose every offset must be tried as a record's start: a torn tail when the
    # search gets through it; past the search's bounds the safe verdict, never a cut.
    data = A + random.Random(7).randbytes(4096)
    assert judge_bad_record(data, MID, last_file=True).torn_tail
    monkeypatch.setattr(journal_replay, "SCAN_MAX_OFFSETS", 16)
    assert next_intact(data, MID) == (None, False)
    verdict = judge_bad_record(data, MID, last_file=True)
    assert not verdict.torn_tail and verdict.resume is None
    assert "cannot be told" in verdict.why
    monkeypatch.setattr(journal_replay, "SCAN_MAX_OFFSETS", 1 << 22)
    monkeypatch.setattr(journal_replay, "SCAN_MAX_CRC_BYTES", 8)
    assert next_intact(A + B[:-7] + bytes(10) + C, MID) == (None, False)


def test_zero_runs_are_skipped_not_tried(monkeypatch):
    monkeypatch.setattr(journal_replay, "SCAN_MAX_OFFSETS", 64)
    data = A + bytes(8 << 20) + C
    assert next_intact(data, MID) == (len(A) + (8 << 20), True)


def test_a_journal_record_is_never_empty(tmp_path):
    # Replay takes a zero length for zeroed space, so the journal never writes one.
    config = BookieConfig("b1", tmp_path)
    config.journal_dir.mkdir()
    with ThreadPoolExecutor(1) as executor:
        j = journal.Journal(config, executor, 0)
        try:
            with pytest.raises(ValueError, match="never empty"):
                j.append_then(b"", None)
            j.append_then(b"", None, prefix=b"S")  # a prefix alone is a record
        finally:
            j.crash()


# (case, how far the index may point into each log, sizes of the files present, damaged)
LOG_CASES = [
    ("all whole", {0: 100, 1: 50}, {0: 100, 1: 50, 2: 0}, {}),
    ("a file longer than indexed (records not indexed yet)", {0: 100}, {0: 180}, {}),
    ("a missing file", {0: 100, 1: 50}, {1: 50}, {0: 0}),
    ("a file cut short", {0: 100, 1: 50}, {0: 100, 1: 20}, {1: 20}),
    ("an empty file", {3: 70}, {3: 0}, {3: 0}),
    ("a log nothing is indexed in", {}, {0: 10}, {}),
]


@pytest.mark.parametrize(
    ("ends", "sizes", "damaged"), [c[1:] for c in LOG_CASES], ids=[c[0] for c in LOG_CASES]
)
def test_damaged_logs(ends, sizes, damaged):
    assert damaged_logs(ends, sizes) == damaged


# (case, location (log, offset, length), damaged logs, readable?)
READ_CASES = [
    ("log not damaged", (1, 0, 10), {0: 0}, True),
    ("log missing", (0, 0, 10), {0: 0}, False),
    ("record wholly before the cut", (0, 0, 10), {0: RECORD.size + 10}, True),
    ("record across the cut", (0, 0, 10), {0: RECORD.size + 9}, False),
    ("record after the cut", (0, 500, 10), {0: 100}, False),
]


@pytest.mark.parametrize(
    ("where", "damaged", "readable"), [c[1:] for c in READ_CASES], ids=[c[0] for c in READ_CASES]
)
def test_entry_readable(where, damaged, readable):
    assert entry_readable(where, damaged) is readable
