"""Entry log files: records written by a flush, read back through their locations,
and a new log started when one would grow past entry_log_max_size."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embedlog.bookie.entrylog import LOCATION, RECORD, EntryLogs
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
        reopened.close()


def test_a_location_of_another_entry_is_an_io_error_not_a_miss(tmp_path):
    logs = EntryLogs(tmp_path, 1 << 20)
    [a, _b] = logs.append_many(9, [0, 1], {0: b"zero", 1: b"one"})
    with pytest.raises(BookieIOError, match="corrupt"):
        logs.read(9, 1, LOCATION.unpack(a))
    logs.close()
