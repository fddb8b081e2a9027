"""The batch read's decisions: which bookie reads which entries, what an answer proves,
and the bookie's bounds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from embedlog.ledger.batch_reads import Run, plan_runs, verified_run
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.metadata.striping import write_set_bookies
from embedlog.wire.entry import Digester, DigestType
from embedlog.wire.limits import (
    MAX_READ_BATCH_BYTES,
    MAX_READ_BATCH_ENTRIES,
    read_batch_bounds,
    read_batch_fits,
)
from embedlog.wire.messages import pack_entries

ABC = ("a", "b", "c")


@pytest.mark.parametrize(
    ("fragments", "first", "last", "max_count", "runs"),
    [
        # E3: each bookie reads the entries whose write set it heads, 3 apart.
        (((0, ABC),), 0, 7, 10, [("a", 0, 3, 3), ("b", 1, 3, 3), ("c", 2, 3, 2)]),
        (((0, ABC),), 4, 5, 10, [("b", 4, 3, 1), ("c", 5, 3, 1)]),
        (
            ((0, ABC),),
            0,
            7,
            2,
            [("a", 0, 3, 2), ("a", 6, 3, 1), ("b", 1, 3, 2), ("b", 7, 3, 1), ("c", 2, 3, 2)],
        ),
        # A new fragment at 5 (d replaced a): its entries go to its own ensemble.
        (
            ((0, ABC), (5, ("d", "b", "c"))),
            3,
            8,
            10,
            [("a", 3, 3, 1), ("b", 4, 3, 1), ("c", 5, 3, 2), ("d", 6, 3, 1), ("b", 7, 3, 1)],
        ),
        # An unbounded ledger trimmed past its first fragment's start: ids before the
        # first fragment belong to it (LedgerMetadata.fragment_for).
        (((10, ABC),), 8, 9, 10, [("c", 8, 3, 1), ("a", 9, 3, 1)]),
        # E1.
        (((0, ("a",)),), 0, 4, 2, [("a", 0, 1, 2), ("a", 2, 1, 2), ("a", 4, 1, 1)]),
    ],
)
def test_plan_runs(fragments, first, last, max_count, runs):
    assert plan_runs(fragments, first, last, max_count) == [Run(*r) for r in runs]


@given(
    starts=st.lists(st.integers(0, 60), min_size=1, max_size=4, unique=True),
    size=st.integers(1, 5),
    wq=st.integers(1, 5),
    first=st.integers(0, 70),
    span=st.integers(0, 70),
    max_count=st.integers(1, 9),
)
def test_every_entry_is_read_once_from_the_head_of_its_write_set(
    starts, size, wq, first, span, max_count
):
    wq = min(wq, size)
    names = iter(f"b{i}" for i in range(100))
    fragments = tuple((s, tuple(next(names) for _ in range(size))) for s in sorted(starts))
    md = LedgerMetadata(1, size, wq, 1, fragments)
    last = first + span
    runs = plan_runs(md.fragments, first, last, max_count)
    read = sorted(e for run in runs for e in run.ids)
    assert read == list(range(first, last + 1))
    for run in runs:
        assert 1 <= run.count <= max_count
        for e in run.ids:
            assert run.bookie == write_set_bookies(e, md.ensemble_for(e), wq)[0]


D = Digester(DigestType.CRC32C)


def answer(lid, ids, tamper=None):
    entries = [(e, D.pack(lid, e, -1, b"p%d" % e)) for e in ids]
    if tamper is not None:
        e, packed = entries[tamper]
        entries[tamper] = (e, packed[:-1] + bytes([packed[-1] ^ 1]))
    return pack_entries(entries)


RUN = Run("a", 2, 3, 4)  # entries 2, 5, 8, 11


@pytest.mark.parametrize(
    ("start", "body", "kept", "whole"),
    [
        (0, answer(1, [2, 5, 8, 11]), [2, 5, 8, 11], True),
        (0, answer(1, [2, 5]), [2, 5], True),  # cut short by the bookie: fine
        (0, b"", [], True),  # nothing held
        (2, answer(1, [8, 11]), [8, 11], True),  # the rest of a run
        (0, answer(1, [2, 5, 8], tamper=1), [2], False),  # a spoilt copy
        (0, answer(1, [2, 6]), [2], False),  # an id the run does not have
        (0, answer(1, [5]), [], False),  # not the first asked
        (0, answer(2, [2]), [], False),  # another ledger's entry
        (0, answer(1, [2, 5])[:-1], [2], False),  # truncated inside an entry
        (0, answer(1, [2]) + b"\x00" * 5, [2], False),  # inside a frame's id and length
        (0, answer(1, [2, 5, 8, 11, 14]), [2, 5, 8, 11], False),  # more than asked
        (0, pack_entries([(2, b"short")]), [], False),  # not even a header
    ],
)
def test_verified_run(start, body, kept, whole):
    rows, all_good = verified_run(D, 1, RUN, start, body)
    assert [r[0] for r in rows] == kept
    assert [r[2] for r in rows] == [b"p%d" % e for e in kept]
    assert all_good is whole


@pytest.mark.parametrize(
    ("asked", "bounded"),
    [
        ((1, 1), (1, 1)),
        ((MAX_READ_BATCH_ENTRIES + 1, 2**32 - 1), (MAX_READ_BATCH_ENTRIES, MAX_READ_BATCH_BYTES)),
        ((10, 1000), (10, 1000)),
    ],
)
def test_read_batch_bounds(asked, bounded):
    assert read_batch_bounds(*asked) == bounded


@pytest.mark.parametrize(
    ("taken", "total", "size", "max_bytes", "fits"),
    [
        (0, 0, 10_000, 100, True),  # the first entry always goes in
        (1, 60, 40, 100, True),
        (1, 60, 41, 100, False),
        (5, 100, 0, 100, True),
    ],
)
def test_read_batch_fits(taken, total, size, max_bytes, fits):
    assert read_batch_fits(taken, total, size, max_bytes) is fits
