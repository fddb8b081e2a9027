"""BP-34 "availability of entries of a ledger": the condensed list of entries a bookie holds
(the body of its LIST_ENTRIES answer; the auditor reads it).

A bookie answers the auditor's LIST_ENTRIES request with this encoding rather
than a plain list or a bit vector: with round-robin striping a bookie holds
``write_quorum`` consecutive entries out of every ``ensemble_size``, so the whole
ledger usually collapses into one or two fixed-size records.

Nomenclature (from the BP):

* a *sequence* is a maximal run of consecutive entry ids; its length is the
  ``sequence_size``;
* consecutive sequences with the same size and the same distance between their
  starts (the ``sequence_period``) form a *SequenceGroup*;
* ``first_sequence_start``/``last_sequence_start`` are the first entries of the
  group's first and last sequences. A group of a single sequence has period 0.

Wire format, big-endian like Java's ByteBuffer, as Apache BookKeeper writes and
reads it (``org.apache.bookkeeper.util.AvailabilityOfEntriesOfLedger``):

* a 64-byte header: int version (0), int number of *sequence groups*, then
  zeros (reserved for future extensions);
* one 24-byte record per SequenceGroup, in ascending order:
  long firstSequenceStart, long lastSequenceStart, int sequenceSize,
  int sequencePeriod.

The BP's prose says bytes 4-7 hold the number of *entries*. BookKeeper's reader
parses that many groups, so a count of entries makes it read records that are
not there (or stop short); its writer puts the group count there, and so do we.

Grouping: the encoder groups greedily, as the BP's worked examples do.
BookKeeper's encoder never extends a group beyond its first sequence (every
group it writes is one sequence with period 0); both are valid encodings of the
same entries, and ``decode`` takes either.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Iterator

from attrs import field, frozen

HEADER_SIZE = 64
GROUP_SIZE = 24
CURRENT_VERSION = 0

_HEADER = struct.Struct(">ii")  # version, number of groups; the rest of the 64 bytes is zero
_GROUP = struct.Struct(">qqii")

_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1


@frozen
class SequenceGroup:
    """Sequences of ``sequence_size`` consecutive entries, starting every ``sequence_period``."""

    first_sequence_start: int
    last_sequence_start: int
    sequence_size: int
    sequence_period: int

    @property
    def num_sequences(self) -> int:
        if self.first_sequence_start == self.last_sequence_start:
            return 1
        return (self.last_sequence_start - self.first_sequence_start) // self.sequence_period + 1

    @property
    def num_entries(self) -> int:
        return self.num_sequences * self.sequence_size

    @property
    def last_entry(self) -> int:
        """The highest entry id in the group (inclusive)."""
        return self.last_sequence_start + self.sequence_size - 1

    def contains(self, entry_id: int) -> bool:
        if entry_id < self.first_sequence_start or entry_id > self.last_entry:
            return False
        offset = entry_id - self.first_sequence_start
        if self.first_sequence_start == self.last_sequence_start:
            # A single sequence: the period is meaningless (0 by convention).
            return offset < self.sequence_size
        return offset % self.sequence_period < self.sequence_size

    def entry_ids(self) -> Iterator[int]:
        starts = (
            [self.first_sequence_start]
            if self.first_sequence_start == self.last_sequence_start
            else range(
                self.first_sequence_start, self.last_sequence_start + 1, self.sequence_period
            )
        )
        for start in starts:
            yield from range(start, start + self.sequence_size)

    def validate(self) -> None:
        """Raise ValueError unless this record describes a well-formed group."""
        if self.first_sequence_start < 0:
            raise ValueError(f"negative entry id in {self}")
        if self.sequence_size < 1:
            raise ValueError(f"sequence size must be positive in {self}")
        if self.last_sequence_start < self.first_sequence_start:
            raise ValueError(f"last sequence starts before the first in {self}")
        if self.last_sequence_start + self.sequence_size - 1 > _LONG_MAX:
            raise ValueError(f"entry ids overflow a long in {self}")
        if self.sequence_period < 0:
            raise ValueError(f"negative sequence period in {self}")
        if self.first_sequence_start == self.last_sequence_start:
            return
        # Sequences are maximal runs, so two of them are at least one missing entry apart.
        if self.sequence_period <= self.sequence_size:
            raise ValueError(f"sequence period must exceed the sequence size in {self}")
        if (self.last_sequence_start - self.first_sequence_start) % self.sequence_period:
            raise ValueError(f"sequence starts are not a whole number of periods apart in {self}")


def _sequences(sorted_ids: list[int]) -> Iterator[tuple[int, int]]:
    """(start, size) of each maximal run of consecutive ids."""
    start = prev = sorted_ids[0]
    for eid in sorted_ids[1:]:
        if eid != prev + 1:
            yield start, prev - start + 1
            start = eid
        prev = eid
    yield start, prev - start + 1


def _group(sequences: Iterable[tuple[int, int]]) -> list[SequenceGroup]:
    """Greedy grouping, as the BP's examples do it.

    A sequence joins the open group when it has the group's size and either the
    group holds one sequence so far (this sequence then fixes the period) or it
    starts exactly one period after the group's last sequence.
    """
    groups: list[SequenceGroup] = []
    first = last = size = period = -1
    for start, seq_size in sequences:
        if first >= 0 and seq_size == size:
            gap = start - last
            if (period == 0 and gap <= _INT_MAX) or gap == period:
                # The period is a Java int on the wire: a wider gap starts a new group.
                period = gap if period == 0 else period
                last = start
                continue
        if first >= 0:
            groups.append(SequenceGroup(first, last, size, period))
        first, last, size, period = start, start, seq_size, 0
    if first >= 0:
        groups.append(SequenceGroup(first, last, size, period))
    return groups


@frozen
class AvailabilityOfEntries:
    """The entries of one ledger held by one bookie, as BP-34 SequenceGroups."""

    _groups: tuple[SequenceGroup, ...] = field(converter=tuple)
    _starts: tuple[int, ...] = field(init=False, repr=False, eq=False)
    num_entries: int = field(init=False)

    @_starts.default
    def _compute_starts(self) -> tuple[int, ...]:
        return tuple(g.first_sequence_start for g in self._groups)

    @num_entries.default
    def _compute_num_entries(self) -> int:
        return sum(g.num_entries for g in self._groups)

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_entry_ids(cls, entry_ids: Iterable[int]) -> AvailabilityOfEntries:
        ids = sorted(set(entry_ids))
        if not ids:
            return cls(())
        if ids[0] < 0 or ids[-1] > _LONG_MAX:
            raise ValueError(f"entry ids must lie in [0, 2**63): got {ids[0]}..{ids[-1]}")
        groups = _group(_sequences(ids))
        if len(groups) > _INT_MAX:
            # The header's group count is a Java int.
            raise ValueError(f"{len(groups)} sequence groups do not fit the header's int count")
        return cls(groups)  # type: ignore[arg-type]  # attrs converter=tuple

    @classmethod
    def encode(cls, entry_ids: Iterable[int]) -> bytes:
        """The BP-34 bytes for ``entry_ids`` (any order; duplicates are ignored)."""
        return cls.from_entry_ids(entry_ids).to_bytes()

    def to_bytes(self) -> bytes:
        out = bytearray(HEADER_SIZE + GROUP_SIZE * len(self._groups))
        _HEADER.pack_into(out, 0, CURRENT_VERSION, len(self._groups))
        for i, g in enumerate(self._groups):
            _GROUP.pack_into(
                out,
                HEADER_SIZE + i * GROUP_SIZE,
                g.first_sequence_start,
                g.last_sequence_start,
                g.sequence_size,
                g.sequence_period,
            )
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> AvailabilityOfEntries:
        """Parse BP-34 bytes (greedy groups or BookKeeper's one group per sequence);
        ValueError if truncated, of another version or inconsistent."""
        data = bytes(data)
        if len(data) < HEADER_SIZE:
            raise ValueError(
                f"availability of entries: {len(data)} bytes, shorter than the "
                f"{HEADER_SIZE}-byte header"
            )
        if (len(data) - HEADER_SIZE) % GROUP_SIZE:
            raise ValueError(
                f"availability of entries: {len(data)} bytes is not a {HEADER_SIZE}-byte header "
                f"plus whole {GROUP_SIZE}-byte sequence groups"
            )
        version, declared = _HEADER.unpack_from(data, 0)
        if version != CURRENT_VERSION:
            raise ValueError(
                f"availability of entries: unsupported version {version} "
                f"(this reader knows {CURRENT_VERSION})"
            )
        present = (len(data) - HEADER_SIZE) // GROUP_SIZE
        if declared != present:
            # Also what a body counting entries in the header (the BP's prose) runs into.
            raise ValueError(
                f"availability of entries: header says {declared} sequence groups but "
                f"{len(data)} bytes hold {present}"
            )
        # Bytes 8..63 are reserved; a reader of version 0 ignores them.
        groups = [
            SequenceGroup(*_GROUP.unpack_from(data, offset))
            for offset in range(HEADER_SIZE, len(data), GROUP_SIZE)
        ]
        prev: SequenceGroup | None = None
        for i, g in enumerate(groups):
            try:
                g.validate()
            except ValueError as exc:
                raise ValueError(f"availability of entries: group {i}: {exc}") from None
            if prev is not None and g.first_sequence_start <= prev.last_entry:
                raise ValueError(
                    f"availability of entries: group {i} starts at {g.first_sequence_start}, "
                    f"not after the previous group's last entry {prev.last_entry}"
                )
            prev = g
        return cls(groups)  # type: ignore[arg-type]  # attrs converter=tuple

    # -- queries -----------------------------------------------------------------------------

    @property
    def groups(self) -> list[SequenceGroup]:
        return list(self._groups)

    def entry_ids(self) -> list[int]:
        return [eid for g in self._groups for eid in g.entry_ids()]

    def contains(self, entry_id: int) -> bool:
        """Whether ``entry_id`` is held: a binary search for its group, then arithmetic."""
        i = bisect.bisect_right(self._starts, entry_id) - 1
        return i >= 0 and self._groups[i].contains(entry_id)

    def __contains__(self, entry_id: object) -> bool:
        return isinstance(entry_id, int) and self.contains(entry_id)

    def __len__(self) -> int:
        return self.num_entries


__all__ = ["AvailabilityOfEntries", "SequenceGroup"]
