"""Entry log files: records written by a flush, read back through their locations,
and a new log started when one would grow past entry_log_max_size."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embedlog.bookie.entrylog import LOCATION, RECORD, EntryLogs, coalesce
from embedlog.errors import BookieIOError

flushes = st.lists(
    st.lists(st.integers(0, 300), min_size=1, max_size=40),  # entry sizes of one flush
    min_size=1,
    max_size=4,
)


@settings(max_examples=60, deadline=None)
@given(flushes=flushes, max_size=st.integers(1, 2_000))
def test_every_record_reads_back_and_logs_roll_over_at_max_size(flushes, max_size):
    with tempfile.TemporaryDirectory() as d:
        logs = EntryLogs(Path(d), max_size)
        written: dict[int, tuple[bytes, bytes]] = {}
        next_id = 0
        for sizes in flushes:
            ids = list(range(next_id, next_id + len(sizes)))
            next_id += len(sizes)
            entries = {e: bytes([e % 251]) * n for e, n in zip(ids, sizes, strict=True)}
            where = logs.append_many(9, ids, entries)
            assert len(where) == len(ids)
            written.update((e, (entries[e], loc)) for e, loc in zip(ids, where, strict=True))
        logs.sync()
        for e, (data, loc) in written.items():
            log_id, offset, length = LOCATION.unpack(loc)
            assert length == len(data)
            assert logs.read(9, e, (log_id, offset, length)) == data
            # The rule: a record starts a log, or its data ends within max_size.
            assert offset == 0 or offset + length <= max_size
            assert offset + RECORD.size + length <= logs._files[log_id].size
        logs.close()
        reopened = EntryLogs(Path(d), max_size)  # a boot: the records are where they were
        for e, (data, loc) in written.items():
            assert reopened.read(9, e, LOCATION.unpack(loc)) == data
        # Read together (a READ_BATCH's run): every other entry, then all of them.
        for ids in (sorted(written)[::2], sorted(written)):
            wanted = [(e, LOCATION.unpack(written[e][1])) for e in ids]
            assert reopened.read_many(9, wanted) == ([written[e][0] for e in ids], None)
        reopened.close()


def test_a_location_of_another_entry_is_an_io_error_not_a_miss(tmp_path):
    logs = EntryLogs(tmp_path, 1 << 20)
    [a, _b] = logs.append_many(9, [0, 1], {0: b"zero", 1: b"one"})
    with pytest.raises(BookieIOError, match="corrupt"):
        logs.read(9, 1, LOCATION.unpack(a))
    logs.close()


R = RECORD.size


@pytest.mark.parametrize(
    ("locations", "groups"),
    [
        ([], []),
        ([(0, 0, 10)], [(0, 1)]),
        # Back to back, and with a gap below max_gap: one read.
        ([(0, 0, 10), (0, R + 10, 5), (0, 2 * R + 15 + 99, 1)], [(0, 3)]),
        # A gap of max_gap or more, another log, or a record before the previous one.
        ([(0, 0, 10), (0, R + 10 + 100, 5)], [(0, 1), (1, 2)]),
        ([(0, 0, 10), (1, R + 10, 5)], [(0, 1), (1, 2)]),
        ([(0, 500, 10), (0, 0, 5)], [(0, 1), (1, 2)]),
        # The span is capped: a long record stands alone.
        ([(0, 0, 10), (0, R + 10, 1000), (0, 2 * R + 1010, 10)], [(0, 1), (1, 2), (2, 3)]),
    ],
)
def test_coalesce(locations, groups):
    assert coalesce(locations, max_gap=100, max_span=3 * R + 200) == groups


def test_read_many_stops_at_the_first_record_that_fails_and_says_why(tmp_path):
    logs = EntryLogs(tmp_path, 1 << 20)
    where = [
        LOCATION.unpack(w) for w in logs.append_many(9, [0, 1, 2], {0: b"a", 1: b"b", 2: b"c"})
    ]
    logs.sync()
    spoilt = [(0, where[0]), (1, where[0]), (2, where[2])]  # 1 points at 0's record
    datas, failed = logs.read_many(9, spoilt)
    assert datas == [b"a"]
    assert isinstance(failed, BookieIOError) and "corrupt" in str(failed)
    gone = (where[0][0] + 7, *where[0][1:])  # a log file that is not there
    datas, failed = logs.read_many(9, [(0, gone)])
    assert datas == [] and "missing" in str(failed)
    logs.close()
