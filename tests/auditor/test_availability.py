"""BP-34 availability of entries: the BP's own examples, BookKeeper's bytes, round trips and
corrupt input."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embedlog.wire.availability import (
    GROUP_SIZE,
    HEADER_SIZE,
    AvailabilityOfEntries,
    SequenceGroup,
)


def header(num_groups: int, version: int = 0) -> bytes:
    return struct.pack(">ii", version, num_groups) + bytes(HEADER_SIZE - 8)


def group(first: int, last: int, size: int, period: int) -> bytes:
    return struct.pack(">qqii", first, last, size, period)


# -- the BP's examples, byte for byte ---------------------------------------------------------

EXAMPLE_1 = [1, 2, 4, 5, 7, 8, 10, 11]
EXAMPLE_2 = [1, 2, 3, 6, 7, 8, 11, 13, 16, 17, 18, 21, 22]


def test_bp_example_1_best_case() -> None:
    data = AvailabilityOfEntries.encode(EXAMPLE_1)
    assert data == header(1) + group(1, 10, 2, 3)
    decoded = AvailabilityOfEntries.decode(data)
    assert decoded.groups == [SequenceGroup(1, 10, 2, 3)]
    assert decoded.num_entries == 8
    assert decoded.entry_ids() == EXAMPLE_1


def test_bp_example_2_missing_entry() -> None:
    data = AvailabilityOfEntries.encode(EXAMPLE_2)
    assert data == (
        header(4)
        + group(1, 6, 3, 5)
        + group(11, 13, 1, 2)
        + group(16, 16, 3, 0)
        + group(21, 21, 2, 0)
    )
    assert len(data) == HEADER_SIZE + 4 * GROUP_SIZE
    decoded = AvailabilityOfEntries.decode(data)
    assert [
        (g.first_sequence_start, g.last_sequence_start, g.sequence_size, g.sequence_period)
        for g in decoded.groups
    ] == [(1, 6, 3, 5), (11, 13, 1, 2), (16, 16, 3, 0), (21, 21, 2, 0)]
    assert decoded.entry_ids() == EXAMPLE_2
    assert not decoded.contains(12)


# -- BookKeeper's bytes ------------------------------------------------------------------------
#
# org.apache.bookkeeper.util.AvailabilityOfEntriesOfLedger: header = int version 0, int number of
# sequence groups, 56 zero bytes; then per group long firstSequenceStart, long lastSequenceStart,
# int sequenceSize, int sequencePeriod, all big-endian. The expected bytes below are spelled out
# in hex from that layout, not built with the helpers above.

ZEROS_56 = "00" * 56


def hexheader(num_groups: int) -> str:
    return "00000000" + f"{num_groups:08x}" + ZEROS_56


def hexgroup(first: int, last: int, size: int, period: int) -> str:
    return f"{first:016x}{last:016x}{size:08x}{period:08x}"


@pytest.mark.parametrize(
    ("ids", "expected_hex"),
    [
        # version 0, 0 groups; version 0, 1 group: entry 5 alone
        ([], "0000000000000000" + ZEROS_56),
        ([5], "0000000000000001" + ZEROS_56 + "000000000000000500000000000000050000000100000000"),
        # BP example 1: 8 entries, one group: bytes 4-7 say 1, not 8.
        (
            [1, 2, 4, 5, 7, 8, 10, 11],
            "0000000000000001" + ZEROS_56 + "0000000000000001000000000000000a0000000200000003",
        ),
        # BP example 2: 13 entries, four groups.
        (
            EXAMPLE_2,
            hexheader(4)
            + hexgroup(1, 6, 3, 5)
            + hexgroup(11, 13, 1, 2)
            + hexgroup(16, 16, 3, 0)
            + hexgroup(21, 21, 2, 0),
        ),
        # A round-robin bookie (E5 WQ3, slot 3) of 6001 entries: two groups.
        (
            [e for e in range(10_001) if e % 5 in (0, 3, 4)],
            hexheader(2) + hexgroup(0, 0, 1, 0) + hexgroup(3, 9998, 3, 5),
        ),
    ],
)
def test_encoding_byte_for_byte(ids: list[int], expected_hex: str) -> None:
    assert AvailabilityOfEntries.encode(ids) == bytes.fromhex(expected_hex)
    decoded = AvailabilityOfEntries.decode(bytes.fromhex(expected_hex))
    assert decoded.entry_ids() == sorted(ids) and decoded.num_entries == len(ids)


# What BookKeeper's encoder writes: it never adds a second sequence to a group, so every group is
# one sequence with period 0 (the header counts them).
@pytest.mark.parametrize(
    ("bookkeeper_hex", "ids"),
    [
        (
            hexheader(4)
            + hexgroup(1, 1, 2, 0)
            + hexgroup(4, 4, 2, 0)
            + hexgroup(7, 7, 2, 0)
            + hexgroup(10, 10, 2, 0),
            EXAMPLE_1,
        ),
        (
            hexheader(6)
            + hexgroup(1, 1, 3, 0)
            + hexgroup(6, 6, 3, 0)
            + hexgroup(11, 11, 1, 0)
            + hexgroup(13, 13, 1, 0)
            + hexgroup(16, 16, 3, 0)
            + hexgroup(21, 21, 2, 0),
            EXAMPLE_2,
        ),
        (
            hexheader(3)
            + hexgroup(0, 0, 3, 0)
            + hexgroup(2**40, 2**40, 1, 0)
            + hexgroup(2**63 - 2, 2**63 - 2, 2, 0),
            [0, 1, 2, 2**40, 2**63 - 2, 2**63 - 1],
        ),
    ],
)
def test_decodes_bookkeepers_one_group_per_sequence(bookkeeper_hex: str, ids: list[int]) -> None:
    data = bytes.fromhex(bookkeeper_hex)
    decoded = AvailabilityOfEntries.decode(data)
    assert decoded.entry_ids() == ids and decoded.num_entries == len(ids)
    assert all(decoded.contains(e) for e in ids)
    assert not any(decoded.contains(e) for e in (3, 9, 12, 2**40 + 1) if e not in ids)
    assert decoded.to_bytes() == data  # decoded as received, groups and all
    # Our own encoding of the same entries is the greedy one, and means the same.
    ours = AvailabilityOfEntries.decode(AvailabilityOfEntries.encode(ids))
    assert len(ours.groups) <= len(decoded.groups) and ours.entry_ids() == ids


def test_round_robin_bookie_is_one_group() -> None:
    # Ensemble 5, write quorum 3: bookie 3 stores entries e with e % 5 in {3, 4, 0}.
    # Entry 0 stands alone, then runs of 3 every 5 entries: two records for 6001 entries.
    ids = [e for e in range(10_001) if e % 5 in (0, 3, 4)]
    decoded = AvailabilityOfEntries.decode(AvailabilityOfEntries.encode(ids))
    assert decoded.groups == [SequenceGroup(0, 0, 1, 0), SequenceGroup(3, 9998, 3, 5)]
    assert decoded.num_entries == len(ids)


def test_empty() -> None:
    data = AvailabilityOfEntries.encode([])
    assert data == header(0)
    decoded = AvailabilityOfEntries.decode(data)
    assert decoded.groups == [] and decoded.entry_ids() == [] and decoded.num_entries == 0
    assert not decoded.contains(0)


def test_encode_accepts_any_iterable_unsorted_with_duplicates() -> None:
    expected = AvailabilityOfEntries.encode(EXAMPLE_2)
    assert AvailabilityOfEntries.encode(reversed(EXAMPLE_2 + EXAMPLE_2)) == expected
    assert AvailabilityOfEntries.encode(iter(set(EXAMPLE_2))) == expected
    assert AvailabilityOfEntries.encode(e for e in EXAMPLE_2) == expected


def test_single_sequence_groups_have_period_zero() -> None:
    decoded = AvailabilityOfEntries.decode(AvailabilityOfEntries.encode([0, 1, 2, 10, 20, 21]))
    assert decoded.groups == [
        SequenceGroup(0, 0, 3, 0),
        SequenceGroup(10, 10, 1, 0),
        SequenceGroup(20, 20, 2, 0),
    ]


def test_big_entry_ids() -> None:
    top = 2**63 - 1
    ids = [0, 2**40, 2**40 + 1, top - 1, top]
    decoded = AvailabilityOfEntries.decode(AvailabilityOfEntries.encode(ids))
    assert decoded.entry_ids() == ids
    assert decoded.contains(top) and not decoded.contains(2**40 + 2)
    # A gap wider than a Java int cannot be a period: those sequences get their own groups.
    assert all(0 <= g.sequence_period <= 2**31 - 1 for g in decoded.groups)


def test_rejects_out_of_range_ids() -> None:
    with pytest.raises(ValueError):
        AvailabilityOfEntries.encode([-1, 0])
    with pytest.raises(ValueError):
        AvailabilityOfEntries.encode([2**63])


# -- round trips ------------------------------------------------------------------------------

entry_sets = st.one_of(
    st.sets(st.integers(min_value=0, max_value=300), max_size=200),
    st.sets(st.integers(min_value=0, max_value=2**63 - 1), max_size=30),
    # striped like a real bookie: runs of a fixed size every period, with holes punched in
    st.builds(
        lambda size, period, n, holes: {
            start + k
            for start in range(0, n * period, period)
            for k in range(size)
            if start + k not in holes
        },
        st.integers(1, 5),
        st.integers(6, 12),
        st.integers(0, 60),
        st.sets(st.integers(0, 700), max_size=10),
    ),
)


@settings(max_examples=300, deadline=None)
@given(entry_sets)
def test_round_trip(ids: set[int]) -> None:
    data = AvailabilityOfEntries.encode(ids)
    assert (len(data) - HEADER_SIZE) % GROUP_SIZE == 0
    decoded = AvailabilityOfEntries.decode(data)
    assert decoded.entry_ids() == sorted(ids)
    assert decoded.num_entries == len(ids)
    assert decoded.to_bytes() == data
    for g in decoded.groups:
        g.validate()
        if g.first_sequence_start == g.last_sequence_start:
            assert g.sequence_period == 0


@settings(max_examples=300, deadline=None)
@given(entry_sets, st.lists(st.integers(min_value=-5, max_value=800), max_size=50))
def test_contains_matches_a_set(ids: set[int], probes: list[int]) -> None:
    decoded = AvailabilityOfEntries.decode(AvailabilityOfEntries.encode(ids))
    candidates = set(probes) | ids | {i + 1 for i in ids} | {i - 1 for i in ids}
    for probe in candidates:
        assert decoded.contains(probe) == (probe in ids), probe


@settings(max_examples=200, deadline=None)
@given(entry_sets)
def test_grouping_is_maximal(ids: set[int]) -> None:
    """Neighbouring groups could not have been one: the greedy grouping never splits needlessly."""
    groups = AvailabilityOfEntries.decode(AvailabilityOfEntries.encode(ids)).groups
    for a, b in itertools.pairwise(groups):
        if a.sequence_size != b.sequence_size:
            continue
        gap = b.first_sequence_start - a.last_sequence_start
        if a.first_sequence_start == a.last_sequence_start:
            assert gap > 2**31 - 1  # only a period too wide for an int keeps them apart
        else:
            assert gap != a.sequence_period


def test_contains_does_not_expand() -> None:
    # Half of 2**62 entries: expanding them would never finish, contains() is arithmetic.
    data = header(1) + group(0, 2**31 - 2, 1, 2)
    decoded = AvailabilityOfEntries.decode(data)
    assert decoded.num_entries == 2**30
    assert decoded.contains(2**31 - 2) and not decoded.contains(2**31 - 1)
    assert not decoded.contains(2**31)


# -- corrupt input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "shorter than"),
        (header(0)[:63], "shorter than"),
        (header(1) + group(0, 0, 1, 0)[:23], "whole 24-byte"),
        (header(1) + group(0, 0, 1, 0) + b"\x00", "whole 24-byte"),
        (header(0, version=1), "unsupported version 1"),
        (header(0, version=-1), "unsupported version"),
        # The group count must match the records that follow.
        (header(5) + group(0, 0, 1, 0), "header says 5 sequence groups but 88 bytes hold 1"),
        (header(0) + group(0, 0, 1, 0), "header says 0 sequence groups"),
        (header(1), "header says 1 sequence groups but 64 bytes hold 0"),
        (header(-1), "header says -1 sequence groups"),
        # The BP's prose (entries in the header): BookKeeper would read 8 records here.
        (header(8) + group(1, 10, 2, 3), "header says 8 sequence groups"),
        (header(1) + group(-3, -3, 1, 0), "negative entry id"),
        (header(1) + group(0, 0, 0, 0), "sequence size must be positive"),
        (header(1) + group(5, 0, 1, 0), "last sequence starts before"),
        (header(1) + group(0, 4, 1, 0), "period must exceed"),
        (header(1) + group(0, 4, 2, 2), "period must exceed"),
        (header(1) + group(0, 5, 1, 2), "whole number of periods"),
        (header(2) + group(0, 0, 1, 0) + group(0, 0, 1, 0), "not after the previous"),
        (header(2) + group(0, 0, 3, 0) + group(2, 2, 1, 0), "not after the previous"),
        (header(2) + group(10, 10, 1, 0) + group(3, 3, 1, 0), "not after the previous"),
        (header(1) + group(2**63 - 1, 2**63 - 1, 2, 0), "overflow"),
    ],
)
def test_decode_rejects_corrupt_input(data: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        AvailabilityOfEntries.decode(data)


def test_reserved_header_bytes_are_ignored() -> None:
    # The BP reserves bytes 8..63 for future use; a version-0 reader must not choke on them.
    data = bytearray(AvailabilityOfEntries.encode(EXAMPLE_1))
    data[40] = 0x7F
    assert AvailabilityOfEntries.decode(bytes(data)).entry_ids() == EXAMPLE_1


def test_decode_accepts_bytearray_and_memoryview() -> None:
    data = AvailabilityOfEntries.encode(EXAMPLE_2)
    assert AvailabilityOfEntries.decode(bytearray(data)).entry_ids() == EXAMPLE_2
    assert AvailabilityOfEntries.decode(memoryview(data)).entry_ids() == EXAMPLE_2


def test_sequence_group_is_frozen() -> None:
    g = AvailabilityOfEntries.decode(AvailabilityOfEntries.encode(EXAMPLE_1)).groups[0]
    with pytest.raises(AttributeError):
        g.sequence_size = 9  # type: ignore[misc]
